package lockcore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Acquire takes the lock on req.Resource, waiting up to req.Wait while
// another lease holds it.
//
// Errors: *InvalidError (ErrInvalid); *TakenError (ErrTaken) when another
// lease holds it after the wait; *QuorumError (ErrNoQuorum) when too few
// nodes answered; ErrTooManyWaiters; ErrClosed; or an error matching
// ctx.Err() when ctx ended first.
func (r *Redlock) Acquire(ctx context.Context, req AcquireRequest) (*Lease, error) {
	if err := r.checkRequest(req.Resource, req.LeaseID, req.TTL, mayMint); err != nil {
		return nil, err
	}
	if req.Wait < 0 || req.Wait > r.opt.MaxWait {
		return nil, &InvalidError{Field: "wait_ms", Reason: fmt.Sprintf("must be between 0 and %d", r.opt.MaxWait.Milliseconds())}
	}
	if !ValidOwner(req.Owner) {
		return nil, &InvalidError{Field: "owner", Reason: "must be at most 256 printable characters"}
	}
	minted := req.LeaseID == ""
	if minted {
		req.LeaseID = NewLeaseID()
	}
	return r.acquire(ctx, req, minted)
}

// acquire is Acquire of a checked request whose lease id is set: minted
// says the id was drawn for this request (by Acquire, or by AcquireSet for
// all its members), so it held nothing before it.
func (r *Redlock) acquire(ctx context.Context, req AcquireRequest, minted bool) (*Lease, error) {
	q := acquisition{AcquireRequest: req, minted: minted}
	if q.Wait == 0 {
		lease, err := r.tryAcquire(ctx, &q)
		return r.handOver(ctx, lease, err)
	}
	return r.waits.acquire(ctx, q)
}

// tryAcquire is one Redlock round of q: acquire everywhere, count, fence, or
// undo. The first round of a request records in q whether the lease may
// have held the lock before it (see acquisition.fresh); later rounds of a
// waiting request keep that. The round and its late answers act on an
// attempt of their own, never on q.
func (r *Redlock) tryAcquire(ctx context.Context, q *acquisition) (*Lease, error) {
	_ = r.guard.ready(ctx) // before the clock starts; call reports its error
	r.lates.wait(ctx, q.Resource, q.LeaseID)
	try := q.begin()
	start := r.opt.Clock.Now()
	na := r.nodeAcquire(try.AcquireRequest)
	rd := r.call(ctx, func(ctx context.Context, _ int, n Node) (NodeReply, error) { return n.Acquire(ctx, na) },
		func(v view) bool { return r.decidedEarly(try, v) })
	results := rd.Answers()
	if !q.tried {
		q.tried, q.fresh = true, !r.mayHold(results)
	}
	at := try
	at.fresh = q.fresh
	lease, err := r.settle(ctx, at, start, results)
	var ll *lateLease
	var after func()
	if !rd.Complete() {
		ll = r.lates.begin(at.Resource, at.LeaseID)
		after = func() { r.lates.end(ll) }
	}
	token := tokenOf(lease) // the late answers keep no pointer into the caller's Lease
	rd.Rest(func(res nodeResult) { r.lateAcquire(at, token, ll, res) }, after)
	return lease, err
}

// decidedEarly reports whether the answers heard so far already decide an
// acquisition round: a quorum granted it, or, for a request that does not
// wait, a quorum refused it (held by another lease), so the nodes still to
// answer cannot change the outcome.
// Their answers are acted on when they come (see lateAcquire). A node that
// said it re-entered makes the round wait for every node unless the lease
// is known to have held nothing before the request: whether the lease
// re-entered depends on every answer (see mayHold).
func (r *Redlock) decidedEarly(at attempt, v view) bool {
	ok, taken := 0, 0
	for i, res := range v.Answers {
		if !v.Heard[i] || res.err != nil {
			continue
		}
		switch res.reply.Status {
		case StatusGranted:
			ok++
		case StatusReentered:
			if !at.minted && !at.fresh {
				return false
			}
			ok++
		case StatusTaken:
			taken++
		}
	}
	// A waiting request's refusal waits for every node: a node still to
	// answer may grant (the lock was released during the round), and the
	// split vote is what wakes the waiter early, since the release's
	// announcements can come before its queue listens.
	// Nor does a refusal of a lease id the client chose: a late grant to it
	// is left alone (see lateAcquire), and must not outlive the refusal.
	return ok >= r.quorum || (taken >= r.quorum && !at.Waits() && at.minted)
}

