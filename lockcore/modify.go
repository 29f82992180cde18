package lockcore

import (
	"context"
	"slices"
	"time"
)

// Extend resets a held lock's TTL on a majority of nodes. With IfToken, each
// node extends only if the lock's token there is IfToken, in the same atomic
// step (no separate read first); nodes that disagree with a quorum that
// matched are extended as without IfToken (see checked).
//
// Errors: *InvalidError; ErrTokenMismatch; ErrNotHeld; *HeldByOtherError
// (ErrHeldByOther); *QuorumError (ErrNoQuorum); or an error matching
// ctx.Err().
func (r *Redlock) Extend(ctx context.Context, req ExtendRequest) (*Lease, error) {
	if err := r.checkRequest(req.Resource, req.LeaseID, req.TTL, mayKeepTTL); err != nil {
		return nil, err
	}
	_ = r.guard.ready(ctx) // before the clock starts; call reports its error
	start := r.opt.Clock.Now()
	results := r.checked(ctx, req.IfToken, func(ctx context.Context, _ int, n Node, ifToken int64) (NodeReply, error) {
		return n.Extend(ctx, req.Resource, req.LeaseID, req.TTL, ifToken)
	}, r.matched, func(res nodeResult, token int64) {
		// A node that extended late, or not at all, catches up with the
		// token answered, as catchUp raises those heard.
		r.catchUpLate(req.Resource, req.LeaseID, token, res)
	})
	t := count(results, StatusOK)
	if err := r.verdict("extend", req.Resource, t); err != nil {
		return nil, withCtx(ctx, err)
	}
	token := t.maxToken
	if req.IfToken != 0 && tokenHeld(results, req.IfToken) >= r.quorum {
		// A quorum extended the lease under the token the client named:
		// that is its token. A node whose copy carries a higher one (a
		// late grant to a lease id the client chose, which lateAcquire
		// leaves alone) was extended without the check, and must not
		// change the holder's token under it: the next If-Match would
		// then fail on every node while the lease holds the lock.
		token = req.IfToken
	}
	// The token answered must be fenced like an acquisition's: a lease can
	// hold a quorum without its grant having been fenced (an attempt whose
	// answers were lost left its copies), and the token its nodes store
	// may then be one a later grant repeats.
	if err := r.fence(ctx, req.Resource, req.LeaseID, token, results); err != nil {
		r.quorumFailed(err)
		return nil, withCtx(ctx, err)
	}
	ttl := req.TTL
	if ttl == 0 {
		// The TTL each node last set; should they differ (an earlier
		// extend reached only some), the shortest is what the quorum is
		// sure of.
		ttl = shortestTTL(results)
	}
	now := r.opt.Clock.Now()
	validity := r.validity(start, now, ttl)
	if validity < MinValidity {
		r.opt.Observer.QuorumFailed("extend")
		return nil, r.noQuorum(&QuorumError{Op: "extend", Needed: r.quorum, Answered: t.answered(), Causes: []error{ErrValidityExhausted}})
	}
	return &Lease{Resource: req.Resource, ID: req.LeaseID, Token: token, TTL: ttl,
		Validity: validity, Expires: now.Add(validity), Reentered: true}, nil
}

// shortestTTL returns the shortest TTL that the nodes that answered
// StatusOK last set, or 0 when none did.
func shortestTTL(results []nodeResult) time.Duration {
	var ttl time.Duration
	for _, res := range results {
		if res.err == nil && res.reply.Status == StatusOK && (ttl == 0 || res.reply.TTL < ttl) {
			ttl = res.reply.TTL
		}
	}
	return ttl
}

// tokenHeld counts the nodes that answered StatusOK with token.
func tokenHeld(results []nodeResult, token int64) int {
	n := 0
	for _, res := range results {
		if res.err == nil && res.reply.Status == StatusOK && res.reply.Token == token {
			n++
		}
	}
	return n
}

