package lockcore_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/lockgate/lockgate/lockcore/nodetest"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/goroutines"
	"github.com/lockgate/lockgate/lockcore"
)

// waitingAcquire is Acquire under a name that goroutine dumps show, so that
// tests can tell when a waiter has joined its queue and gone to sleep.
//
//go:noinline
func waitingAcquire(ctx context.Context, rl *lockcore.Redlock, req lockcore.AcquireRequest) (*lockcore.Lease, error) {
	return rl.Acquire(ctx, req)
}

type acquired struct {
	i     int
	lease *lockcore.Lease
	err   error
	at    time.Time
}

// startWaiter runs a waiting Acquire in a goroutine and reports on out.
func startWaiter(ctx context.Context, rl *lockcore.Redlock, i int, req lockcore.AcquireRequest, out chan<- acquired) {
	go func() {
		l, err := waitingAcquire(ctx, rl, req)
		out <- acquired{i: i, lease: l, err: err, at: time.Now()}
	}()
}

// parkedWaiters counts goroutines inside waitingAcquire that sleep in a
// select. A waiter sleeps only once it is in its queue (before that it can
// only wait for a mutex, or for its nodes while it is the head).
func parkedWaiters() int {
	return goroutines.Count(" [select", "lockcore_test.waitingAcquire(")
}

// waitParked waits until at least n waiters sleep in their queues.
func waitParked(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for parkedWaiters() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters parked after 10s, want %d", parkedWaiters(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// next returns the next result from out, failing t if none comes within d.
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

func waiterLease(i int) string { return fmt.Sprintf("lease-waiter-%03d-0123456789", i) }

// The TTL of a lock that waiters are meant to be woken from by a release,
// and the wait: a waiter that is not woken fails after the wait with
// *TakenError, much later than the bound within which it must succeed.
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

func TestWaitersAreServedInArrivalOrder(t *testing.T) {
	c := newCluster(t, 3, nil, nil)
	holder := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "fifo", TTL: holdTTL})
	const n = 6
	out := make(chan acquired, n)
	for i := range n {
		startWaiter(context.Background(), c.rl, i, lockcore.AcquireRequest{Resource: "fifo", LeaseID: waiterLease(i), TTL: holdTTL, Wait: longWait}, out)
		waitParked(t, i+1) // i has joined before i+1 arrives
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

func TestWaiterWakesOnRelease(t *testing.T) {
	for _, tc := range []struct {
		name    string
		replica bool // release through another Redlock: only the nodes' announcements wake the waiter
	}{
		{"released on the same replica", false},
		{"released on another replica", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 3, nil, nil)
			releaser := c.rl
			if tc.replica {
				releaser = c.replica(t, nil)
			}
			holder := mustAcquire(t, releaser, lockcore.AcquireRequest{Resource: "wake", TTL: holdTTL})
			out := make(chan acquired, 1)
			startWaiter(context.Background(), c.rl, 0, lockcore.AcquireRequest{Resource: "wake", TTL: holdTTL, Wait: longWait}, out)
			waitParked(t, 1)
			released := time.Now()
			mustRelease(t, releaser, holder)
			r := next(t, out, wakeBound)
			if r.err != nil {
				t.Fatalf("waiter: %v (after %v)", r.err, r.at.Sub(released))
			}
			if r.lease.Token <= holder.Token {
				t.Fatalf("waiter token %d, holder had %d", r.lease.Token, holder.Token)
			}
		})
	}
}

func TestWaiterWakesOnExpiry(t *testing.T) {
	// Nobody announces an expiry: the waiter learns the holder's remaining
	// TTL from its failed attempt and tries again when it runs out.
	c := newCluster(t, 3, nil, nil)
	const ttl = time.Second
	before := time.Now()
	holder := mustAcquire(t, c.replica(t, nil), lockcore.AcquireRequest{Resource: "expiry", TTL: ttl})
	out := make(chan acquired, 1)
	startWaiter(context.Background(), c.rl, 0, lockcore.AcquireRequest{Resource: "expiry", TTL: holdTTL, Wait: longWait}, out)
	r := next(t, out, wakeBound)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.at.Sub(before) < ttl {
		t.Fatalf("waiter acquired %v after the holder, before its TTL %v ran out", r.at.Sub(before), ttl)
	}
	if r.lease.Token <= holder.Token {
		t.Fatalf("waiter token %d, holder had %d", r.lease.Token, holder.Token)
	}
}

