package lockcore_test

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
	"github.com/lockgate/lockgate/lockcore/nodetest"
)

// errSwitchedOff is the error of a node the tests switch off.
var errSwitchedOff = errors.New("switched off")

type nodeCall struct {
	node, op string
	err      error
}

// spyObserver records what a Redlock reports.
type spyObserver struct {
	mu     sync.Mutex
	calls  []nodeCall
	quorum []string
	fenced int
}

func (o *spyObserver) NodeCall(node, op string, d time.Duration, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = append(o.calls, nodeCall{node, op, err})
}

func (o *spyObserver) QuorumFailed(op string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.quorum = append(o.quorum, op)
}

func (o *spyObserver) Fenced() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.fenced++
}

// take returns what was reported since the last take.
func (o *spyObserver) take() (calls []nodeCall, quorum []string, fenced int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	calls, quorum, fenced = o.calls, o.quorum, o.fenced
	o.calls, o.quorum, o.fenced = nil, nil, 0
	slices.SortFunc(calls, func(a, b nodeCall) int {
		return cmp.Or(cmp.Compare(a.node, b.node), cmp.Compare(a.op, b.op))
	})
	return calls, quorum, fenced
}

// observed returns a Redlock over three in-memory nodes, n1 to n3, behind
// fault-injecting wrappers, and the spy it reports to.
func observed(t *testing.T) (*lockcore.Redlock, []*nodetest.Faulty, *spyObserver) {
	t.Helper()
	var nodes []lockcore.Node
	var sw []*nodetest.Faulty
	for _, name := range []string{"n1", "n2", "n3"} {
		n := nodetest.NewFaulty(memnode.New(&memnode.Options{Name: name}))
		nodes, sw = append(nodes, n), append(sw, n)
	}
	spy := &spyObserver{}
	// A node timeout of 200 ms, so that a node the tests do not hang is
	// never timed out by a busy machine.
	rl, err := lockcore.New(nodes, &lockcore.Options{NodeTimeout: 200 * time.Millisecond, MinTTL: 400 * time.Millisecond, Observer: spy, CheckInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rl.Close)
	// The first operation makes the guard's first check of every node.
	if _, err := rl.Inspect(context.Background(), "warm-up"); !errors.Is(err, lockcore.ErrNotHeld) {
		t.Fatalf("warm-up: %v", err)
	}
	if calls, _, _ := spy.take(); len(calls) != 6 {
		t.Fatalf("warm-up calls %v: want a check and an inspect on each node", calls)
	}
	return rl, sw, spy
}

const obsLease = "observer-lease-0123456789"

func TestObserverSeesEveryNodeCall(t *testing.T) {
	rl, _, spy := observed(t)
	ctx := context.Background()
	if _, err := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "r", LeaseID: obsLease, TTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	// A call returns at the first quorum; a node that missed the grace
	// reports its call when it answers (Settle waits for that).
	lockcore.Settle(rl)
	calls, quorum, fenced := spy.take()
	want := []nodeCall{{"n1", "acquire", nil}, {"n2", "acquire", nil}, {"n3", "acquire", nil}}
	if !slices.Equal(calls, want) || len(quorum) != 0 || fenced != 0 {
		t.Errorf("acquire reported %v, quorum %v, fenced %d; want %v and nothing else", calls, quorum, fenced, want)
	}

	steps := []struct {
		op string
		do func() error
	}{
		{"extend", func() error {
			_, err := rl.Extend(ctx, lockcore.ExtendRequest{Resource: "r", LeaseID: obsLease})
			return err
		}},
		{"inspect", func() error { _, err := rl.Inspect(ctx, "r"); return err }},
		{"check", func() error { return rl.Ready(ctx) }},
		{"release", func() error { return rl.Release(ctx, lockcore.ReleaseRequest{Resource: "r", LeaseID: obsLease}) }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.op, err)
		}
		lockcore.Settle(rl)
		calls, _, _ := spy.take()
		want := []nodeCall{{"n1", s.op, nil}, {"n2", s.op, nil}, {"n3", s.op, nil}}
		if !slices.Equal(calls, want) {
			t.Errorf("%s reported %v, want %v", s.op, calls, want)
		}
	}
}

