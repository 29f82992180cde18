package lockcore

import "sync/atomic"

// acquisition is an Acquire request across its rounds: the request and
// what its rounds have learnt. It belongs to the goroutine of the Acquire
// call; the waiting room keeps a copy taken when the request joined, for
// a hand-off. A round never reads it after it began: it acts on an
// attempt, a value made for it alone (begin), so that the late answers of
// one round share nothing with the next.
type acquisition struct {
	AcquireRequest
	// minted is set when Acquire minted LeaseID: such a lease cannot hold
	// anything from an earlier request.
	minted bool
	// fresh is set when the request's first round showed that the lease did
	// not hold the lock before the request (see mayHold), or, for a request
	// that joined a queue without trying, when its retry check found that
	// the lease holds no quorum (see waitRoom.acquire): a node that says
	// it re-entered then holds a copy from this request's own earlier round
	// (whose answer was lost) or a stray minority copy, and the answer is a
	// new grant. tried is set after the first round.
	fresh, tried bool
	// rounds counts a waiting request's rounds (nil for one that does not
	// wait): shared by every copy of the request (see attempt.superseded).
	rounds *atomic.Int64
}

// attempt is one round of an acquisition (an Acquire round, or a hand-off
// to a waiter): the request and what was known of it when the round
// began, or, for the first round, once its answers showed whether the
// lease is fresh. It is a value: what the round's late answers read
// (lateAcquire, undoOn, retryUndo) is theirs alone.
type attempt struct {
	AcquireRequest
	minted, fresh bool
	rounds        *atomic.Int64 // the acquisition's round counter, nil if it does not wait
	round         int64         // this round's number in rounds
}

// begin numbers a new round of q and returns its attempt.
func (q acquisition) begin() attempt {
	a := attempt{AcquireRequest: q.AcquireRequest, minted: q.minted, fresh: q.fresh, rounds: q.rounds}
	if q.rounds != nil {
		a.round = q.rounds.Add(1)
	}
	return a
}

// superseded reports whether a later round of the acquisition has begun
// since a. A clean-up of a's copies (undoOn, retryUndo) must then stop:
// the lease id is the same in every round, so a release sent for the
// earlier round would free the later round's grant (the lease would then
// answer 404 to its holder).
func (a attempt) superseded() bool {
	return a.rounds != nil && a.rounds.Load() != a.round
}
