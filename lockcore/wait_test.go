package lockcore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
	"github.com/lockgate/lockgate/lockcore/nodetest"
)

// The waiting suite runs every Redlock of a test on one fake clock
// (nodetest.Clock): a waiter's deadline, its retries and its pauses move
// only when the test advances the clock, and a waiter that sleeps has
// exactly one timer set on it, which is how a test knows it has joined its
// queue and gone to sleep. The suite runs on in-memory nodes, whose locks
// expire on the same fake clock, and again on redis-server
// (TestWaitingOnRedis), whose locks expire in real time.

// backend makes the nodes of a waiting test's cluster.
type backend struct {
	// node returns node i; nodeNow, when not nil, is the clock that expires
	// its locks (a backend on real time ignores it).
	node func(t testing.TB, i int, nodeNow func() time.Time) lockcore.Node
	// realTime: the nodes' locks expire in real time, whatever clock the
	// test gives.
	realTime bool
}

// memNodes is the in-memory backend.
var memNodes = backend{node: func(_ testing.TB, i int, nodeNow func() time.Time) lockcore.Node {
	return memnode.New(&memnode.Options{Name: fmt.Sprintf("node-%c", 'A'+i), Now: nodeNow})
}}

// waitCluster is a cluster whose Redlocks (c.rl and every replica) share
// one fake clock.
type waitCluster struct {
	*cluster
	clock *nodetest.Clock
	b     backend
}

// newWaitCluster builds n nodes of backend b and a Redlock over them on a
// fake clock, which also expires the nodes' locks unless realNodes is set
// or the backend runs on real time. Options as for newCluster.
func newWaitCluster(t testing.TB, b backend, n int, opts *lockcore.Options, realNodes bool) *waitCluster {
	t.Helper()
	wc := &waitCluster{cluster: &cluster{}, clock: nodetest.NewClock(fakeStart), b: b}
	var nodeNow func() time.Time
	if !realNodes && !b.realTime {
		nodeNow = wc.clock.Now
	}
	for i := range n {
		raw := b.node(t, i, nodeNow)
		wc.raw = append(wc.raw, raw)
		wc.nodes = append(wc.nodes, nodetest.NewFaulty(raw))
	}
	wc.rl = wc.replica(t, opts)
	return wc
}

// replica returns another Redlock over the same nodes, on the same clock.
func (wc *waitCluster) replica(t testing.TB, opts *lockcore.Options) *lockcore.Redlock {
	t.Helper()
	return wc.cluster.replica(t, wc.options(opts))
}

// options returns opts with the cluster's clock.
func (wc *waitCluster) options(opts *lockcore.Options) *lockcore.Options {
	o := lockcore.Options{}
	if opts != nil {
		o = *opts
	}
	o.Clock = wc.clock
	return &o
}

// parked waits until exactly n waiters sleep (on every Redlock of the
// cluster), failing t after 10 s of real time.
func (wc *waitCluster) parked(t testing.TB, n int) {
	t.Helper()
	if !wc.clock.WaitSleepers(n, 10*time.Second) {
		t.Fatalf("%d waiters asleep after 10s, want %d", len(wc.clock.Sleepers()), n)
	}
	// A node slower than the grace may still run their attempts' calls:
	// faults and hooks a test sets next are for later calls only.
	wc.settle()
}

// headAsleep waits until exactly one waiter sleeps, and until an earlier
// time than deadline, its deadline: a head that has tried and sleeps until
// the holder's lock runs out, rather than a waiter still asleep from before
// it became the head. It fails t after 10 s of real time.
func (wc *waitCluster) headAsleep(t testing.TB, deadline time.Time) {
	t.Helper()
	if !wc.clock.WaitFor(func(s []time.Time) bool { return len(s) == 1 && s[0].Before(deadline) }, 10*time.Second) {
		t.Fatalf("asleep until %v after 10s; want one head, until before %v", wc.clock.Sleepers(), deadline)
	}
	wc.settle()
}

// slack is how much less of a holder's TTL a waiter may have learnt than
// the fake clock says is left, when the holder was granted after began
// (real time) and the waiter last looked before now: 100 ms, plus, when
// the nodes' locks expire in real time, the real time since began (each
// look reads the time left on the node's clock).
func (wc *waitCluster) slack(began time.Time) time.Duration {
	if !wc.b.realTime {
		return 100 * time.Millisecond
	}
	return 100*time.Millisecond + time.Since(began)
}

// pass lets d go by for the waiters and the nodes' locks: on the fake clock,
// and first in real time too when the nodes' locks expire in real time.
func (wc *waitCluster) pass(d time.Duration) {
	if wc.b.realTime {
		time.Sleep(d)
	}
	wc.clock.Advance(d)
}

// drive, until t ends, moves the clock to the next timer whenever one is
// set within 2 s of now: pauses after split votes, yields and short waits
// run their course, while a waiter that missed a release sleeps until the
// holder's TTL (30 s) and the test fails.
func (wc *waitCluster) drive(t testing.TB) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	t.Cleanup(func() { close(done); <-stopped })
	go func() {
		defer close(stopped)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			if s := wc.clock.Sleepers(); len(s) > 0 {
				if d := s[0].Sub(wc.clock.Now()); d <= 2*time.Second {
					wc.clock.Advance(max(d, 0))
				}
			}
		}
	}()
}

type acquired struct {
	i     int
	lease *lockcore.Lease
	err   error
}

// startWaiter runs a waiting Acquire in a goroutine and reports on out.
func startWaiter(ctx context.Context, rl *lockcore.Redlock, i int, req lockcore.AcquireRequest, out chan<- acquired) {
	go func() {
		l, err := rl.Acquire(ctx, req)
		out <- acquired{i: i, lease: l, err: err}
	}()
}

