package waitroom_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore/internal/waitroom"
	"github.com/lockgate/lockgate/lockcore/nodetest"
)

// These tests drive a room alone: no nodes, attempts scripted, time on a
// fake clock. The lockcore waiting suite runs it with real nodes.

type lease string

// roomFixture is a room over three nodes (quorum 2) that announce nothing,
// on a fake clock, recording what it abandons.
type roomFixture struct {
	clock *nodetest.Clock
	room  *waitroom.Room[string, lease]
	mu    sync.Mutex
	lost  []lease
}

func newRoom(t *testing.T) *roomFixture {
	t.Helper()
	f := &roomFixture{clock: nodetest.NewClock(time.Unix(1_700_000_000, 0))}
	f.room = waitroom.New[string](waitroom.Config[lease]{
		Clock: f.clock, Quorum: 2, Watches: make([]waitroom.Watch, 3), WatchTimeout: time.Second, MaxWaiters: 10,
		Abandon: func(l lease) { f.mu.Lock(); defer f.mu.Unlock(); f.lost = append(f.lost, l) },
	})
	t.Cleanup(f.room.Close)
	return f
}

func (f *roomFixture) abandoned() []lease {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]lease(nil), f.lost...)
}

// held is an attempt that finds the lock held for another hour.
func held(tries *atomic.Int32) func(context.Context) waitroom.Result {
	return func(context.Context) waitroom.Result {
		tries.Add(1)
		return waitroom.Result{FreeIn: time.Hour}
	}
}

// wait runs Wait in a goroutine and returns where its outcome arrives.
func (f *roomFixture) wait(ctx context.Context, req waitroom.Request[string]) <-chan waitroom.Outcome[lease] {
	out := make(chan waitroom.Outcome[lease], 1)
	go func() { out <- f.room.Wait(ctx, req) }()
	return out
}

func (f *roomFixture) asleep(t *testing.T, n int) {
	t.Helper()
	if !f.clock.WaitSleepers(n, 10*time.Second) {
		t.Fatalf("%d waiters asleep, want %d", len(f.clock.Sleepers()), n)
	}
}

// resleep waits until a waiter woken after set timers were set sleeps again.
func (f *roomFixture) resleep(t *testing.T, set int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for f.clock.TimersSet() <= set {
		if time.Now().After(deadline) {
			t.Fatal("the waiter did not go back to sleep")
		}
		time.Sleep(100 * time.Microsecond)
	}
	f.asleep(t, 1)
}

func outcome(t *testing.T, out <-chan waitroom.Outcome[lease]) waitroom.Outcome[lease] {
	t.Helper()
	select {
	case o := <-out:
		return o
	case <-time.After(10 * time.Second):
		t.Fatal("the wait did not end")
		return waitroom.Outcome[lease]{}
	}
}

func TestTheHeadTriesOnceAQuorumIsAnnouncedFree(t *testing.T) {
	f := newRoom(t)
	var tries atomic.Int32
	out := f.wait(context.Background(), waitroom.Request[string]{Resource: "r", Lease: "w", Wait: time.Minute, Try: held(&tries)})
	f.asleep(t, 1)
	if n := tries.Load(); n != 2 {
		t.Fatalf("%d attempts before sleeping, want 2 (before joining, and once in the queue)", n)
	}
	set := f.clock.TimersSet()
	f.room.Announce("r", 1<<0)
	f.resleep(t, set)
	f.room.Announce("r", 1<<0) // the same node again counts once
	f.resleep(t, set+1)
	if n := tries.Load(); n != 2 {
		t.Fatalf("%d attempts after one node was announced free, want still 2", n)
	}
	f.room.Announce("r", 1<<2)
	f.resleep(t, set+2)
	if n := tries.Load(); n != 3 {
		t.Fatalf("%d attempts after a quorum was announced free, want 3", n)
	}
	f.clock.Advance(time.Minute)
	if o := outcome(t, out); o.End != waitroom.RanOut || o.FreeIn != time.Hour-time.Minute {
		t.Fatalf("outcome %+v, want RanOut with the holder's %v left", o, time.Hour-time.Minute)
	}
}

