package waitroom

import (
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// idle is a head at t0 with a wait until 1s, a quorum of 2 and no reason
	// to try; each case changes what it is about.
	idle := func(change func(*view)) view {
		v := view{state: head, now: t0, deadline: at(1000), quorum: 2}
		if change != nil {
			change(&v)
		}
		return v
	}
	sleepUntil := func(ms int) action { return action{verb: sleep, until: at(ms)} }
	tests := []struct {
		name string
		v    view
		want action
	}{
		{"an idle head sleeps until its deadline", idle(nil), sleepUntil(1000)},
		{"a head sleeps until the holder's lock runs out",
			idle(func(v *view) { v.retryAt = at(300) }), sleepUntil(300)},
		{"a head tries once the holder's lock ran out",
			idle(func(v *view) { v.retryAt = at(300); v.now = at(300) }), action{verb: attempt}},
		{"a deadline before the holder's expiry is when it wakes",
			idle(func(v *view) { v.retryAt = at(3000) }), sleepUntil(1000)},
		{"a quorum announced free wakes the head to try",
			idle(func(v *view) { v.retryAt = at(300); v.freed = 2 }), action{verb: attempt}},
		{"a minority announced free does not",
			idle(func(v *view) { v.retryAt = at(300); v.freed = 1 }), sleepUntil(300)},
		{"a new queue's first waiter, or a head the one before woke, tries at once",
			idle(func(v *view) { v.woken = true }), action{verb: attempt}},
		{"after a split vote, news of a free lock waits for the pause",
			idle(func(v *view) { v.split, v.freed, v.retryAt = true, 3, at(4) }), sleepUntil(4)},
		{"after a split vote, the end of the pause is a reason to try",
			idle(func(v *view) { v.split, v.retryAt, v.now = true, at(4), at(4) }), action{verb: attempt}},
		{"a due head yields to another replica until the yield ends",
			idle(func(v *view) { v.freed, v.yieldUntil = 2, at(3) }), sleepUntil(3)},
		{"a yield that outlasts the wait ends at the deadline",
			idle(func(v *view) { v.freed, v.yieldUntil = 2, at(2000) }), sleepUntil(1000)},
		{"a yield alone is no reason to try",
			idle(func(v *view) { v.yieldUntil = at(3) }), sleepUntil(1000)},
		{"once the yield is over, what was due is tried",
			idle(func(v *view) { v.freed, v.yieldUntil, v.now = 2, at(3), at(3) }), action{verb: attempt}},
		{"a queue missing a subscription wakes its head to resubscribe",
			idle(func(v *view) { v.resubscribeAt = at(500) }), sleepUntil(500)},
		{"the head resubscribes before it tries",
			idle(func(v *view) { v.resubscribeAt, v.now = at(500), at(500) }), action{verb: resubscribe}},
		{"a head that resubscribed tries, in case it missed a release",
			idle(func(v *view) { v.resubscribeAt, v.poll = at(1500), true }), action{verb: attempt}},
		{"a head whose deadline came gives up, whatever is due",
			idle(func(v *view) { v.freed, v.now = 3, at(1000) }), action{verb: giveUp}},
		{"a head whose wait ran out while it resubscribed gives up instead of trying",
			idle(func(v *view) { v.poll, v.now = true, at(1200) }), action{verb: giveUp}},
		{"a queued waiter sleeps until its deadline, whatever is announced",
			idle(func(v *view) { v.state, v.freed, v.woken = queued, 3, true }), sleepUntil(1000)},
		{"a claimed head sleeps until the hand-off ends, though its retry time passed",
			idle(func(v *view) { v.state, v.retryAt, v.now = claimed, at(300), at(400) }), sleepUntil(1000)},
		{"a claimed head gives up at its deadline",
			idle(func(v *view) { v.state, v.now = claimed, at(1000) }), action{verb: giveUp}},
		{"a handed lease is taken",
			idle(func(v *view) { v.state = handed }), action{verb: take}},
		{"a handed lease is taken even past the deadline and after Close",
			idle(func(v *view) { v.state, v.now, v.closed = handed, at(5000), true }), action{verb: take}},
		{"a closed room shuts every waiter",
			idle(func(v *view) { v.state, v.closed = queued, true }), action{verb: shut}},
		{"a closed room shuts a head that was due",
			idle(func(v *view) { v.freed, v.closed = 2, true }), action{verb: shut}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := decide(tc.v); got != tc.want {
				t.Errorf("decide(%+v) = %v until %v, want %v until %v",
					tc.v, got.verb, got.until.Sub(t0), tc.want.verb, tc.want.until.Sub(t0))
			}
		})
	}
}

func TestSplitPauseDoublesWithJitter(t *testing.T) {
	for n, base := range map[int]time.Duration{1: 2 * time.Millisecond, 2: 4 * time.Millisecond, 10: 1024 * time.Millisecond, 50: 1024 * time.Millisecond} {
		for range 100 {
			if d := SplitPause(n); d < base/2 || d >= base*3/2 {
				t.Fatalf("SplitPause(%d) = %v, want within [%v, %v)", n, d, base/2, base*3/2)
			}
		}
	}
}
