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

// paceGrace is the least grace of TestANodeLeftBehindIsNotWaitedFor.
const paceGrace = 100 * time.Millisecond

// graceOver returns a time after which the grace of every round that began
// after began and was decided before returned has ended (see
// round.graceFrom): the time the call took, or paceGrace if longer, after
// returned.
func graceOver(began, returned time.Time) time.Time {
	return returned.Add(max(returned.Sub(began), paceGrace)).Add(time.Millisecond)
}

// answered returns a channel that gets the time when every node of idx has
// answered an acquisition (the first since), and a function that removes
// the hooks it sets.
func (c *cluster) answered(idx ...int) (<-chan time.Time, func()) {
	ch := make(chan time.Time, 1)
	var mu sync.Mutex
	left := len(idx)
	for _, i := range idx {
		var once sync.Once
		c.nodes[i].SetAfterAcquire(func(lockcore.NodeAcquire, lockcore.NodeReply) {
			once.Do(func() {
				mu.Lock()
				defer mu.Unlock()
				if left--; left == 0 {
					ch <- time.Now()
				}
			})
		})
	}
	return ch, func() {
		for _, i := range idx {
			c.nodes[i].SetAfterAcquire(nil)
		}
	}
}

// A decided round gives the nodes still to answer a grace, except a node
// that missed the graces of lockcore's behindAfter (2) rounds in a row and
// has not answered a round in time since: it is behind (round.until, pace).
// Node calls are held at gates, so which node is late is the test's choice;
// the node timeout is far longer than the test, so a round that waited for
// a gated node would not return. The least grace is paceGrace instead of
// 0.5 ms, so that a node the test does not hold is in time even when a
// busy machine (CI, -race) leaves its goroutine unscheduled for a while:
// with 0.5 ms, node 2 once missed a grace of its own where the test wanted
// it in time.
func TestANodeLeftBehindIsNotWaitedFor(t *testing.T) {
	c := newEarlyCluster(t, nil)
	lockcore.SetGraceMin(c.rl, paceGrace)
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
	// paceGrace. When the round has been decided, or begins its
	// grace if waitGrace, the nodes of late are let go.
	slowQuorum := func(slow int, late []int, waitGrace bool) {
		t.Helper()
		n++
		opens := map[int]func(){slow: c.gate(slow)}
		for _, i := range late {
			opens[i] = c.gate(i)
		}
		g := lockcore.Graces(c.rl)
		done := make(chan error, 1)
		go func() {
			_, err := c.rl.Acquire(t.Context(), lockcore.AcquireRequest{Resource: fmt.Sprintf("r%d", n), TTL: earlyTTL})
			done <- err
		}()
		defer func() { // on every path: no gate stays closed, the call ends
			for _, open := range opens {
				open()
			}
			<-done
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
		var err error
		within(t, "the acquire", func() { err = <-done; done <- err })
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
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
	// have): a grace ends no later than the time the call took, or
	// paceGrace if longer, after it returned, since the last round began
	// after began and was decided before returned.
	time.Sleep(time.Until(graceOver(began, returned)))
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
	// paceGrace; the test tries again should its answer still miss it.
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
	time.Sleep(time.Until(graceOver(began, returned)))
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
	// acquisition needs node 2, which answers 50 ms after the grace that
	// the second answer began has ended.
	if _, err := c.raw[1].Acquire(t.Context(), lockcore.NodeAcquire{Resource: "split", Lease: "another-lease-0123456789", TTL: earlyTTL}); err != nil {
		t.Fatal(err)
	}
	open2 = c.gate(2)
	began = time.Now()
	quorum, unhook := c.answered(0, 1)
	go func() { // after the grace of nodes 0 and 1, however late they are
		at := <-quorum
		time.Sleep(at.Sub(began) + paceGrace + 50*time.Millisecond)
		open2()
	}()
	var l *lockcore.Lease
	within(t, "acquire split", func() { l = mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "split", TTL: earlyTTL}) })
	unhook()
	c.settle()
	if h := c.peek(t, "split"); !h[0].Found || h[0].Lease != l.ID || !h[2].Found || h[2].Lease != l.ID {
		t.Fatalf("split: nodes hold %+v; want nodes 0 and 2 to hold %s", h, l.ID)
	}
	missed(0, 0, 1)

	// A node that fails at once does not count towards the quorum whose
	// time sets the grace: with node 0 down, the round needs node 2, which
	// answers 20 ms after a grace from node 1's answer would have ended,
	// and is in time.
	c.down(true, 0)
	open2 = c.gate(2)
	go func() { time.Sleep(paceGrace + 20*time.Millisecond); open2() }()
	acquire()
	c.settle()
	missed(0, 0, 0)
	c.down(false, 0)
}