func TestWaitRunsOutWithTheHoldersRemainingTTLAtThatMoment(t *testing.T) {
	// The retry hint of a wait that runs out is the holder's TTL left when
	// the answer is given, not when the waiter first looked; a waiter that
	// never reached the head of the queue gets the same hint.
	c := newCluster(t, 3, nil, nil)
	const ttl, wait = 3 * time.Second, 1200 * time.Millisecond
	mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "hint", TTL: ttl})
	out := make(chan acquired, 2)
	for i := range 2 {
		startWaiter(context.Background(), c.rl, i, lockcore.AcquireRequest{Resource: "hint", TTL: ttl, Wait: wait}, out)
	}
	for range 2 {
		r := next(t, out, wakeBound)
		var te *lockcore.TakenError
		if !errors.As(r.err, &te) {
			t.Fatalf("waiter %d: err = %v, want *TakenError", r.i, r.err)
		}
		// About 3s − 1.2s = 1.8s are left; the first look saw about 3s.
		if te.RetryAfter < time.Second || te.RetryAfter > ttl-wait+100*time.Millisecond {
			t.Fatalf("waiter %d: retry hint %v, want the TTL left at the end of the wait (about %v)", r.i, te.RetryAfter, ttl-wait)
		}
	}
}

func TestWaitRunsOutWithTakenError(t *testing.T) {
	c := newCluster(t, 3, nil, nil)
	holder := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "timeout", TTL: holdTTL})
	const wait = 300 * time.Millisecond
	start := time.Now()
	_, err := c.rl.Acquire(context.Background(), lockcore.AcquireRequest{Resource: "timeout", TTL: holdTTL, Wait: wait})
	elapsed := time.Since(start)
	var te *lockcore.TakenError
	if !errors.As(err, &te) || !errors.Is(err, lockcore.ErrTaken) {
		t.Fatalf("err = %v, want *TakenError", err)
	}
	if te.Resource != "timeout" || te.RetryAfter < holdTTL/2 || te.RetryAfter > holdTTL {
		t.Fatalf("TakenError = %+v, want the holder's remaining TTL as the retry hint", te)
	}
	if elapsed < wait {
		t.Fatalf("gave up after %v, before the wait of %v", elapsed, wait)
	}
	if info, err := c.rl.Inspect(context.Background(), "timeout"); err != nil || info.Token != holder.Token {
		t.Fatalf("holder after the wait: %+v, %v", info, err)
	}
	// The queue is empty again: a new waiter is the head and is woken by a release.
	out := make(chan acquired, 1)
	startWaiter(context.Background(), c.rl, 0, lockcore.AcquireRequest{Resource: "timeout", TTL: holdTTL, Wait: longWait}, out)
	waitParked(t, 1)
	mustRelease(t, c.rl, holder)
	if r := next(t, out, wakeBound); r.err != nil {
		t.Fatal(r.err)
	}
}

func TestWaiterThatLeavesDoesNotBlockTheQueue(t *testing.T) {
	for _, tc := range []struct {
		name  string
		leave func(cancel context.CancelFunc)
		want  error
		wait  time.Duration
	}{
		{"canceled", func(cancel context.CancelFunc) { cancel() }, context.Canceled, longWait},
		{"wait ran out", func(context.CancelFunc) {}, lockcore.ErrTaken, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 3, nil, nil)
			holder := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "leave", TTL: holdTTL})
			out := make(chan acquired, 3)
			// Waiters 0 (the head) and 1 leave; waiter 2 must still be served.
			var cancels []context.CancelFunc
			for i := range 3 {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				cancels = append(cancels, cancel)
				wait := longWait
				if i < 2 {
					wait = tc.wait
				}
				startWaiter(ctx, c.rl, i, lockcore.AcquireRequest{Resource: "leave", TTL: holdTTL, Wait: wait}, out)
				waitParked(t, i+1)
			}
			for _, i := range []int{1, 0} { // the middle one first, then the head
				tc.leave(cancels[i])
				r := next(t, out, wakeBound)
				if r.i != i && tc.want == context.Canceled {
					t.Fatalf("waiter %d returned, want %d", r.i, i)
				}
				if !errors.Is(r.err, tc.want) {
					t.Fatalf("waiter %d: err = %v, want %v", r.i, r.err, tc.want)
				}
			}
			mustRelease(t, c.rl, holder)
			r := next(t, out, wakeBound)
			if r.i != 2 || r.err != nil {
				t.Fatalf("last waiter %d: %v", r.i, r.err)
			}
		})
	}
}