// Release frees a held lock on every node and wakes this replica's waiters;
// when one waits, it passes the lock straight to it instead, if the nodes
// allow it (see HandOffer): the next holder then needs no acquire round of
// its own. A lock that a waiter on another replica was refused is not passed
// on, and this replica's waiters let the other replica's try first. IfToken
// is checked by each node in the same atomic step as the release or
// hand-off, as Extend checks it; a refused release hands nothing on.
//
// Errors: *InvalidError; ErrTokenMismatch; ErrNotHeld; *HeldByOtherError
// (ErrHeldByOther); *QuorumError (ErrNoQuorum) when too few nodes answered
// to be sure the lease no longer holds a majority (retrying is safe); or an
// error matching ctx.Err().
func (r *Redlock) Release(ctx context.Context, req ReleaseRequest) error {
	if err := r.checkRequest(req.Resource, req.LeaseID, 0, noTTL); err != nil {
		return err
	}
	r.lates.release(req.Resource, req.LeaseID)
	if r.handOff {
		if next := r.waits.claim(req.Resource, req.LeaseID); next != nil {
			return r.handOffTo(ctx, req, next)
		}
	}
	results := r.checked(ctx, req.IfToken, func(ctx context.Context, _ int, n Node, ifToken int64) (NodeReply, error) {
		return n.Release(ctx, req.Resource, req.LeaseID, ifToken)
	}, r.matched, func(res nodeResult, _ int64) {
		// A node that released late is announced as those heard are; one
		// that did not answer keeps its copy until its TTL runs out, as
		// when the release waits for it and it fails. The quorum's
		// announcement does not cover it: a waiter here that needs this
		// node (its last attempt began after that announcement and no
		// node granted it) hears of its release from nobody else when the
		// node is no Watcher or the queue's subscription to it failed; and
		// a Wanted that only this node reports is yielded to only here
		// (TestALateReleaseIsActedOn).
		if res.err == nil && res.reply.Status == StatusOK {
			if res.reply.Wanted {
				r.waits.yield(req.Resource)
			}
			r.waits.announce(req.Resource, 1<<res.i)
		}
	})
	t := count(results, StatusOK)
	if wanted(results) {
		r.waits.yield(req.Resource)
	}
	r.waits.announce(req.Resource, released(results))
	if err := r.verdict("release", req.Resource, t); err != nil {
		return withCtx(ctx, err)
	}
	return nil
}

// wanted reports whether a node released a lock that had been refused to
// another replica (NodeReply.Wanted).
func wanted(results []nodeResult) bool {
	return slices.ContainsFunc(results, func(res nodeResult) bool {
		return res.err == nil && res.reply.Status == StatusOK && res.reply.Wanted
	})
}

// checked fans call out to every node with ifToken, the token an Extend or
// Release expects (If-Match, 0 for none), which each node checks in the
// same atomic step as the operation (see Node.Extend).
//
// The nodes of a lock may disagree on its token for a while: a node that
// missed the raise of a lease's token (see fence) stores a lower one until
// catchUp raises it, and a node whose answer to the grant was lost may
// store a higher one. The token a quorum holds is the lock's token. So
// when ifToken is set and a quorum matched it, the nodes that answered
// StatusMismatch are called again without the check (the lease id alone
// decides there, as without If-Match), so that a genuine holder's extend
// or release reaches them too. Mismatch answers that, with the matching
// ones, make a quorum refuse the request (see verdict); fewer are judged
// as if If-Match had not been given.
//
// A node whose stored token is lagging behind the quorum's acts on an
// ifToken equal to that lower token while the others refuse it: the
// request then fails with ErrTokenMismatch, but that minority's copy was
// extended or released. Only a client that sends an older token of the
// same lease (one it had before re-acquiring with the same lease id) sees
// this, and the lock still stands on the quorum.
//
// The round is decided as soon as early reports true of the answers heard
// (nil: once every node has answered); the answers still to come are then
// passed to late with the token the quorum answered (see round.Rest). A late
// StatusMismatch is first called again without the check, as above; one
// heard in the round's grace period is called again before checked
// returns, as when every node answered.
func (r *Redlock) checked(ctx context.Context, ifToken int64, call tokenCall, early func(view) bool, late func(res nodeResult, token int64)) []nodeResult {
	rd := r.call(ctx, func(ctx context.Context, i int, n Node) (NodeReply, error) { return call(ctx, i, n, ifToken) }, early)
	results := rd.Answers()
	if rd.Complete() {
		rd.Rest(nil, nil)
	} else {
		// Decided by a quorum that matched: a node that answers later with a
		// mismatch is called again without the check, as below.
		token := count(results, StatusOK).maxToken
		rd.Rest(func(res nodeResult) {
			if ifToken != 0 && res.err == nil && res.reply.Status == StatusMismatch {
				res.reply, res.err = r.nodeCall(res.i, func(ctx context.Context, n Node) (NodeReply, error) { return call(ctx, res.i, n, 0) })
			}
			late(res, token)
		}, nil)
	}
	t := count(results, StatusOK)
	if ifToken == 0 || t.ok < r.quorum || t.mismatch == 0 {
		return results
	}
	return r.recallMismatches(ctx, results, call)
}

