package lockcore_test

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
)

// A decided round gives the nodes still to answer a grace, except a node
// that missed the graces of lockcore's behindAfter (2) rounds in a row and
// has not answered a round in time since: it is behind (round.until, pace).
// Node calls are held at gates, so which node is late is the test's choice;
// the node timeout is far longer than the test, so a round that waited for
// a gated node would not return.
func TestANodeLeftBehindIsNotWaitedFor(t *testing.T) {
	c := newEarlyCluster(t, nil)
	mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "warm", TTL: earlyTTL}) // the guard's first pass
	missed := func(want ...int) {
		t.Helper()
		if got := lockcore.Missed(c.rl); !slices.Equal(got, want) {
			t.Fatalf("graces missed in a row, by node: %v, want %v", got, want)
		}
		var behind []bool
		for _, m := range want {
			behind = append(behind, m >= 2)
		}
		if got := lockcore.Behind(c.rl); !slices.Equal(got, behind) {
			t.Fatalf("nodes behind: %v, want %v", got, behind)
		}
	}
	var g0 int64 // rounds that waited a grace before the test's
	graces := func(want int64, why string) {
		t.Helper()
		if got := lockcore.Graces(c.rl) - g0; got != want {
			t.Fatalf("rounds that waited a grace: %d, want %d: %s", got, want, why)
		}
	}
	n := 0
	acquire := func() {
		t.Helper()
		n++
		req := lockcore.AcquireRequest{Resource: fmt.Sprintf("r%d", n), TTL: earlyTTL}
		within(t, "acquire "+req.Resource, func() { mustAcquire(t, c.rl, req) })
	}
	// A slow node is held up (the gates of nodes) so that the quorum
	// answers about 20 ms after the round began: the grace then lasts
	// about 20 ms too. When the round has been decided, or begins its
	// grace if waitGrace, the nodes of late are let go.
	slowQuorum := func(slow int, late []int, waitGrace bool) {
		t.Helper()
		n++
		opens := map[int]func(){slow: c.gate(slow)}
		for _, i := range late {
			opens[i] = c.gate(i)
		}
		g := lockcore.Graces(c.rl)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if _, err := c.rl.Acquire(t.Context(), lockcore.AcquireRequest{Resource: fmt.Sprintf("r%d", n), TTL: earlyTTL}); err != nil {
				t.Errorf("acquire: %v", err)
			}
		}()
		time.Sleep(20 * time.Millisecond)
		opens[slow]()
		within(t, "the round decided", func() {
			for (waitGrace && lockcore.Graces(c.rl) == g) || (!waitGrace && lockcore.Pending(c.rl) == 0) {
				runtime.Gosched()
			}
		})
		for _, i := range late {
			opens[i]()
		}
		within(t, "the acquire", func() { <-done })
		c.settle()
	}

	// On a loaded machine a node may miss the grace of a round of its own.
	for try := 0; slices.ContainsFunc(lockcore.Missed(c.rl), func(m int) bool { return m > 0 }); try++ {
		if try == 20 {
			t.Fatalf("graces missed after 20 rounds with every node answering: %v", lockcore.Missed(c.rl))
		}
		acquire()
		c.settle()
	}
	g0 = lockcore.Graces(c.rl)

	// Node 2 misses the grace of two rounds and is behind from then on.
	open2 := c.gate(2)
	defer open2()
	acquire()
	graces(1, "the round waits a grace for node 2")
	missed(0, 0, 1)
	acquire()
	graces(2, "the round waits a grace for node 2")
	missed(0, 0, 2)

	// The next round does not wait for it.
	began := time.Now()
	acquire()
	returned := time.Now()
	graces(2, "node 2 is behind, and the round waited for it")

	// Node 2 answers the three rounds after their graces ended (or would
	// have): a grace ends no later than twice the time the call took after
	// it began, and the last round began after began and was decided
	// before returned.
	time.Sleep(time.Until(returned.Add(returned.Sub(began)).Add(time.Millisecond)))
	open2()
	c.settle()
	missed(0, 0, 3)

	// Node 2 answers before the round is decided (node 0 is held, so the
	// round needs node 2 for its quorum): it is in time again. Node 0
	// misses the grace instead, twice.
	open0 := c.gate(0)
	defer open0()
	acquire()
	graces(3, "the round waits a grace for node 0")
	missed(1, 0, 0)
	acquire()
	missed(2, 0, 0)
	open0()
	c.settle()
	missed(2, 0, 0)

	// Node 0 answers after a round that did not wait for it was decided,
	// within the grace it would have had: it is in time again. The quorum
	// answers 20 ms after the round began, so the grace would have lasted
	// as long; the test tries again should its answer still miss it.
	for try := 0; lockcore.Behind(c.rl)[0]; try++ {
		if try == 10 {
			t.Fatal("node 0 answered 10 rounds right after they were decided, and is still behind")
		}
		slowQuorum(1, []int{0}, false)
		graces(4, "node 0 is behind, and the round waited for it")
	}
	missed(0, 0, 0)

	// A late answer to an older round does not undo what a newer round
	// found: node 0, behind again, is held in one round (which does not
	// wait for it) and answers the next in time; its answer to the first
	// comes after that, and late.
	open0 = c.gate(0)
	acquire()
	acquire()
	open0()
	c.settle()
	missed(2, 0, 0)
	held, entered := make(chan struct{}), make(chan struct{})
	var once sync.Once
	c.nodes[0].SetBeforeAcquire(func(lockcore.NodeAcquire) { // the next call waits for held
		once.Do(func() { close(entered); <-held })
	})
	began = time.Now()
	acquire()
	returned = time.Now()
	<-entered                        // node 0's call of that round is held
	c.nodes[0].SetBeforeAcquire(nil) // later calls pass; the held one waits on
	for try := 0; lockcore.Missed(c.rl)[0] != 0; try++ {
		if try == 10 {
			t.Fatal("node 0 answered 10 rounds at once, and is still behind")
		}
		acquire()
		eventually(t, "the round's late answers acted on", func() bool { return lockcore.Pending(c.rl) == 1 }) // the held round's
	}
	missed(0, 0, 0)
	time.Sleep(time.Until(returned.Add(returned.Sub(began)).Add(time.Millisecond)))
	close(held)
	c.settle()
	missed(0, 0, 0)

	// Node 2, one grace missed, answers within the grace of the next
	// round: in time again.
	open2 = c.gate(2)
	acquire()
	open2()
	c.settle()
	missed(0, 0, 1)
	for try := 0; lockcore.Missed(c.rl)[2] != 0; try++ {
		if try == 10 {
			t.Fatal("node 2 answered within 10 rounds' graces, and has still missed one")
		}
		slowQuorum(1, []int{2}, true)
	}
	missed(0, 0, 0)

	// A round that waits for every node judges too: node 1 holds the lock
	// for another lease, so with node 0's grant and node 1's refusal the
	// acquisition needs node 2, which answers 20 ms later, long after the
	// grace that the second answer began.
	if _, err := c.raw[1].Acquire(t.Context(), lockcore.NodeAcquire{Resource: "split", Lease: "another-lease-0123456789", TTL: earlyTTL}); err != nil {
		t.Fatal(err)
	}
	open2 = c.gate(2)
	go func() { time.Sleep(20 * time.Millisecond); open2() }()
	var l *lockcore.Lease
	within(t, "acquire split", func() { l = mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "split", TTL: earlyTTL}) })
	c.settle()
	if h := c.peek(t, "split"); !h[0].Found || h[0].Lease != l.ID || !h[2].Found || h[2].Lease != l.ID {
		t.Fatalf("split: nodes hold %+v; want nodes 0 and 2 to hold %s", h, l.ID)
	}
	missed(0, 0, 1)

	// A node that fails at once does not count towards the quorum whose
	// time sets the grace: with node 0 down, the round needs node 2, which
	// answers 20 ms later, and is in time.
	c.down(true, 0)
	open2 = c.gate(2)
	go func() { time.Sleep(20 * time.Millisecond); open2() }()
	acquire()
	c.settle()
	missed(0, 0, 0)
	c.down(false, 0)
}
