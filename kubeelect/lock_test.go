package kubeelect_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/fencing"
	"github.com/lockgate/lockgate/internal/gatewaytest"
	"github.com/lockgate/lockgate/kubeelect"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
)

// candidate runs client-go's leader elector over a kubeelect.Lock until
// kill, which stops it without releasing the lock (as a killed process).
type candidate struct {
	name string
	lock *kubeelect.Lock
	kill context.CancelFunc
	done chan struct{}
}

// events records, in order, who started and stopped leading, with terms.
type events struct {
	mu  sync.Mutex
	log []event
	c   chan event
}

type event struct {
	who     string
	leading bool
	term    int64
}

func (e *events) add(ev event) {
	e.mu.Lock()
	e.log = append(e.log, ev)
	e.mu.Unlock()
	e.c <- ev
}

// timing is a candidate's elector settings; its lock's TTL is lease.
type timing struct{ lease, renew, retry time.Duration }

var usual = timing{2 * time.Second, time.Second, 200 * time.Millisecond}

func campaign(t *testing.T, cl *client.Client, name string, tm timing, ev *events) *candidate {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := &candidate{name: name, lock: kubeelect.New(cl, "controller-leader", name, nil), kill: cancel, done: make(chan struct{})}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:          c.lock,
		LeaseDuration: tm.lease,
		RenewDeadline: tm.renew,
		RetryPeriod:   tm.retry,
		Name:          "controller",
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { ev.add(event{name, true, c.lock.Term()}) },
			OnStoppedLeading: func() { ev.add(event{name, false, 0}) },
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(c.done)
		le.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-c.done })
	return c
}

func next(t *testing.T, ev *events, what string) event {
	t.Helper()
	select {
	case e := <-ev.c:
		return e
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: nothing within 30s", what)
	}
	return event{}
}