func TestAHandOffGivesTheHeadItsLease(t *testing.T) {
	f := newRoom(t)
	var tries atomic.Int32
	out := f.wait(context.Background(), waitroom.Request[string]{Resource: "r", Lease: "w", Wait: time.Minute, Try: held(&tries), Data: "request w"})
	f.asleep(t, 1)
	if c := f.room.Claim("r", "w"); c != nil {
		t.Fatal("a release by the waiter's own lease claimed it")
	}
	c := f.room.Claim("r", "holder")
	if c == nil || c.Data() != "request w" {
		t.Fatalf("claim = %v, want the head with its request", c)
	}
	if again := f.room.Claim("r", "holder"); again != nil {
		t.Fatal("a claimed head was claimed again")
	}
	f.room.Deliver(c, "L1", f.clock.Now().Add(time.Hour), true, false)
	if o := outcome(t, out); o.End != waitroom.Handed || o.Lease != "L1" {
		t.Fatalf("outcome %+v, want Handed L1", o)
	}
	if n := tries.Load(); n != 2 {
		t.Fatalf("%d attempts, want 2: none once claimed", n)
	}
}

func TestAFailedHandOffThatFreedNodesMakesTheHeadTry(t *testing.T) {
	f := newRoom(t)
	var tries atomic.Int32
	out := f.wait(context.Background(), waitroom.Request[string]{Resource: "r", Lease: "w", Wait: time.Minute, Try: held(&tries)})
	f.asleep(t, 1)
	c := f.room.Claim("r", "holder")
	set := f.clock.TimersSet()
	f.room.Deliver(c, "", time.Time{}, false, false) // nothing changed: back to sleep
	f.resleep(t, set)
	if n := tries.Load(); n != 2 {
		t.Fatalf("%d attempts after a hand-off that freed nothing, want still 2", n)
	}
	c = f.room.Claim("r", "holder")
	f.room.Deliver(c, "", time.Time{}, false, true)
	f.resleep(t, set+1)
	if n := tries.Load(); n != 3 {
		t.Fatalf("%d attempts after a hand-off that freed nodes, want 3", n)
	}
	f.room.Close()
	if o := outcome(t, out); o.End != waitroom.Closed {
		t.Fatalf("outcome %+v after Close, want Closed", o)
	}
}

func TestALeaseHandedToAWaiterThatLeftIsAbandoned(t *testing.T) {
	f := newRoom(t)
	var tries atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	out := f.wait(ctx, waitroom.Request[string]{Resource: "r", Lease: "w", Wait: time.Minute, Try: held(&tries)})
	f.asleep(t, 1)
	c := f.room.Claim("r", "holder")
	cancel()
	if o := outcome(t, out); o.End != waitroom.Canceled {
		t.Fatalf("outcome %+v, want Canceled", o)
	}
	if got := f.abandoned(); len(got) != 0 {
		t.Fatalf("abandoned %v before the hand-off ended", got)
	}
	f.room.Deliver(c, "L1", f.clock.Now().Add(time.Hour), true, false)
	if got := f.abandoned(); len(got) != 1 || got[0] != "L1" {
		t.Fatalf("abandoned %v, want [L1]", got)
	}
	if n := f.room.Waiting(); n != 0 {
		t.Fatalf("%d waiters left in the room, want 0", n)
	}
}

func TestTheNextHeadSleepsUntilTheLockItsPredecessorGotRunsOut(t *testing.T) {
	f := newRoom(t)
	var tries atomic.Int32
	done := make(chan struct{})
	first := f.wait(context.Background(), waitroom.Request[string]{Resource: "r", Lease: "w1", Wait: time.Minute,
		Try: func(ctx context.Context) waitroom.Result {
			select {
			case <-done:
				return waitroom.Result{Done: true, Expires: f.clock.Now().Add(10 * time.Second)}
			default:
				return held(&tries)(ctx)
			}
		}})
	f.asleep(t, 1)
	second := f.wait(context.Background(), waitroom.Request[string]{Resource: "r", Lease: "w2", Wait: time.Minute, Try: held(&tries)})
	f.asleep(t, 2)
	before, set := tries.Load(), f.clock.TimersSet()
	close(done)
	f.room.Announce("r", 0b011) // a quorum freed: the head tries and gets the lock
	if o := outcome(t, first); o.End != waitroom.Tried {
		t.Fatalf("first: %+v, want Tried", o)
	}
	f.resleep(t, set) // the second, now the head
	if s := f.clock.Sleepers(); len(s) != 1 || !s[0].Equal(f.clock.Now().Add(10*time.Second)) {
		t.Fatalf("the next head sleeps until %v, want the first's lock to run out in 10s", s)
	}
	if n := tries.Load(); n != before {
		t.Fatalf("the next head tried %d times at once, want none", n-before)
	}
	f.clock.Advance(10 * time.Second)
	f.asleep(t, 1)
	if n := tries.Load(); n != before+1 {
		t.Fatalf("the next head tried %d times once that lock ran out, want 1", n-before)
	}
	f.room.Close()
	if o := outcome(t, second); o.End != waitroom.Closed {
		t.Fatalf("second: %+v, want Closed", o)
	}
}