func TestObserverSeesQuorumFailuresAndNodeErrors(t *testing.T) {
	rl, sw, spy := observed(t)
	ctx := context.Background()
	if _, err := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "q", LeaseID: obsLease, TTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	lockcore.Settle(rl) // every node has its copy before two are switched off
	spy.take()
	sw[0].SetDown(errSwitchedOff)
	sw[1].SetHang(true)

	steps := []struct {
		op string
		do func() error
	}{
		{"acquire", func() error {
			_, err := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "other", TTL: time.Second})
			return err
		}},
		{"extend", func() error {
			_, err := rl.Extend(ctx, lockcore.ExtendRequest{Resource: "q", LeaseID: obsLease})
			return err
		}},
		{"inspect", func() error { _, err := rl.Inspect(ctx, "q"); return err }},
		{"check", func() error { return rl.Ready(ctx) }},
		{"release", func() error { return rl.Release(ctx, lockcore.ReleaseRequest{Resource: "q", LeaseID: obsLease}) }},
	}
	for _, s := range steps {
		t.Run(s.op, func(t *testing.T) {
			if err := s.do(); !errors.Is(err, lockcore.ErrNoQuorum) {
				t.Fatalf("err %v, want ErrNoQuorum", err)
			}
			calls, quorum, _ := spy.take()
			if !slices.Equal(quorum, []string{s.op}) {
				t.Errorf("quorum failures %v, want [%s]", quorum, s.op)
			}
			var down, timedOut bool
			for _, c := range calls {
				switch {
				case c.node == "n1" && errors.Is(c.err, errSwitchedOff):
					down = true
				case c.node == "n2" && errors.Is(c.err, context.DeadlineExceeded):
					timedOut = true
				case c.node == "n3" && c.err != nil:
					t.Errorf("n3 reported %v", c.err)
				}
			}
			if !down || !timedOut {
				t.Errorf("calls %v: want n1's error and n2's timeout", calls)
			}
		})
	}
}

// Counters that disagree make the Redlock raise the others' fences: the
// observer hears of it once per write-back.
func TestObserverSeesFencingWriteBacks(t *testing.T) {
	rl, sw, spy := observed(t)
	ctx := context.Background()
	take := func(down int) int64 {
		t.Helper()
		for i, n := range sw {
			if i == down {
				n.SetDown(errSwitchedOff)
			} else {
				n.SetDown(nil)
			}
		}
		l, err := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "f", TTL: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := rl.Release(ctx, lockcore.ReleaseRequest{Resource: "f", LeaseID: l.ID}); err != nil && !errors.Is(err, lockcore.ErrNoQuorum) {
			t.Fatal(err)
		}
		return l.Token
	}
	take(2) // n1 and n2 grant token 1: a quorum already has it
	if _, _, fenced := spy.take(); fenced != 0 {
		t.Fatalf("fenced %d after an acquisition that needed no write-back", fenced)
	}
	if tok := take(1); tok != 2 { // n1 answers 2, n3 answers 1: n3 is raised
		t.Fatalf("token %d, want 2", tok)
	}
	calls, _, fenced := spy.take()
	if fenced != 1 {
		t.Errorf("fenced %d, want 1", fenced)
	}
	if !slices.ContainsFunc(calls, func(c nodeCall) bool { return c.node == "n3" && c.op == "fence" && c.err == nil }) {
		t.Errorf("no fence call to n3 in %v", calls)
	}
}

func TestWaitingCountsWaiters(t *testing.T) {
	rl, _, _ := observed(t)
	ctx := context.Background()
	held, err := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "w", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if n := rl.Waiting(); n != 0 {
		t.Fatalf("Waiting() = %d before anyone waits", n)
	}
	done := make(chan error, 1)
	go func() {
		_, err := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "w", TTL: time.Second, Wait: 10 * time.Second})
		done <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for rl.Waiting() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("Waiting() = %d, want 1", rl.Waiting())
		}
		time.Sleep(time.Millisecond)
	}
	if err := rl.Release(ctx, lockcore.ReleaseRequest{Resource: "w", LeaseID: held.ID}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the waiter: %v", err)
	}
	if n := rl.Waiting(); n != 0 {
		t.Errorf("Waiting() = %d after the waiter left", n)
	}
}
