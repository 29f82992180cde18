package waitroom

import "time"

// state is where a waiter stands; see the table in the package doc.
type state uint8

const (
	queued     state = iota // behind the head
	head                    // at the front, waiting for a reason to try
	attempting              // at the front, its own attempt under way
	claimed                 // at the front, a Release is handing the lock to it
	handed                  // a hand-off gave it a lease, not yet taken
	served                  // its wait is over (a lease, or an answer); it is leaving
	gone                    // it left the queue
)

var stateNames = [...]string{"queued", "head", "attempting", "claimed", "handed", "served", "gone"}

func (s state) String() string { return stateNames[s] }

// view is what decide looks at: one waiter's state and its queue's, at one
// moment. The room builds it under its mutex.
type view struct {
	state    state
	now      time.Time
	deadline time.Time // the end of the wait
	closed   bool      // the room is closed
	// freed counts the nodes announced free since the head's last attempt
	// began (or since it became the head); quorum is how many make the lock
	// free as far as anyone knows.
	freed, quorum int
	// woken: the lock may be free for another reason than announcements:
	// the waiter is a new queue's first, the head before it left without
	// the lock, or a failed hand-off to it freed nodes.
	woken bool
	// retryAt is when to try without any news: the holder's expiry as the
	// last attempt learnt it, or the end of the pause after a split vote.
	retryAt time.Time
	// split: the last attempt was a split vote (some nodes granted it, not a
	// quorum); news that the lock is free waits for retryAt, as Redlock
	// prescribes, so that competing replicas fall out of step.
	split bool
	// yieldUntil: this replica released a lock a waiter on another replica
	// wanted; until then the head does not try, whatever is due.
	yieldUntil time.Time
	// resubscribeAt is when the head retries the Watch subscriptions its
	// queue lacks (zero: none is missing). A queue that misses one may miss
	// a release, so the head also tries then: a deaf queue polls.
	resubscribeAt time.Time
	// poll: the head just resubscribed and tries in case it missed a
	// release meanwhile.
	poll bool
}

// verb is what a waiter does next.
type verb uint8

const (
	sleep       verb = iota // until action.until, or until something wakes it
	attempt                 // one acquisition round of its own
	resubscribe             // retry the queue's missing Watch subscriptions, then decide again
	take                    // take the lease a hand-off gave it
	giveUp                  // the wait ran out
	shut                    // the room closed
)

var verbNames = [...]string{"sleep", "attempt", "resubscribe", "take", "give up", "shut"}

func (v verb) String() string { return verbNames[v] }

// action is decide's answer.
type action struct {
	verb  verb
	until time.Time // sleep: when to wake by itself
}

// decide returns what a waiter does next. It holds every rule of when a
// waiter wakes and tries; the room only gathers the view and carries the
// action out.
func decide(v view) action {
	switch {
	case v.state == handed:
		return action{verb: take} // even past the deadline: the lock is its
	case v.closed:
		return action{verb: shut}
	case !v.now.Before(v.deadline):
		return action{verb: giveUp}
	case v.state != head:
		// Queued: only the head is served. Claimed: the hand-off's end
		// wakes it (with a lease, or to decide again as the head).
		return action{verb: sleep, until: v.deadline}
	case !v.due():
		return action{verb: sleep, until: earliest(v.deadline, v.retryAt, v.resubscribeAt)}
	case v.now.Before(v.yieldUntil):
		// Another replica's waiter goes first; what is due stays due.
		return action{verb: sleep, until: earliest(v.deadline, v.yieldUntil)}
	case reached(v.now, v.resubscribeAt):
		return action{verb: resubscribe}
	default:
		return action{verb: attempt}
	}
}

// due reports whether the head has a reason to try now.
func (v view) due() bool {
	free := v.woken || v.freed >= v.quorum
	return (free && !v.split) || v.poll || reached(v.now, v.retryAt) || reached(v.now, v.resubscribeAt)
}

// reached reports whether t is set and now is at or past it.
func reached(now, t time.Time) bool { return !t.IsZero() && !now.Before(t) }

// earliest returns the earliest of the times that are set.
func earliest(ts ...time.Time) time.Time {
	var out time.Time
	for _, t := range ts {
		if !t.IsZero() && (out.IsZero() || t.Before(out)) {
			out = t
		}
	}
	return out
}