func TestAYieldingReplicaLetsTheOtherTryFirst(t *testing.T) {
	// After Yield, this replica's head does not try for YieldFor, even
	// when a quorum is announced free, and a new request joins instead of
	// trying first; once the yield ends, what was due is tried.
	for _, tc := range []struct {
		name string
		// start yields and starts the waiter, returning its outcome.
		start func(t *testing.T, f *roomFixture, req waitroom.Request[string]) <-chan waitroom.Outcome[lease]
		// before: attempts made before the yield ends.
		before int32
	}{
		{"a head that hears the lock freed", func(t *testing.T, f *roomFixture, req waitroom.Request[string]) <-chan waitroom.Outcome[lease] {
			out := f.wait(context.Background(), req)
			f.asleep(t, 1) // tried before joining and once in the queue
			f.room.Yield("r")
			set := f.clock.TimersSet()
			f.room.Announce("r", 0b011)
			f.resleep(t, set)
			return out
		}, 2},
		{"a new request", func(t *testing.T, f *roomFixture, req waitroom.Request[string]) <-chan waitroom.Outcome[lease] {
			f.room.Yield("r")
			out := f.wait(context.Background(), req)
			f.asleep(t, 1)
			return out
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newRoom(t)
			var tries atomic.Int32
			yieldEnds := f.clock.Now().Add(waitroom.YieldFor)
			out := tc.start(t, f, waitroom.Request[string]{Resource: "r", Lease: "w", Wait: time.Minute, Try: held(&tries)})
			if n := tries.Load(); n != tc.before {
				t.Fatalf("%d attempts while yielding, want %d", n, tc.before)
			}
			if s := f.clock.Sleepers(); len(s) != 1 || !s[0].Equal(yieldEnds) {
				t.Fatalf("the head sleeps until %v, want the end of the yield %v", s, yieldEnds)
			}
			set := f.clock.TimersSet()
			f.clock.Advance(waitroom.YieldFor)
			f.resleep(t, set)
			if n := tries.Load(); n != tc.before+1 {
				t.Fatalf("%d attempts once the yield ended, want %d", n, tc.before+1)
			}
			f.room.Close()
			if o := outcome(t, out); o.End != waitroom.Closed {
				t.Fatalf("outcome %+v after Close, want Closed", o)
			}
		})
	}
}

func TestARequestThatJoinsWithoutTryingAsksRefreshFirst(t *testing.T) {
	// A request that does not try on arrival (a queue is there, or the
	// replica yields) asks Refresh first: a lease that holds the lock
	// already is answered at once, and one that does not joins the queue.
	// A request that tries on arrival does not ask.
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, f *roomFixture)
		asked   bool
		holders int // waiters asleep once the request joined
	}{
		{"nobody waits", func(*testing.T, *roomFixture) {}, false, 1},
		{"behind a queue", func(t *testing.T, f *roomFixture) {
			var tries atomic.Int32
			f.wait(context.Background(), waitroom.Request[string]{Resource: "r", Lease: "first", Wait: time.Minute, Try: held(&tries)})
			f.asleep(t, 1)
		}, true, 2},
		{"while the replica yields", func(_ *testing.T, f *roomFixture) { f.room.Yield("r") }, true, 1},
	} {
		for _, holds := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/holds %v", tc.name, holds), func(t *testing.T) {
				f := newRoom(t)
				tc.setup(t, f)
				var tries, asked atomic.Int32
				refresh := func(context.Context) bool { asked.Add(1); return holds }
				out := f.wait(context.Background(), waitroom.Request[string]{Resource: "r", Lease: "w", Wait: time.Minute,
					Try: held(&tries), Refresh: refresh})
				if tc.asked && holds {
					if o := outcome(t, out); o.End != waitroom.Tried || tries.Load() != 0 {
						t.Fatalf("outcome %+v after %d attempts; want Tried, answered by Refresh alone", o, tries.Load())
					}
				} else {
					f.asleep(t, tc.holders)
				}
				if got := asked.Load() == 1; got != tc.asked {
					t.Fatalf("Refresh asked %d times, want asked: %v", asked.Load(), tc.asked)
				}
			})
		}
	}
}