// lateAcquire acts on a node's answer to the acquisition round at that
// came after the round was decided (see round.Rest); token is the token
// the round answered, 0 when it failed.
//   - the round granted the lease: a node that granted it with a higher token
//     than the one answered releases that copy, if it still carries that
//     token (the token was never answered, and every copy of a lease must
//     carry the token its holder was given: Inspect, and so every observer,
//     reports the highest token a lease's copies carry); a node left with
//     a lower counter or token is raised to the token answered, as catchUp
//     raises the nodes heard; a node that did not answer is raised too,
//     unless it is quarantined;
//   - the round failed after all (fencing failed, or the validity ran out):
//     the late grant of a minted lease id is undone as undoAcquire undoes
//     those heard;
//   - a minted lease was released through this Redlock meanwhile (ll, see
//     lateLease): the release may have reached this node before the grant,
//     so the grant is released.
//
// A lease id the client chose may be in use by another request at the same
// time (a retry through another gateway replica): a copy found late may be
// that request's. When this round granted the lease, releasing a higher
// copy leaves the quorum this round was granted by, which is the same
// lease's, so the retry's lease holds on (its own fencing raised those
// copies to its token); when this round failed, the copy is left alone, as
// undoAcquire leaves alone a node that did not answer (a copy this request
// made there expires with its TTL), and only counters catch up.
func (r *Redlock) lateAcquire(at attempt, token int64, ll *lateLease, res nodeResult) {
	grant := grantedLate(at, res)
	if !at.minted {
		switch {
		case token == 0:
		case grant && res.reply.Token > token:
			r.releaseHigher(at, res)
		default:
			r.catchUpLate(at.Resource, at.LeaseID, token, res)
		}
		return
	}
	if token == 0 {
		if grant || (res.err != nil && at.minted) {
			again := make([]bool, len(r.nodes))
			again[res.i] = true
			r.undoOn(at, again)
		}
		return
	}
	switch {
	case grant && ll.released.Load():
		// Released meanwhile, maybe before this node granted it. Its
		// counter still catches up.
		r.catchUpLate(at.Resource, at.LeaseID, token, res)
		r.nodeCall(res.i, func(ctx context.Context, n Node) (NodeReply, error) {
			return n.Release(ctx, at.Resource, at.LeaseID, 0)
		})
	case grant && res.reply.Token > token:
		r.releaseHigher(at, res)
	default:
		r.catchUpLate(at.Resource, at.LeaseID, token, res)
	}
}

// releaseHigher releases the copy node res.i granted late with a token above
// the one answered, only while it still carries that token (If-Match).
func (r *Redlock) releaseHigher(at attempt, res nodeResult) {
	r.nodeCall(res.i, func(ctx context.Context, n Node) (NodeReply, error) {
		return n.Release(ctx, at.Resource, at.LeaseID, res.reply.Token)
	})
}

// tokenOf returns lease's token, or 0 for none (no lease has token 0).
func tokenOf(lease *Lease) int64 {
	if lease == nil {
		return 0
	}
	return lease.Token
}

// grantedLate reports whether res, a node's late answer to the acquisition
// round at, granted at's lease: a grant, or a re-entry of a lease that
// held nothing before the request (see acquisition.fresh).
func grantedLate(at attempt, res nodeResult) bool {
	fresh := at.minted || at.fresh
	return res.err == nil && (res.reply.Status == StatusGranted || (res.reply.Status == StatusReentered && fresh))
}