func TestWaiterCanceledAsItAcquiresReleasesTheLock(t *testing.T) {
	// The head's attempt succeeds just as its caller gives up: nobody will
	// use the lock, so it is released and the next waiter gets it at once.
	c := newCluster(t, 3, nil, nil)
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
	waitParked(t, 1)

	// From now on its attempt stops inside the nodes until the gate opens,
	// and its caller gives up once a quorum has granted it (a hand-off may
	// answer it then).
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
	// The release hands the lock straight to the head (or wakes it to try):
	// either way the head's acquisition stops in the gate, and so does the
	// release when it is the hand-off.
	released := make(chan error, 1)
	go func() {
		released <- c.rl.Release(context.Background(), lockcore.ReleaseRequest{Resource: "abandon", LeaseID: holder.ID})
	}()
	for range c.nodes {
		<-reached // the head is acquiring
	}
	startWaiter(context.Background(), c.rl, 1, lockcore.AcquireRequest{Resource: "abandon", LeaseID: waiterLease(1), TTL: holdTTL, Wait: longWait}, out)
	waitParked(t, 1) // waiter 1 queues behind the head; the head is in the gate
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

func TestTooManyWaiters(t *testing.T) {
	c := newCluster(t, 3, &lockcore.Options{NodeTimeout: 400 * time.Millisecond, MinTTL: time.Second, MaxWaiters: 2}, nil)
	holder := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "crowd", TTL: holdTTL})
	other := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "crowd-2", TTL: holdTTL})
	out := make(chan acquired, 3)
	ctx0, cancel0 := context.WithCancel(context.Background())
	defer cancel0()
	startWaiter(ctx0, c.rl, 0, lockcore.AcquireRequest{Resource: "crowd", TTL: holdTTL, Wait: longWait}, out)
	waitParked(t, 1)
	startWaiter(context.Background(), c.rl, 1, lockcore.AcquireRequest{Resource: "crowd", TTL: holdTTL, Wait: longWait}, out)
	waitParked(t, 2)

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
	waitParked(t, 3)

	// A waiter leaving frees a place.
	cancel0()
	if r := next(t, out, wakeBound); r.i != 0 || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("waiter %d: %v", r.i, r.err)
	}
	startWaiter(context.Background(), c.rl, 2, lockcore.AcquireRequest{Resource: "crowd", TTL: holdTTL, Wait: longWait}, out)
	waitParked(t, 3)
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