// next returns the next result from out, failing t if none comes within d
// of real time.
func next(t *testing.T, out <-chan acquired, d time.Duration) acquired {
	t.Helper()
	select {
	case r := <-out:
		return r
	case <-time.After(d):
		t.Fatalf("no waiter returned within %v", d)
		return acquired{}
	}
}

// none fails t if a result is waiting on out.
func none(t *testing.T, out <-chan acquired) {
	t.Helper()
	select {
	case r := <-out:
		t.Fatalf("waiter %d returned early: lease %+v, err %v", r.i, r.lease, r.err)
	default:
	}
}

func waiterLease(i int) string { return fmt.Sprintf("lease-waiter-%03d-0123456789", i) }

// The TTL of a lock that waiters are meant to be woken from by a release,
// and the wait, on the fake clock: a waiter that is not woken sleeps until
// the test fails after wakeBound of real time.
const (
	holdTTL   = 30 * time.Second
	longWait  = 25 * time.Second
	wakeBound = 10 * time.Second
)

func mustAcquire(t *testing.T, rl *lockcore.Redlock, req lockcore.AcquireRequest) *lockcore.Lease {
	t.Helper()
	l, err := rl.Acquire(context.Background(), req)
	if err != nil {
		t.Fatalf("acquire %s: %v", req.Resource, err)
	}
	return l
}

func mustRelease(t *testing.T, rl *lockcore.Redlock, l *lockcore.Lease) {
	t.Helper()
	if err := rl.Release(context.Background(), lockcore.ReleaseRequest{Resource: l.Resource, LeaseID: l.ID}); err != nil {
		t.Fatalf("release %s: %v", l.Resource, err)
	}
}

// waitingSuite is every test of waiting, by backend.
var waitingSuite = []struct {
	name string
	run  func(*testing.T, backend)
}{
	{"FIFO order", testWaitersAreServedInArrivalOrder},
	{"wakes on release", testWaiterWakesOnRelease},
	{"wakes on expiry", testWaiterWakesOnExpiry},
	{"timeout hint is the TTL left then", testWaitRunsOutWithTheHoldersRemainingTTLAtThatMoment},
	{"timeout gives TakenError", testWaitRunsOutWithTakenError},
	{"a wait ends on its clock", testAWaitEndsWhenItsClockSaysSo},
	{"a waiter that leaves does not block", testWaiterThatLeavesDoesNotBlockTheQueue},
	{"a caller gone as it acquires leaves no lock", testWaiterCanceledAsItAcquiresReleasesTheLock},
	{"too many waiters", testTooManyWaiters},
	{"Close ends waits", testCloseEndsWaits},
	{"no lost wake-up", testNoLostWakeup},
	{"no lost wake-up during the attempt", testNoLostWakeupWhenReleasedDuringTheAttempt},
	{"no spin with a free minority", testWaiterDoesNotSpinWhileAMinorityIsFree},
	{"no spin across two replicas", testWaitersOnTwoReplicasDoNotSpinWhileAMinorityIsFree},
	{"a stampede does not stall", testStampedeOnAFreeLockDoesNotStall},
	{"a holder's retry is answered", testARetryByTheHolderIsAnsweredNotQueued},
	{"an abandoned retry keeps the lock", testAHolderWhoseRetryIsAbandonedKeepsItsLock},
	{"a deaf queue recovers", testAQueueWhoseFirstSubscriptionFailedHearsReleasesLater},
	{"a wait that ran out while joining does not try", testAWaitThatRanOutWhileJoiningDoesNotTry},
	{"a wait that ran out while resubscribing does not try", testAWaitThatRanOutWhileResubscribingDoesNotTry},
	{"a release hands the lock to the head", testReleaseHandsTheLockToTheHeadOfTheQueue},
	{"a hand-off's token follows the fencing rule", testHandOffTokensFollowTheFencingRule},
	{"a hand-off with a minority down", testHandOffWithAMinorityDown},
	{"a stale release leaves the head waiting", testAReleaseByALeaseThatHoldsNothingLeavesTheHeadWaiting},
	{"a release through another replica wakes the head", testAReleaseThroughAnotherReplicaWakesTheHeadInstead},
	{"a refused hand-off lets the head try", testAHandOffRefusedOnAQuorumLetsTheHeadTry},
	{"no replica starves another", testAQueueOnOneReplicaDoesNotStarveAnother},
	{"a claimed head sleeps until the hand-off ends", testAClaimedHeadSleepsUntilTheHandOffEnds},
	{"a failed hand-off leaves the next round a first grant", testAFailedHandOffLeavesTheNextRoundAFirstGrant},
	{"a late hand-off grant after the head's release is released", testALateHandOffGrantAfterTheHeadsReleaseIsReleased},
}

// TestWaiting runs the waiting suite on in-memory nodes.
func TestWaiting(t *testing.T) {
	for _, tc := range waitingSuite {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, memNodes) })
	}
}

func testWaitersAreServedInArrivalOrder(t *testing.T, b backend) {
	c := newWaitCluster(t, b, 3, nil, false)
	holder := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "fifo", TTL: holdTTL})
	const n = 6
	out := make(chan acquired, n)
	for i := range n {
		startWaiter(context.Background(), c.rl, i, lockcore.AcquireRequest{Resource: "fifo", LeaseID: waiterLease(i), TTL: holdTTL, Wait: longWait}, out)
		c.parked(t, i+1) // i has joined before i+1 arrives
	}
	mustRelease(t, c.rl, holder)
	last := holder.Token
	for i := range n {
		r := next(t, out, wakeBound)
		if r.err != nil {
			t.Fatalf("waiter %d: %v", r.i, r.err)
		}
		if r.i != i {
			t.Fatalf("waiter %d got the lock while waiter %d, who arrived earlier, still waits", r.i, i)
		}
		if r.lease.Token <= last || r.lease.Reentered {
			t.Fatalf("waiter %d: lease %+v after token %d", i, r.lease, last)
		}
		last = r.lease.Token
		mustRelease(t, c.rl, r.lease)
	}
}