// mayHold reports whether an acquisition round's answers leave room for the
// lease to have held the lock before it: a quorum of nodes either said it
// re-entered or did not answer.
func (r *Redlock) mayHold(results []nodeResult) bool {
	n := 0
	for _, res := range results {
		if res.err != nil || res.reply.Status == StatusReentered {
			n++
		}
	}
	return n >= r.quorum
}

func (r *Redlock) nodeAcquire(req AcquireRequest) NodeAcquire {
	return NodeAcquire{Resource: req.Resource, Lease: req.LeaseID, TTL: req.TTL, Owner: req.Owner,
		Replica: r.id, Waits: req.Wait > 0}
}

// settle decides an acquisition from the nodes' answers to it (an Acquire
// round begun at start, or the grants of a hand-off begun at start): a lease
// when a quorum granted it within its validity, its token fenced on a
// quorum; otherwise an error, after undoing what was granted.
func (r *Redlock) settle(ctx context.Context, at attempt, start time.Time, results []nodeResult) (*Lease, error) {
	req := at.AcquireRequest
	if at.minted || at.fresh {
		// The lease held nothing before this request (a minted id, or see
		// acquisition.fresh): a node that says it re-entered holds a
		// copy this request made, not an earlier hold.
		reentriesAsGrants(results)
	}
	t := count(results, StatusGranted, StatusReentered)
	reentered := slices.ContainsFunc(results, func(res nodeResult) bool {
		return res.err == nil && res.reply.Status == StatusReentered
	})

	fail := func(err error) (*Lease, error) {
		r.quorumFailed(err)
		r.undoAcquire(at, results, reentered)
		if (at.minted || at.fresh) && t.maxToken > 0 {
			// The nodes that granted spent a token each; the others did
			// not. Left so, their counters drift apart with every split
			// round (waiters of two replicas racing for a freed lock), and
			// a later grant's token, the highest of its quorum, then
			// differs from what the other copies carry until they are
			// fenced: an observer reading in between sees a token the
			// holder is never given. Raising the others now (never
			// lowering: always safe for fencing) keeps them level. Only
			// the nodes that answered are raised: a failure that found
			// nodes down must not send them more work.
			r.level(req.Resource, req.LeaseID, t.maxToken, results)
		}
		if ctx.Err() != nil {
			return nil, errors.Join(ctx.Err(), err)
		}
		return nil, err
	}

	if t.ok < r.quorum {
		switch {
		case t.answered() < r.quorum:
			return fail(r.noQuorum(&QuorumError{Op: "acquire", Needed: r.quorum, Answered: t.answered(), Causes: t.causes}))
		default:
			return fail(&TakenError{Resource: req.Resource, RetryAfter: t.freeIn(r.quorum), granted: t.ok})
		}
	}
	if t.maxToken <= 0 || t.maxToken > MaxToken {
		return fail(r.noQuorum(&QuorumError{Op: "acquire", Needed: r.quorum, Answered: t.answered(),
			Causes: []error{fmt.Errorf("lockcore: fencing counter out of range: %d", t.maxToken)}}))
	}
	if err := r.fence(ctx, req.Resource, req.LeaseID, t.maxToken, results); err != nil {
		return fail(err)
	}
	now := r.opt.Clock.Now()
	validity := r.validity(start, now, req.TTL)
	if validity < MinValidity {
		return fail(r.noQuorum(&QuorumError{Op: "acquire", Needed: r.quorum, Answered: t.answered(), Causes: []error{ErrValidityExhausted}}))
	}
	return &Lease{
		Resource: req.Resource, ID: req.LeaseID, Token: t.maxToken, TTL: req.TTL,
		Validity: validity, Expires: now.Add(validity), Reentered: reentered, Owner: req.Owner, minted: at.minted,
	}, nil
}

// reentriesAsGrants turns every StatusReentered answer in results into
// StatusGranted (see settle).
func reentriesAsGrants(results []nodeResult) {
	for i := range results {
		if results[i].err == nil && results[i].reply.Status == StatusReentered {
			results[i].reply.Status = StatusGranted
		}
	}
}