// A round's grace is as long as the round had taken when a quorum had
// answered without an error, and never ends before the round has taken
// twice as long as it had when it was decided (round.hear, round.graceFrom,
// round.until), however short the least grace. Five nodes, a least grace
// of 1 ms; nodes are held at gates, and each round's last node answers in
// time only by one of those rules.
func TestTheGraceScalesWithTheRound(t *testing.T) {
	c := newCluster(t, 5, &lockcore.Options{NodeTimeout: earlyTimeout, MinTTL: 2 * earlyTimeout, MaxTTL: time.Hour}, nil)
	lockcore.SetGraceMin(c.rl, time.Millisecond)
	calm := func() { // no node has missed a grace, so every round waits one
		t.Helper()
		for try := 0; slices.ContainsFunc(lockcore.Missed(c.rl), func(m int) bool { return m > 0 }); try++ {
			if try == 20 {
				t.Fatalf("graces missed after 20 rounds with every node answering: %v", lockcore.Missed(c.rl))
			}
			mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: fmt.Sprintf("calm%d", try), TTL: earlyTTL})
			c.settle()
		}
	}
	// round acquires resource with its nodes held at gates: the nodes of
	// slow until 100 ms after the others have answered (and as long again
	// as those took, so that a busy machine does not make them in time),
	// those of then until 20 ms after the slow ones have answered, and
	// those of late until 20 ms after the round began its grace. It
	// returns how many graces in a row each node has missed then.
	round := func(resource string, slow, then, late []int) []int {
		t.Helper()
		gates := map[int]func(){}
		for _, i := range slices.Concat(slow, then, late) {
			gates[i] = c.gate(i)
		}
		open := func(idx []int) {
			for _, i := range idx {
				gates[i]()
			}
		}
		var fast []int
		for i := range c.nodes {
			if gates[i] == nil {
				fast = append(fast, i)
			}
		}
		fastAnswered, unhookFast := c.answered(fast...)
		defer unhookFast()
		slowAnswered, unhookSlow := c.answered(slow...)
		defer unhookSlow()
		g := lockcore.Graces(c.rl)
		began := time.Now()
		done := make(chan error, 1)
		go func() {
			_, err := c.rl.Acquire(t.Context(), lockcore.AcquireRequest{Resource: resource, TTL: earlyTTL})
			done <- err
		}()
		defer func() { // on every path: no gate stays closed, the call ends
			for _, open := range gates {
				open()
			}
			<-done
		}()
		var at time.Time
		within(t, "the fast nodes answer", func() { at = <-fastAnswered })
		time.Sleep(at.Sub(began) + 100*time.Millisecond)
		open(slow)
		if len(then) > 0 {
			within(t, "the slow nodes answer", func() { <-slowAnswered })
			time.Sleep(20 * time.Millisecond)
			open(then)
		}
		within(t, "the grace begins", func() {
			for lockcore.Graces(c.rl) == g {
				runtime.Gosched()
			}
		})
		time.Sleep(20 * time.Millisecond)
		open(late)
		var err error
		within(t, "the acquire", func() { err = <-done; done <- err })
		if err != nil {
			t.Fatalf("acquire %s: %v", resource, err)
		}
		c.settle()
		return lockcore.Missed(c.rl)
	}
	taken := func(node int, resource string) { // another lease holds resource on node
		t.Helper()
		if _, err := c.raw[node].Acquire(t.Context(), lockcore.NodeAcquire{Resource: resource, Lease: "another-lease-0123456789", TTL: earlyTTL}); err != nil {
			t.Fatal(err)
		}
	}
	mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "warm", TTL: earlyTTL}) // the guard's first pass
	calm()

	// Node 2's grant makes the quorum and decides the round 100 ms in: the
	// grace lasts as long, and nodes 3 and 4 are in time.
	if got := round("a", []int{2}, nil, []int{3, 4}); !slices.Equal(got, []int{0, 0, 0, 0, 0}) {
		t.Fatalf("round a: graces missed in a row, by node: %v, want none", got)
	}
	calm()

	// Node 2 refuses (another lease holds the lock there) 100 ms in: with
	// the grants of nodes 0 and 1, a quorum of answers, whose grace lasts
	// 100 ms. Node 3's grant decides the round 20 ms later, within that
	// grace (with a grace of the least 1 ms it would be late), and node 4
	// is in time.
	taken(2, "b")
	if got := round("b", []int{2}, []int{3}, []int{4}); !slices.Equal(got, []int{0, 0, 0, 0, 0}) {
		t.Fatalf("round b: graces missed in a row, by node: %v, want none", got)
	}
	calm()

	// Node 2 refuses at once: with the grants of nodes 0 and 1, a quorum of
	// answers whose grace is about 1 ms, but the round is decided by node
	// 3's grant 100 ms later (late itself), and node 4 is in time.
	taken(2, "split")
	if got := round("split", []int{3}, nil, []int{4}); !slices.Equal(got, []int{0, 0, 0, 1, 0}) {
		t.Fatalf("round split: graces missed in a row, by node: %v, want [0 0 0 1 0]", got)
	}
}