func testWaiterWakesOnRelease(t *testing.T, b backend) {
	for _, tc := range []struct {
		name    string
		replica bool // release through another Redlock: only the nodes' announcements wake the waiter
	}{
		{"released on the same replica", false},
		{"released on another replica", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newWaitCluster(t, b, 3, nil, false)
			releaser := c.rl
			if tc.replica {
				releaser = c.replica(t, nil)
			}
			holder := mustAcquire(t, releaser, lockcore.AcquireRequest{Resource: "wake", TTL: holdTTL})
			out := make(chan acquired, 1)
			startWaiter(context.Background(), c.rl, 0, lockcore.AcquireRequest{Resource: "wake", TTL: holdTTL, Wait: longWait}, out)
			c.parked(t, 1)
			mustRelease(t, releaser, holder)
			r := next(t, out, wakeBound)
			if r.err != nil {
				t.Fatalf("waiter: %v", r.err)
			}
			if r.lease.Token <= holder.Token {
				t.Fatalf("waiter token %d, holder had %d", r.lease.Token, holder.Token)
			}
		})
	}
}

func testWaiterWakesOnExpiry(t *testing.T, b backend) {
	// Nobody announces an expiry: the waiter learns the holder's remaining
	// TTL from its failed attempt and tries again when it runs out, not
	// before.
	c := newWaitCluster(t, b, 3, nil, false)
	const ttl = time.Second
	began := time.Now()
	holder := mustAcquire(t, c.replica(t, nil), lockcore.AcquireRequest{Resource: "expiry", TTL: ttl})
	out := make(chan acquired, 1)
	startWaiter(context.Background(), c.rl, 0, lockcore.AcquireRequest{Resource: "expiry", TTL: holdTTL, Wait: longWait}, out)
	c.parked(t, 1)
	// It sleeps until the holder's TTL runs out, as its attempt learnt it:
	// on the fake clock, exactly; on redis-server, less the real time that
	// passed since the holder's grant.
	wake := c.clock.Sleepers()[0]
	lo, hi := fakeStart.Add(ttl+time.Millisecond), fakeStart.Add(ttl+time.Millisecond)
	if b.realTime {
		lo = fakeStart.Add(ttl - c.slack(began))
	}
	if wake.Before(lo) || wake.After(hi) {
		t.Fatalf("the waiter sleeps until %v; want the holder's expiry, %v to %v", wake, lo, hi)
	}
	attempts := c.nodes[0].Acquires()
	c.pass(max(0, wake.Sub(c.clock.Now())-50*time.Millisecond))
	c.parked(t, 1)
	if n := c.nodes[0].Acquires() - attempts; n != 0 {
		t.Fatalf("the waiter tried %d times before the holder's TTL ran out", n)
	}
	none(t, out)
	c.pass(100 * time.Millisecond)
	r := next(t, out, wakeBound)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.lease.Token <= holder.Token {
		t.Fatalf("waiter token %d, holder had %d", r.lease.Token, holder.Token)
	}
}

func testWaitRunsOutWithTheHoldersRemainingTTLAtThatMoment(t *testing.T, b backend) {
	// The retry hint of a wait that runs out is the holder's TTL left when
	// the answer is given, not when the waiter first looked; a waiter that
	// never reached the head of the queue gets the same hint.
	c := newWaitCluster(t, b, 3, nil, false)
	const ttl, wait = 3 * time.Second, 1200 * time.Millisecond
	began := time.Now()
	mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "hint", TTL: ttl})
	out := make(chan acquired, 2)
	for i := range 2 {
		startWaiter(context.Background(), c.rl, i, lockcore.AcquireRequest{Resource: "hint", TTL: ttl, Wait: wait}, out)
		c.parked(t, i+1)
	}
	slack := c.slack(began)
	c.pass(wait)
	for range 2 {
		r := next(t, out, wakeBound)
		var te *lockcore.TakenError
		if !errors.As(r.err, &te) {
			t.Fatalf("waiter %d: err = %v, want *TakenError", r.i, r.err)
		}
		// 3s − 1.2s = 1.8s are left (less, on redis-server, the real time
		// from the grant to the last look); the first look saw 3s.
		if te.RetryAfter > ttl-wait || te.RetryAfter < ttl-wait-slack {
			t.Fatalf("waiter %d: retry hint %v, want the TTL left at the end of the wait, %v", r.i, te.RetryAfter, ttl-wait)
		}
	}
}