// recallMismatches calls the nodes that answered StatusMismatch in results
// again without the token check, and puts their answers in place of the
// mismatches (see checked).
func (r *Redlock) recallMismatches(ctx context.Context, results []nodeResult, call tokenCall) []nodeResult {
	again := r.fanout(ctx, func(ctx context.Context, i int, n Node) (NodeReply, error) {
		if res := results[i]; res.err != nil || res.reply.Status != StatusMismatch {
			return NodeReply{}, nil // kept as it was
		}
		return call(ctx, i, n, 0)
	})
	for i, res := range results {
		if res.err == nil && res.reply.Status == StatusMismatch {
			results[i] = again[i]
		}
	}
	return results
}

// tokenCall is one node call of an Extend or Release (see checked) with
// ifToken, the token expected (0: none).
type tokenCall func(ctx context.Context, i int, n Node, ifToken int64) (NodeReply, error)

// matched decides an extend or release round (see checked) once a quorum
// of the nodes heard did it and none refused it for another token: the
// nodes still to answer cannot change the verdict (see verdict), and a
// mismatch, which may still turn into a success, waits for every node.
func (r *Redlock) matched(v view) bool {
	ok := 0
	for i, res := range v.Answers {
		switch {
		case !v.Heard[i] || res.err != nil:
		case res.reply.Status == StatusMismatch:
			return false
		case res.reply.Status == StatusOK:
			ok++
		}
	}
	return ok >= r.quorum
}

// verdict turns an extend or release tally into nil or the error to return.
//
// "Not held" and "held by other" are answered only when the lease cannot
// hold a quorum: the nodes that confirmed it plus those that did not answer
// (a node whose answer was lost, or one not yet checked after a restart,
// may still have the lock) are fewer than a quorum. Otherwise the outcome
// is unknown: a *QuorumError (503; retrying is safe).
//
// Nodes that found another token than If-Match refuse the request with
// ErrTokenMismatch when, with those that matched, they make a quorum:
// otherwise the lock is not held by a quorum at all, and the answer is what
// it would be without If-Match.
func (r *Redlock) verdict(op, resource string, t tally) error {
	switch {
	case t.ok >= r.quorum:
		return nil
	case t.answered() < r.quorum || t.ok+len(t.causes) >= r.quorum:
		r.opt.Observer.QuorumFailed(op)
		return r.noQuorum(&QuorumError{Op: op, Needed: r.quorum, Answered: t.answered(), Causes: t.causes})
	case t.mismatch > 0 && t.ok+t.mismatch >= r.quorum:
		return ErrTokenMismatch
	case t.taken > 0:
		return &HeldByOtherError{Resource: resource, RetryAfter: t.freeIn(r.quorum)}
	default:
		return ErrNotHeld
	}
}