func TestCloseEndsWaits(t *testing.T) {
	c := newCluster(t, 3, nil, nil)
	holders := []*lockcore.Lease{
		mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "close-a", TTL: holdTTL}),
		mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "close-b", TTL: holdTTL}),
	}
	out := make(chan acquired, 3)
	for i, res := range []string{"close-a", "close-a", "close-b"} {
		startWaiter(context.Background(), c.rl, i, lockcore.AcquireRequest{Resource: res, TTL: holdTTL, Wait: longWait}, out)
		waitParked(t, i+1)
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

func TestNoLostWakeup(t *testing.T) {
	// The holder releases at a random moment around the time the waiter
	// joins: before it, while it subscribes, during its attempt or after.
	// Whatever the interleaving, the waiter gets the lock long before the
	// holder's TTL.
	const rounds = 200
	for _, tc := range []struct {
		name    string
		replica bool
	}{
		{"released on the same replica", false},
		{"released on another replica", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 3, nil, nil)
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

func TestNoLostWakeupWhenReleasedDuringTheAttempt(t *testing.T) {
	// The release lands between the waiter's calls to its nodes: some see
	// the lock free, some taken.
	for node := range 3 {
		for _, replica := range []bool{false, true} {
			t.Run(fmt.Sprintf("released before node %d answers, other replica %v", node, replica), func(t *testing.T) {
				c := newCluster(t, 3, nil, nil)
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

func TestWaiterDoesNotSpinWhileAMinorityIsFree(t *testing.T) {
	// The holder holds a majority; one node missed its grant and is free.
	// A waiter's attempt takes that node, fails, and releases it. That
	// release must not count as the holder's release, or the waiter would
	// retry in a tight loop for as long as the holder holds the lock.
	c := newCluster(t, 3, nil, nil)
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
	// (2 ms, 4 ms, 8 ms, …): about 10 attempts in 500ms. A busy loop makes
	// thousands.
	if attempts := c.nodes[2].Acquires() - before; attempts > 16 {
		t.Fatalf("the waiter made %d attempts in 500ms while the lock was held", attempts)
	}
}

func TestWaitersOnTwoReplicasDoNotSpinWhileAMinorityIsFree(t *testing.T) {
	// As above, with a waiter on each of two replicas: each one's failed
	// attempt releases the free node, which the nodes announce to the other.
	c := newCluster(t, 3, nil, nil)
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
	// quorum, so it wakes nobody: each retries on its own doubling pause,
	// about 10 attempts each in 500ms. A busy loop makes tens of thousands.
	if attempts := c.nodes[2].Acquires() - before; attempts > 32 {
		t.Fatalf("two waiters made %d attempts in 500ms while the lock was held", attempts)
	}
}

func TestStampedeOnAFreeLockDoesNotStall(t *testing.T) {
	// Many waiters arrive at once at a free lock. Their first attempts split
	// the nodes so that nobody has a quorum, and each undoes its own
	// minority: together the undos free the lock, and the queue's head must
	// notice that, not sleep until the TTL of the attempts it saw.
	c := newCluster(t, 3, nil, nil)
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
		began := time.Now()
		close(start)
		for range waiters {
			select {
			case err := <-errs:
				if err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
			case <-time.After(wakeBound):
				t.Fatalf("round %d: waiters still waiting after %v (TTL %v): the queue stalled", round, time.Since(began), holdTTL)
			}
		}
	}
}

func TestARetryByTheHolderIsAnsweredNotQueued(t *testing.T) {
	// The holder retries its acquire with its own lease id and a wait while
	// others queue for the lock: it gets its lock back (refreshed), at once,
	// not a place behind the waiters and a 409 for its own lock.
	c := newCluster(t, 3, nil, nil)
	holder := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "mine", LeaseID: leaseA, TTL: holdTTL})
	out := make(chan acquired, 1)
	startWaiter(context.Background(), c.rl, 0, lockcore.AcquireRequest{Resource: "mine", TTL: holdTTL, Wait: longWait}, out)
	waitParked(t, 1)

	began := time.Now()
	again, err := c.rl.Acquire(context.Background(), lockcore.AcquireRequest{Resource: "mine", LeaseID: leaseA, TTL: holdTTL, Wait: time.Second})
	if err != nil || !again.Reentered || again.Token != holder.Token {
		t.Fatalf("retry by the holder: %+v, %v; want its lock again with token %d", again, err, holder.Token)
	}
	if d := time.Since(began); d > 500*time.Millisecond {
		t.Fatalf("retry by the holder took %v: it waited in the queue", d)
	}
	mustRelease(t, c.rl, again)
	if r := next(t, out, wakeBound); r.err != nil {
		t.Fatalf("the queued waiter after the release: %v", r.err)
	}
}

func TestAHolderWhoseRetryIsAbandonedKeepsItsLock(t *testing.T) {
	// The holder's retry succeeds (re-entered) but its caller has gone by
	// then: the lock is not released, since the caller may still count on
	// its first answer.
	c := newCluster(t, 3, nil, nil)
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

func TestAQueueWhoseFirstSubscriptionFailedHearsReleasesLater(t *testing.T) {
	// The queue's first Watch fails on two of three nodes, so a release
	// made through another replica is announced to it by one node only,
	// not a quorum. The head retries the missing subscriptions (and tries
	// the lock) about once a second, so it gets the lock long before the
	// holder's TTL.
	c := newCluster(t, 3, nil, nil)
	deaf := []*watchFlaky{{Faulty: c.nodes[0]}, {Faulty: c.nodes[1]}}
	deaf[0].refuse.Store(true)
	deaf[1].refuse.Store(true)
	rl, err := lockcore.New([]lockcore.Node{deaf[0], deaf[1], c.nodes[2]}, nil)
	if err != nil {
		t.Fatal(err)
	}
	holder := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "deaf", TTL: holdTTL})
	out := make(chan acquired, 1)
	startWaiter(context.Background(), rl, 0, lockcore.AcquireRequest{Resource: "deaf", TTL: holdTTL, Wait: longWait}, out)
	waitParked(t, 1)
	deaf[0].refuse.Store(false)
	deaf[1].refuse.Store(false)
	mustRelease(t, c.rl, holder)
	r := next(t, out, wakeBound)
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	mustRelease(t, rl, r.lease)
}

// watchFlaky is a node whose Watch fails while refuse is set, and otherwise
// first waits for gate to be closed (if set) or its context to end.
type watchFlaky struct {
	*nodetest.Faulty
	refuse atomic.Bool
	mu     sync.Mutex
	gate   chan struct{}
}

func (w *watchFlaky) Watch(ctx context.Context, resource string, notify func()) (func(), error) {
	if w.refuse.Load() {
		return nil, errors.New("watch refused")
	}
	w.mu.Lock()
	gate := w.gate
	w.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return w.Faulty.Watch(ctx, resource, notify)
}

// waitInWatch waits until a goroutine is inside watchFlaky.Watch (waiting
// for its gate), failing t after 10 s from start.
func waitInWatch(t *testing.T, start time.Time) {
	t.Helper()
	for goroutines.Count(" [select", "lockcore_test.(*watchFlaky).Watch(") == 0 {
		if time.Since(start) > 10*time.Second {
			t.Fatal("no goroutine reached Watch")
		}
		time.Sleep(time.Millisecond)
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

func TestAWaitThatRanOutWhileJoiningDoesNotTry(t *testing.T) {
	// Joining the queue (its first Watch) takes longer than the whole wait,
	// and the holder releases meanwhile. The waiter must answer that its
	// wait ran out, with the holder's time left as it last learnt it, not
	// take the lock after its wait.
	c := newCluster(t, 1, nil, nil)
	gate := make(chan struct{})
	node := &watchFlaky{Faulty: c.nodes[0], gate: gate}
	rl, err := lockcore.New([]lockcore.Node{node}, &lockcore.Options{NodeTimeout: 5 * time.Second, MinTTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	holder := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "slow-join", TTL: holdTTL})
	const wait = 50 * time.Millisecond
	out := make(chan acquired, 1)
	start := time.Now()
	startWaiter(context.Background(), rl, 0, lockcore.AcquireRequest{Resource: "slow-join", TTL: holdTTL, Wait: wait}, out)
	waitInWatch(t, start)
	time.Sleep(time.Until(start.Add(2 * wait)))
	mustRelease(t, c.rl, holder)
	close(gate)
	taken := wantRanOut(t, rl, next(t, out, 10*time.Second))
	if taken.RetryAfter < holdTTL/2 {
		t.Fatalf("retry after %v, want about the %v the holder had left when the waiter tried", taken.RetryAfter, holdTTL)
	}
}

func TestAWaitThatRanOutWhileResubscribingDoesNotTry(t *testing.T) {
	// The queue's first Watch fails, so its head retries it about a second
	// later, before trying the lock. That retry takes past the end of the
	// wait, and the holder releases meanwhile: the waiter must answer that
	// its wait ran out, not take the lock after it.
	c := newCluster(t, 1, nil, nil)
	node := &watchFlaky{Faulty: c.nodes[0]}
	node.refuse.Store(true)
	rl, err := lockcore.New([]lockcore.Node{node}, &lockcore.Options{NodeTimeout: 5 * time.Second, MinTTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	holder := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "slow-resubscribe", TTL: holdTTL})
	const wait = 1600 * time.Millisecond // the retry comes after about 1 s
	out := make(chan acquired, 1)
	start := time.Now()
	startWaiter(context.Background(), rl, 0, lockcore.AcquireRequest{Resource: "slow-resubscribe", TTL: holdTTL, Wait: wait}, out)
	waitParked(t, 1)
	gate := make(chan struct{})
	node.mu.Lock()
	node.gate = gate
	node.mu.Unlock()
	node.refuse.Store(false)
	waitInWatch(t, start)
	if d := time.Since(start); d > wait {
		t.Fatalf("the head retried its Watch only after %v, past its %v wait: the case could not be set up", d, wait)
	}
	time.Sleep(time.Until(start.Add(wait + 100*time.Millisecond)))
	mustRelease(t, c.rl, holder)
	close(gate)
	wantRanOut(t, rl, next(t, out, 10*time.Second))
}