func testWaitRunsOutWithTakenError(t *testing.T, b backend) {
	c := newWaitCluster(t, b, 3, nil, false)
	began := time.Now()
	holder := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "timeout", TTL: holdTTL})
	const wait = 300 * time.Millisecond
	out := make(chan acquired, 1)
	startWaiter(context.Background(), c.rl, 0, lockcore.AcquireRequest{Resource: "timeout", TTL: holdTTL, Wait: wait}, out)
	c.parked(t, 1)
	slack := c.slack(began)
	c.clock.Advance(wait - time.Millisecond)
	c.parked(t, 1)
	none(t, out)
	c.clock.Advance(time.Millisecond)
	r := next(t, out, wakeBound)
	var te *lockcore.TakenError
	if !errors.As(r.err, &te) || !errors.Is(r.err, lockcore.ErrTaken) {
		t.Fatalf("err = %v, want *TakenError", r.err)
	}
	if te.Resource != "timeout" || te.RetryAfter < holdTTL-wait-slack || te.RetryAfter > holdTTL-wait {
		t.Fatalf("TakenError = %+v, want the holder's remaining TTL (%v) as the retry hint", te, holdTTL-wait)
	}
	if info, err := c.rl.Inspect(context.Background(), "timeout"); err != nil || info.Token != holder.Token {
		t.Fatalf("holder after the wait: %+v, %v", info, err)
	}
	// The queue is empty again: a new waiter is the head and is woken by a release.
	startWaiter(context.Background(), c.rl, 0, lockcore.AcquireRequest{Resource: "timeout", TTL: holdTTL, Wait: longWait}, out)
	c.parked(t, 1)
	mustRelease(t, c.rl, holder)
	if r := next(t, out, wakeBound); r.err != nil {
		t.Fatal(r.err)
	}
}

func testAWaitEndsWhenItsClockSaysSo(t *testing.T, b backend) {
	// On a frozen clock a wait does not end, however much real time
	// passes; advanced to its end, it ends at once with *TakenError, long
	// before its context (which runs in real time) would end it.
	for _, wait := range []time.Duration{100 * time.Millisecond, 2 * time.Minute} {
		t.Run(wait.String(), func(t *testing.T) {
			c := newWaitCluster(t, b, 3, &lockcore.Options{NodeTimeout: 400 * time.Millisecond, MinTTL: time.Second, MaxWait: time.Hour}, false)
			mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "frozen", TTL: time.Hour})
			ctx, cancel := context.WithTimeout(context.Background(), wakeBound)
			defer cancel()
			out := make(chan acquired, 1)
			startWaiter(ctx, c.rl, 0, lockcore.AcquireRequest{Resource: "frozen", TTL: holdTTL, Wait: wait}, out)
			c.parked(t, 1)
			if got, want := c.clock.Sleepers(), fakeStart.Add(wait); len(got) != 1 || !got[0].Equal(want) {
				t.Fatalf("the waiter sleeps until %v, want its deadline %v", got, want)
			}
			c.clock.Advance(wait)
			r := next(t, out, wakeBound)
			var te *lockcore.TakenError
			if !errors.As(r.err, &te) || ctx.Err() != nil {
				t.Fatalf("err = %v (context: %v), want *TakenError before the context ends", r.err, ctx.Err())
			}
		})
	}
}

func testWaiterThatLeavesDoesNotBlockTheQueue(t *testing.T, b backend) {
	// Waiter 2 waits longer than the holder's TTL, so that once it is the
	// head and has tried, it sleeps until the holder's lock runs out, before
	// its deadline: the release waits for that. Released during that
	// attempt instead, the lock can be granted to it by one node and
	// refused by two (a split vote), and it then pauses on the fake clock,
	// which nobody advances here (CI saw that once in the run on Redis).
	const lastWait = holdTTL + longWait
	for _, tc := range []struct {
		name  string
		leave func(c *waitCluster, cancel context.CancelFunc)
		want  error
		wait  time.Duration
	}{
		{"canceled", func(_ *waitCluster, cancel context.CancelFunc) { cancel() }, context.Canceled, longWait},
		{"wait ran out", func(c *waitCluster, _ context.CancelFunc) { c.clock.Advance(time.Second) }, lockcore.ErrTaken, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newWaitCluster(t, b, 3, nil, false)
			holder := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "leave", TTL: holdTTL})
			out := make(chan acquired, 3)
			// Waiters 0 (the head) and 1 leave; waiter 2 must still be served.
			var cancels []context.CancelFunc
			for i := range 3 {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				cancels = append(cancels, cancel)
				wait := lastWait
				if i < 2 {
					wait = tc.wait
				}
				startWaiter(ctx, c.rl, i, lockcore.AcquireRequest{Resource: "leave", TTL: holdTTL, Wait: wait}, out)
				c.parked(t, i+1)
			}
			for _, i := range []int{1, 0} { // the middle one first, then the head
				tc.leave(c, cancels[i])
				if i == 0 || tc.want == context.Canceled {
					r := next(t, out, wakeBound)
					if r.i != i && tc.want == context.Canceled {
						t.Fatalf("waiter %d returned, want %d", r.i, i)
					}
					if !errors.Is(r.err, tc.want) {
						t.Fatalf("waiter %d: err = %v, want %v", r.i, r.err, tc.want)
					}
				}
			}
			if tc.want == lockcore.ErrTaken {
				if r := next(t, out, wakeBound); !errors.Is(r.err, tc.want) {
					t.Fatalf("waiter %d: err = %v, want %v", r.i, r.err, tc.want)
				}
			}
			c.headAsleep(t, fakeStart.Add(lastWait)) // waiter 2
			mustRelease(t, c.rl, holder)
			r := next(t, out, wakeBound)
			if r.i != 2 || r.err != nil {
				t.Fatalf("last waiter %d: %v", r.i, r.err)
			}
		})
	}
}