// TestAKilledLeaderIsFencedOff: two candidates under client-go's leader
// elector over one lockgate lock. The leader is killed (its elector
// stopped, the lock not released) twice, a new candidate taking the
// killed one's place: each time the other takes over once the lock's TTL
// has run out (not sooner, even when its elector deems the lease over
// sooner), with a higher term; and
// the killed leader's write with its old term is refused by a fenced
// store that has seen the new leader's.
func TestAKilledLeaderIsFencedOff(t *testing.T) {
	nodes := []lockcore.Node{memnode.New(nil), memnode.New(nil), memnode.New(nil)}
	gw := gatewaytest.InProcess(t, nodes, nil)
	cl, err := client.New(gw.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	store := fencing.NewMemory()
	ctx := context.Background()
	ev := &events{c: make(chan event, 16)}

	// a's lock lives 3 s; b's elector deems a lease over after 400 ms
	// without a renewal: a clock or setting that disagrees. Kubernetes'
	// Lease would let b lead 400 ms after a stopped renewing; the lockgate
	// lock refuses b until a's TTL has run out.
	leader := campaign(t, cl, "a", timing{3 * time.Second, time.Second, 200 * time.Millisecond}, ev)
	first := next(t, ev, "a first leader")
	if !first.leading || first.who != "a" || first.term == 0 {
		t.Fatalf("first event %+v, want a leading with a term", first)
	}
	other := campaign(t, cl, "b", timing{400 * time.Millisecond, 300 * time.Millisecond, 100 * time.Millisecond}, ev)
	term := first.term
	if err := store.Put(ctx, "controller-leader", "config", uint64(term), []byte("a")); err != nil {
		t.Fatal(err)
	}

	for round, replacement := range []string{"c", "d"} {
		killed := time.Now()
		leader.kill()
		<-leader.done
		if e := next(t, ev, "the killed leader stops"); e.leading || e.who != leader.name {
			t.Fatalf("round %d: %+v after killing %s, want it to stop leading", round, e, leader.name)
		}
		// The lock is still held by the killed leader until its TTL runs out.
		if got := leader.lock.Term(); got != term {
			t.Fatalf("round %d: the killed leader's term %d, want %d (not released)", round, got, term)
		}
		e := next(t, ev, "the other candidate takes over")
		if !e.leading || e.who != other.name || e.term <= term {
			t.Fatalf("round %d: %+v, want %s leading with a term above %d", round, e, other.name, term)
		}
		// a renewed within its RenewDeadline (1 s) before it was killed,
		// so its 3 s lock stood at least 2 s more: b cannot lead before
		// 1.5 s (a lower bound: load only delays b).
		if took := time.Since(killed); round == 0 && took < 1500*time.Millisecond {
			t.Fatalf("b led %v after a was killed, while a's lock was still held", took)
		}
		if err := store.Put(ctx, "controller-leader", "config", uint64(e.term), []byte(e.who)); err != nil {
			t.Fatalf("round %d: the new leader's write: %v", round, err)
		}
		err := store.Put(ctx, "controller-leader", "config", uint64(term), []byte(leader.name))
		if !errors.Is(err, fencing.ErrStaleToken) {
			t.Fatalf("round %d: the deposed leader's write with term %d: %v, want ErrStaleToken", round, term, err)
		}
		t.Logf("round %d: %s killed at term %d, %s leads %v later with term %d; the stale write was refused",
			round, leader.name, term, e.who, time.Since(killed).Round(time.Millisecond), e.term)
		term = e.term
		leader, other = other, campaign(t, cl, replacement, usual, ev)
	}
	rec, err := store.Get(ctx, "config")
	if err != nil || rec.Token != uint64(term) {
		t.Errorf("the store holds %+v (%v), want the last leader's write with term %d", rec, err, term)
	}
}

// TestASecondCandidateCannotTakeAHeldLock: whatever a candidate's elector
// believes of the record, Create and Update fail while another candidate
// holds the lock, and its Term stays 0; once the holder releases, it
// takes the lock with a higher term.
func TestASecondCandidateCannotTakeAHeldLock(t *testing.T) {
	gw := gatewaytest.InProcess(t, []lockcore.Node{memnode.New(nil), memnode.New(nil), memnode.New(nil)}, nil)
	cl, err := client.New(gw.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, b := kubeelect.New(cl, "held", "a", nil), kubeelect.New(cl, "held", "b", nil)
	if _, _, err := a.Get(ctx); err == nil {
		t.Fatal("Get of a free lock: no error, want NotFound")
	}
	if err := a.Create(ctx, record("a")); err != nil || a.Term() == 0 {
		t.Fatalf("a's Create: %v, term %d", err, a.Term())
	}
	for op, f := range map[string]func() error{
		"Create": func() error { return b.Create(ctx, record("b")) },
		"Update": func() error { return b.Update(ctx, record("b")) },
	} {
		if err := f(); !errors.Is(err, client.ErrTaken) || b.Term() != 0 {
			t.Errorf("b's %s while a holds the lock: %v, term %d; want ErrTaken, term 0", op, err, b.Term())
		}
	}
	rec, _, err := b.Get(ctx)
	if err != nil || rec.HolderIdentity != "a" {
		t.Fatalf("Get: %+v, %v; want a holding", rec, err)
	}
	if err := a.Update(ctx, record("a")); err != nil {
		t.Fatalf("a's renewal: %v", err)
	}
	old := a.Term()
	if err := a.Update(ctx, record("")); err != nil || a.Term() != 0 {
		t.Fatalf("a's release: %v, term %d", err, a.Term())
	}
	if err := b.Update(ctx, record("b")); err != nil || b.Term() <= old {
		t.Fatalf("b after a's release: %v, term %d; want a term above %d", err, b.Term(), old)
	}
}

func record(holder string) resourcelock.LeaderElectionRecord {
	return resourcelock.LeaderElectionRecord{HolderIdentity: holder, LeaseDurationSeconds: 10}
}

// transit is a fenced store reached over a network the test controls:
// a write whose value is held is delayed in transit until the test lets
// it go, then lands on the store as sent.
type transit struct {
	store   *fencing.Memory
	hold    string        // the value whose write is held
	held    chan struct{} // closed when that write is in transit
	release chan struct{} // closed by the test to let it land
}

func (tr *transit) Put(ctx context.Context, resource, key string, token uint64, value []byte) error {
	if string(value) == tr.hold {
		close(tr.held)
		<-tr.release
	}
	return tr.store.Put(ctx, resource, key, token, value)
}

// TestAStalledLeadersLateWriteIsRefused: two example controllers (see
// Example_controller) under client-go's RunOrDie over one lockgate lock.
// The leader a writes with its term, sends a second write that stalls in
// transit, and is then killed (its elector stopped, the lock not
// released). b leads only after a has stopped leading, with a higher
// term, and writes; when a's stalled write lands, the fenced store
// refuses it (ErrStaleToken, returned to a's controller) and keeps b's.
func TestAStalledLeadersLateWriteIsRefused(t *testing.T) {
	gw := gatewaytest.InProcess(t, []lockcore.Node{memnode.New(nil), memnode.New(nil), memnode.New(nil)}, nil)
	cl, err := client.New(gw.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	store := fencing.NewMemory()
	tr := &transit{store: store, hold: "a: late", held: make(chan struct{}), release: make(chan struct{})}
	ev := &events{c: make(chan event, 16)}
	lateErr := make(chan error, 1)
	start := func(name string, work func(ctx context.Context, term int64, write func(string, []byte) error)) (kill func()) {
		ctx, cancel := context.WithCancel(context.Background())
		lock := kubeelect.New(cl, "example-controller", name, nil)
		c := &controller{
			lock: lock, store: tr, lease: 2 * time.Second, renew: time.Second, retry: 100 * time.Millisecond,
			work: func(ctx context.Context, write func(string, []byte) error) {
				term := lock.Term()
				ev.add(event{name, true, term})
				work(ctx, term, write)
			},
			stopped: func() { ev.add(event{name, false, 0}) },
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.run(ctx)
		}()
		kill = func() { cancel(); <-done }
		t.Cleanup(kill)
		return kill
	}

	killA := start("a", func(ctx context.Context, _ int64, write func(string, []byte) error) {
		if err := write("config", []byte("a: first")); err != nil {
			lateErr <- fmt.Errorf("a's first write: %w", err)
			return
		}
		lateErr <- write("config", []byte("a: late")) // stalls in transit
	})
	a := next(t, ev, "a leads")
	if !a.leading || a.who != "a" || a.term == 0 {
		t.Fatalf("first event %+v, want a leading with a term", a)
	}
	select {
	case <-tr.held:
	case err := <-lateErr:
		t.Fatalf("a's writes ended before the stall: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("a's second write not sent within 30s")
	}
	bWrote := make(chan error, 1)
	start("b", func(ctx context.Context, term int64, write func(string, []byte) error) {
		bWrote <- write("config", []byte("b"))
	})
	killA()
	if e := next(t, ev, "a stops leading"); e.leading || e.who != "a" {
		t.Fatalf("%+v after killing a, want a to stop leading (before b leads: one leader at a time)", e)
	}
	b := next(t, ev, "b leads")
	if !b.leading || b.who != "b" || b.term <= a.term {
		t.Fatalf("%+v, want b leading with a term above a's %d", b, a.term)
	}
	if err := <-bWrote; err != nil {
		t.Fatalf("b's write with term %d: %v", b.term, err)
	}
	close(tr.release)
	if err := <-lateErr; !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("a's stalled write with term %d, landing after b's with %d: %v, want ErrStaleToken", a.term, b.term, err)
	}
	rec, err := store.Get(context.Background(), "config")
	if err != nil || string(rec.Value) != "b" || rec.Token != uint64(b.term) {
		t.Errorf("the store holds %q with token %d (%v), want b's write with term %d", rec.Value, rec.Token, err, b.term)
	}
}