func testWaiterCanceledAsItAcquiresReleasesTheLock(t *testing.T, b backend) {
	// The head's hand-off succeeds just as its caller gives up: nobody will
	// use the lock, so it is released and the next waiter gets it at once.
	c := newWaitCluster(t, b, 3, nil, false)
	first := waiterLease(0)
	gate := make(chan struct{})
	reached := make(chan struct{}, 3)
	var mu sync.Mutex
	answered := 0
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Waiter 0 queues behind a holder: it tried once, joined, and sleeps.
	holder := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "abandon", TTL: holdTTL})
	out := make(chan acquired, 2)
	startWaiter(ctx, c.rl, 0, lockcore.AcquireRequest{Resource: "abandon", LeaseID: first, TTL: holdTTL, Wait: longWait}, out)
	c.parked(t, 1)

	// From now on its acquisition stops inside the nodes until the gate
	// opens, and its caller gives up once a quorum has granted it.
	for _, n := range c.nodes {
		n.SetBeforeAcquire(func(req lockcore.NodeAcquire) {
			if req.Lease == first {
				reached <- struct{}{}
				<-gate
			}
		})
		n.SetAfterAcquire(func(req lockcore.NodeAcquire, _ lockcore.NodeReply) {
			if req.Lease != first {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if answered++; answered == c.rl.Quorum() {
				cancel() // a quorum granted; the caller leaves now
			}
		})
	}
	// The release hands the lock straight to the head, which sleeps,
	// claimed, while the hand-off stops in the gate.
	released := make(chan error, 1)
	go func() {
		released <- c.rl.Release(context.Background(), lockcore.ReleaseRequest{Resource: "abandon", LeaseID: holder.ID})
	}()
	for range c.nodes {
		<-reached // the hand-off is under way
	}
	startWaiter(context.Background(), c.rl, 1, lockcore.AcquireRequest{Resource: "abandon", LeaseID: waiterLease(1), TTL: holdTTL, Wait: longWait}, out)
	c.parked(t, 2) // waiter 1 queues behind the claimed head
	// Waiter 1's attempts may split the nodes with the release of waiter
	// 0's lock: the clock runs through the pauses.
	c.drive(t)
	close(gate)

	// Waiter 0 gives up; its lock is released and waiter 1 gets it. The
	// two answers may come in either order.
	got := map[int]acquired{}
	for range 2 {
		r := next(t, out, wakeBound)
		got[r.i] = r
	}
	if r := got[0]; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("waiter 0: lease %+v, err %v; want canceled", r.lease, r.err)
	}
	if r := got[1]; r.err != nil {
		t.Fatalf("waiter 1: %v", r.err)
	}
	if err := <-released; err != nil {
		t.Fatalf("release: %v", err)
	}
	c.assertNotHolding(t, "abandon", first)
}

func testTooManyWaiters(t *testing.T, b backend) {
	c := newWaitCluster(t, b, 3, &lockcore.Options{NodeTimeout: 400 * time.Millisecond, MinTTL: time.Second, MaxWaiters: 2}, false)
	holder := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "crowd", TTL: holdTTL})
	other := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "crowd-2", TTL: holdTTL})
	out := make(chan acquired, 3)
	ctx0, cancel0 := context.WithCancel(context.Background())
	defer cancel0()
	startWaiter(ctx0, c.rl, 0, lockcore.AcquireRequest{Resource: "crowd", TTL: holdTTL, Wait: longWait}, out)
	c.parked(t, 1)
	startWaiter(context.Background(), c.rl, 1, lockcore.AcquireRequest{Resource: "crowd", TTL: holdTTL, Wait: longWait}, out)
	c.parked(t, 2)

	// The limit is per replica, over every resource.
	for _, res := range []string{"crowd", "crowd-2"} {
		_, err := c.rl.Acquire(context.Background(), lockcore.AcquireRequest{Resource: res, TTL: holdTTL, Wait: longWait})
		if !errors.Is(err, lockcore.ErrTooManyWaiters) {
			t.Fatalf("third waiter on %s: err = %v, want ErrTooManyWaiters", res, err)
		}
	}
	// Acquire without waiting does not queue.
	if _, err := c.rl.Acquire(context.Background(), lockcore.AcquireRequest{Resource: "crowd", TTL: holdTTL}); !errors.Is(err, lockcore.ErrTaken) {
		t.Fatalf("acquire without wait: err = %v, want ErrTaken", err)
	}
	// Another replica has its own room.
	out2 := make(chan acquired, 1)
	startWaiter(context.Background(), c.replica(t, nil), 9, lockcore.AcquireRequest{Resource: "crowd-2", TTL: holdTTL, Wait: longWait}, out2)
	c.parked(t, 3)

	// A waiter leaving frees a place.
	cancel0()
	if r := next(t, out, wakeBound); r.i != 0 || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("waiter %d: %v", r.i, r.err)
	}
	startWaiter(context.Background(), c.rl, 2, lockcore.AcquireRequest{Resource: "crowd", TTL: holdTTL, Wait: longWait}, out)
	c.parked(t, 3)
	// Waiter 1, the head since waiter 0 left, tries at once, and parked
	// may have counted its sleep from before that: the release can land
	// during its attempt, which then may be a split vote, whose pause
	// drive lets pass (every other timer is 25 s away or more).
	c.drive(t)
	mustRelease(t, c.rl, holder)
	for _, want := range []int{1, 2} {
		r := next(t, out, wakeBound)
		if r.i != want || r.err != nil {
			t.Fatalf("waiter %d: %v; want waiter %d served", r.i, r.err, want)
		}
		mustRelease(t, c.rl, r.lease)
	}
	mustRelease(t, c.rl, other)
	if r := next(t, out2, wakeBound); r.err != nil {
		t.Fatal(r.err)
	}
}

func testCloseEndsWaits(t *testing.T, b backend) {
	c := newWaitCluster(t, b, 3, nil, false)
	holders := []*lockcore.Lease{
		mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "close-a", TTL: holdTTL}),
		mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "close-b", TTL: holdTTL}),
	}
	out := make(chan acquired, 3)
	for i, res := range []string{"close-a", "close-a", "close-b"} {
		startWaiter(context.Background(), c.rl, i, lockcore.AcquireRequest{Resource: res, TTL: holdTTL, Wait: longWait}, out)
		c.parked(t, i+1)
	}
	c.rl.Close()
	for range 3 {
		if r := next(t, out, wakeBound); !errors.Is(r.err, lockcore.ErrClosed) {
			t.Fatalf("waiter %d: err = %v, want ErrClosed", r.i, r.err)
		}
	}
	c.rl.Close() // closing twice is harmless
	if _, err := c.rl.Acquire(context.Background(), lockcore.AcquireRequest{Resource: "close-c", TTL: holdTTL, Wait: time.Second}); !errors.Is(err, lockcore.ErrClosed) {
		t.Fatalf("waiting acquire after Close: err = %v, want ErrClosed", err)
	}
	// Everything that does not wait still works.
	if _, err := c.rl.Acquire(context.Background(), lockcore.AcquireRequest{Resource: "close-a", TTL: holdTTL}); !errors.Is(err, lockcore.ErrTaken) {
		t.Fatalf("acquire after Close: err = %v, want ErrTaken", err)
	}
	for _, h := range holders {
		mustRelease(t, c.rl, h)
	}
	mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "close-a", TTL: holdTTL})
}

func testNoLostWakeup(t *testing.T, b backend) {
	// The holder releases at a random moment around the time the waiter
	// joins: before it, while it subscribes, during its attempt or after.
	// Whatever the interleaving, the waiter gets the lock; the clock only
	// runs through split-vote pauses, never to the holder's TTL.
	const rounds = 200
	for _, tc := range []struct {
		name    string
		replica bool
	}{
		{"released on the same replica", false},
		{"released on another replica", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newWaitCluster(t, b, 3, nil, false)
			c.drive(t)
			releaser := c.rl
			if tc.replica {
				releaser = c.replica(t, nil)
			}
			rng := rand.New(rand.NewPCG(7, 11))
			out := make(chan acquired, 1)
			for i := range rounds {
				res := fmt.Sprintf("race-%d", i)
				holder := mustAcquire(t, releaser, lockcore.AcquireRequest{Resource: res, TTL: holdTTL})
				startWaiter(context.Background(), c.rl, i, lockcore.AcquireRequest{Resource: res, TTL: holdTTL, Wait: longWait}, out)
				switch rng.IntN(3) {
				case 0:
				case 1:
					for range rng.IntN(50) {
						runtime.Gosched()
					}
				default:
					time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
				}
				mustRelease(t, releaser, holder)
				r := next(t, out, wakeBound)
				if r.err != nil {
					t.Fatalf("round %d: %v", i, r.err)
				}
				mustRelease(t, c.rl, r.lease)
			}
		})
	}
}

func testNoLostWakeupWhenReleasedDuringTheAttempt(t *testing.T, b backend) {
	// The release lands between the waiter's calls to its nodes: some see
	// the lock free, some taken.
	for node := range 3 {
		for _, replica := range []bool{false, true} {
			t.Run(fmt.Sprintf("released before node %d answers, other replica %v", node, replica), func(t *testing.T) {
				c := newWaitCluster(t, b, 3, nil, false)
				c.drive(t)
				releaser := c.rl
				if replica {
					releaser = c.replica(t, nil)
				}
				out := make(chan acquired, 1)
				for i := range 30 {
					res := fmt.Sprintf("mid-%d", i)
					holder := mustAcquire(t, releaser, lockcore.AcquireRequest{Resource: res, TTL: holdTTL})
					lease := waiterLease(i)
					var once sync.Once
					relErr := make(chan error, 1)
					c.nodes[node].SetBeforeAcquire(func(req lockcore.NodeAcquire) {
						if req.Lease == lease {
							once.Do(func() {
								relErr <- releaser.Release(context.Background(), lockcore.ReleaseRequest{Resource: res, LeaseID: holder.ID})
							})
						}
					})
					startWaiter(context.Background(), c.rl, i, lockcore.AcquireRequest{Resource: res, LeaseID: lease, TTL: holdTTL, Wait: longWait}, out)
					r := next(t, out, wakeBound)
					if err := <-relErr; err != nil {
						t.Fatalf("round %d: release: %v", i, err)
					}
					if r.err != nil {
						t.Fatalf("round %d: %v", i, r.err)
					}
					mustRelease(t, c.rl, r.lease)
				}
			})
		}
	}
}

func testWaiterDoesNotSpinWhileAMinorityIsFree(t *testing.T, b backend) {
	// The holder holds a majority; one node missed its grant and is free.
	// A waiter's attempt takes that node, fails, and releases it. That
	// release must not count as the holder's release, or the waiter would
	// retry in a tight loop for as long as the holder holds the lock.
	c := newWaitCluster(t, b, 3, nil, false)
	c.drive(t)
	c.down(true, 2)
	mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "spin", TTL: holdTTL})
	c.down(false, 2)

	before := c.nodes[2].Acquires()
	_, err := c.rl.Acquire(context.Background(), lockcore.AcquireRequest{Resource: "spin", TTL: holdTTL, Wait: 500 * time.Millisecond})
	if !errors.Is(err, lockcore.ErrTaken) {
		t.Fatalf("err = %v, want ErrTaken", err)
	}
	// Each attempt is granted by the free node, which looks like a split
	// vote, so the waiter retries after a pause that doubles each time
	// (2 ms, 4 ms, 8 ms, …): about 10 attempts in 500ms of its clock. A
	// waiter woken by its own undo would spin without the clock moving,
	// and never return.
	if attempts := c.nodes[2].Acquires() - before; attempts > 16 {
		t.Fatalf("the waiter made %d attempts in 500ms while the lock was held", attempts)
	}
}

func testWaitersOnTwoReplicasDoNotSpinWhileAMinorityIsFree(t *testing.T, b backend) {
	// As above, with a waiter on each of two replicas: each one's failed
	// attempt releases the free node, which the nodes announce to the other.
	c := newWaitCluster(t, b, 3, nil, false)
	c.drive(t)
	c.down(true, 2)
	mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "spin2", TTL: holdTTL})
	c.down(false, 2)

	before := c.nodes[2].Acquires()
	out := make(chan acquired, 2)
	for i, rl := range []*lockcore.Redlock{c.rl, c.replica(t, nil)} {
		startWaiter(context.Background(), rl, i, lockcore.AcquireRequest{Resource: "spin2", TTL: holdTTL, Wait: 500 * time.Millisecond}, out)
	}
	for range 2 {
		if r := next(t, out, wakeBound); !errors.Is(r.err, lockcore.ErrTaken) {
			t.Fatalf("waiter %d: err = %v, want ErrTaken", r.i, r.err)
		}
	}
	// Each hears the other's undo, but an undo releases one node, not a
	// quorum, so it wakes nobody to try: each retries on its own doubling
	// pause, about 10 attempts each in 500ms.
	if attempts := c.nodes[2].Acquires() - before; attempts > 32 {
		t.Fatalf("two waiters made %d attempts in 500ms while the lock was held", attempts)
	}
}

func testStampedeOnAFreeLockDoesNotStall(t *testing.T, b backend) {
	// Many waiters arrive at once at a free lock. Their first attempts split
	// the nodes so that nobody has a quorum, and each undoes its own
	// minority: together the undos free the lock, and the queue's head must
	// notice that, not sleep until the TTL of the attempts it saw.
	c := newWaitCluster(t, b, 3, nil, false)
	c.drive(t)
	const waiters = 48
	for round := range 5 {
		res := fmt.Sprintf("stampede-%d", round)
		start := make(chan struct{})
		errs := make(chan error, waiters)
		for i := range waiters {
			go func() {
				<-start
				l, err := c.rl.Acquire(context.Background(), lockcore.AcquireRequest{Resource: res, TTL: holdTTL, Wait: longWait})
				if err == nil {
					err = c.rl.Release(context.Background(), lockcore.ReleaseRequest{Resource: res, LeaseID: l.ID})
				}
				if err != nil {
					err = fmt.Errorf("waiter %d: %w", i, err)
				}
				errs <- err
			}()
		}
		close(start)
		for range waiters {
			select {
			case err := <-errs:
				if err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
			case <-time.After(wakeBound):
				t.Fatalf("round %d: waiters still waiting after %v of real time (clock at +%v, TTL %v): the queue stalled",
					round, wakeBound, c.clock.Now().Sub(fakeStart), holdTTL)
			}
		}
	}
}

func testARetryByTheHolderIsAnsweredNotQueued(t *testing.T, b backend) {
	// The holder retries its acquire with its own lease id and a wait while
	// others queue for the lock: it gets its lock back (refreshed), at once
	// (the clock does not move), not a place behind the waiters and a 409
	// for its own lock.
	c := newWaitCluster(t, b, 3, nil, false)
	holder := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "mine", LeaseID: leaseA, TTL: holdTTL})
	out := make(chan acquired, 1)
	startWaiter(context.Background(), c.rl, 0, lockcore.AcquireRequest{Resource: "mine", TTL: holdTTL, Wait: longWait}, out)
	c.parked(t, 1)

	ctx, cancel := context.WithTimeout(context.Background(), wakeBound)
	defer cancel()
	again, err := c.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "mine", LeaseID: leaseA, TTL: holdTTL, Wait: time.Second})
	if err != nil || !again.Reentered || again.Token != holder.Token {
		t.Fatalf("retry by the holder: %+v, %v; want its lock again with token %d", again, err, holder.Token)
	}
	mustRelease(t, c.rl, again)
	if r := next(t, out, wakeBound); r.err != nil {
		t.Fatalf("the queued waiter after the release: %v", r.err)
	}
}

func testAHolderWhoseRetryIsAbandonedKeepsItsLock(t *testing.T, b backend) {
	// The holder's retry succeeds (re-entered) but its caller has gone by
	// then: the lock is not released, since the caller may still count on
	// its first answer.
	c := newWaitCluster(t, b, 3, nil, false)
	holder := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "keep", LeaseID: leaseA, TTL: holdTTL})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var answered atomic.Int32
	for _, n := range c.nodes {
		n.SetAfterAcquire(func(lockcore.NodeAcquire, lockcore.NodeReply) {
			if answered.Add(1) == int32(len(c.nodes)) {
				cancel() // every node re-entered; the caller leaves now
			}
		})
	}
	_, err := c.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "keep", LeaseID: leaseA, TTL: holdTTL, Wait: time.Second})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	info, err := c.rl.Inspect(context.Background(), "keep")
	if err != nil || info.Token != holder.Token {
		t.Fatalf("after the abandoned retry: %+v, %v; want the holder's lock with token %d", info, err, holder.Token)
	}
}

func testAQueueWhoseFirstSubscriptionFailedHearsReleasesLater(t *testing.T, b backend) {
	// The queue's first Watch fails on two of three nodes, so a release
	// made through another replica is announced to it by one node only,
	// not a quorum. The head retries the missing subscriptions (and tries
	// the lock) once a second of its clock, so it gets the lock then, long
	// before the holder's TTL.
	c := newWaitCluster(t, b, 3, nil, false)
	deaf := []*watchFlaky{{Faulty: c.nodes[0]}, {Faulty: c.nodes[1]}}
	deaf[0].refuse.Store(true)
	deaf[1].refuse.Store(true)
	rl, err := lockcore.New([]lockcore.Node{deaf[0], deaf[1], c.nodes[2]}, c.options(nil))
	if err != nil {
		t.Fatal(err)
	}
	holder := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "deaf", TTL: holdTTL})
	out := make(chan acquired, 1)
	startWaiter(context.Background(), rl, 0, lockcore.AcquireRequest{Resource: "deaf", TTL: holdTTL, Wait: longWait}, out)
	c.parked(t, 1)
	deaf[0].refuse.Store(false)
	deaf[1].refuse.Store(false)
	mustRelease(t, c.rl, holder)
	c.parked(t, 1)
	none(t, out) // one node's announcement is not a quorum's
	c.clock.Advance(time.Second)
	r := next(t, out, wakeBound)
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	mustRelease(t, rl, r.lease)
}

// watchFlaky is a node whose Watch fails while refuse is set, and otherwise
// first reports on entered (if set) and waits for gate to be closed (if
// set) or its context to end.
type watchFlaky struct {
	*nodetest.Faulty
	refuse  atomic.Bool
	mu      sync.Mutex
	gate    chan struct{}
	entered chan struct{}
}

func (w *watchFlaky) Watch(ctx context.Context, resource string, notify func()) (func(), error) {
	if w.refuse.Load() {
		return nil, errors.New("watch refused")
	}
	w.mu.Lock()
	gate, entered := w.gate, w.entered
	w.mu.Unlock()
	if entered != nil {
		entered <- struct{}{}
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return w.Faulty.Watch(ctx, resource, notify)
}

// gated makes the next Watch calls report on the returned channel and wait
// for gate.
func (w *watchFlaky) gated(gate chan struct{}) <-chan struct{} {
	entered := make(chan struct{}, 1)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gate, w.entered = gate, entered
	return entered
}

// inWatch waits until a Watch call reported on entered, failing t after
// wakeBound.
func inWatch(t *testing.T, entered <-chan struct{}) {
	t.Helper()
	select {
	case <-entered:
	case <-time.After(wakeBound):
		t.Fatal("no goroutine reached Watch")
	}
}

// wantRanOut checks that a waiter's wait ran out (ErrTaken) instead of
// getting the lock, which it then releases, and returns the error.
func wantRanOut(t *testing.T, rl *lockcore.Redlock, r acquired) *lockcore.TakenError {
	t.Helper()
	var taken *lockcore.TakenError
	if !errors.As(r.err, &taken) {
		if r.lease != nil {
			mustRelease(t, rl, r.lease)
		}
		t.Fatalf("err = %v, got a lease: %v; want ErrTaken, the wait ran out before the lock was free", r.err, r.lease != nil)
	}
	return taken
}

func testAWaitThatRanOutWhileJoiningDoesNotTry(t *testing.T, b backend) {
	// Joining the queue (its first Watch) takes longer than the whole wait,
	// and the holder releases meanwhile. The waiter must answer that its
	// wait ran out, with the holder's time left as it last learnt it, not
	// take the lock after its wait.
	c := newWaitCluster(t, b, 1, nil, false)
	node := &watchFlaky{Faulty: c.nodes[0]}
	gate := make(chan struct{})
	entered := node.gated(gate)
	rl, err := lockcore.New([]lockcore.Node{node}, c.options(&lockcore.Options{NodeTimeout: 5 * time.Second, MinTTL: 10 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	holder := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "slow-join", TTL: holdTTL})
	const wait = 50 * time.Millisecond
	out := make(chan acquired, 1)
	startWaiter(context.Background(), rl, 0, lockcore.AcquireRequest{Resource: "slow-join", TTL: holdTTL, Wait: wait}, out)
	inWatch(t, entered)
	c.clock.Advance(2 * wait)
	mustRelease(t, c.rl, holder)
	close(gate)
	taken := wantRanOut(t, rl, next(t, out, wakeBound))
	if taken.RetryAfter < holdTTL/2 {
		t.Fatalf("retry after %v, want about the %v the holder had left when the waiter tried", taken.RetryAfter, holdTTL)
	}
}

func testAWaitThatRanOutWhileResubscribingDoesNotTry(t *testing.T, b backend) {
	// The queue's first Watch fails, so its head retries it a second later,
	// before trying the lock. That retry takes past the end of the wait,
	// and the holder releases meanwhile: the waiter must answer that its
	// wait ran out, not take the lock after it.
	c := newWaitCluster(t, b, 1, nil, false)
	node := &watchFlaky{Faulty: c.nodes[0]}
	node.refuse.Store(true)
	rl, err := lockcore.New([]lockcore.Node{node}, c.options(&lockcore.Options{NodeTimeout: 5 * time.Second, MinTTL: 10 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	holder := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "slow-resubscribe", TTL: holdTTL})
	const wait = 1600 * time.Millisecond // the retry comes after 1 s
	out := make(chan acquired, 1)
	startWaiter(context.Background(), rl, 0, lockcore.AcquireRequest{Resource: "slow-resubscribe", TTL: holdTTL, Wait: wait}, out)
	c.parked(t, 1)
	gate := make(chan struct{})
	entered := node.gated(gate)
	node.refuse.Store(false)
	c.clock.Advance(time.Second)
	inWatch(t, entered)
	c.clock.Advance(wait) // past the end of the wait
	mustRelease(t, c.rl, holder)
	close(gate)
	wantRanOut(t, rl, next(t, out, wakeBound))
}
