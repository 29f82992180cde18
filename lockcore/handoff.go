package lockcore

import (
	"context"
	"errors"
	"sync/atomic"
)

// handOffTo releases req's lease and, in the same step on each node, grants
// the lock to next, the head of this replica's queue (see HandOffer). The
// grants are settled like an Acquire round begun when the hand-off began:
// next gets a lease with its token fenced as for any acquisition, or its
// grants are undone and it is woken to try by itself. The release is
// judged as Release judges it, whatever became of the grant.
//
// It is decided at the first quorum when the nodes heard both released the
// lock (none refusing If-Match) and granted it to next, as decidedEarly
// decides an acquisition: the answers still to come are then acted on as
// an acquisition's late answers are (see lateAcquire), and a node that
// released without passing the lock on is announced. Otherwise it waits
// for every node.
//
// The hand-off runs to its end even if ctx ends: next's answer depends on it.
func (r *Redlock) handOffTo(ctx context.Context, req ReleaseRequest, next *waiter) error {
	hctx := context.WithoutCancel(ctx)
	_ = r.guard.ready(ctx)                              // before the clock starts; call reports its error
	r.lates.wait(hctx, next.q.Resource, next.q.LeaseID) // see lateLease
	// The hand-off is a round of the waiter's request (see
	// attempt.superseded).
	at := next.q.begin()
	start := r.opt.Clock.Now()
	h := &handOff{r: r, req: req, next: next, at: at, na: r.nodeAcquire(at.AcquireRequest),
		grants: make([]NodeReply, len(r.nodes)), settled: make(chan struct{})}
	results := r.checked(hctx, req.IfToken, h.call, h.early, h.late)
	g := h.grantsOf(results)
	var handed uint64
	for _, res := range g {
		if handedOn(res) {
			handed |= 1 << res.i
		}
	}
	freed := released(results) &^ handed // released without passing it on: announced
	if handed != 0 {
		h.lease, h.err = r.settle(hctx, at, start, g)
		h.token = tokenOf(h.lease)
	} else {
		h.err = ErrNotHeld // nothing was granted, so nothing to undo
	}
	if n := unheard(results); n > 0 {
		h.pending.Store(int32(n))
		h.ll = r.lates.begin(at.Resource, at.LeaseID)
	}
	close(h.settled)
	if h.err != nil && wanted(results) {
		r.waits.yield(req.Resource)
	}
	r.waits.deliver(next, h.lease, h.err, freed != 0) // a lease for a waiter that left is released
	r.waits.announce(req.Resource, freed)
	if err := r.verdict("release", req.Resource, count(results, StatusOK)); err != nil {
		return withCtx(ctx, err)
	}
	return nil
}

// handOff is one hand-off under way (see Redlock.handOffTo): the release of
// req's lease, which grants the lock to next on each node.
type handOff struct {
	r      *Redlock
	req    ReleaseRequest
	next   *waiter
	at     attempt // the round of next's request that the hand-off is
	na     NodeAcquire
	grants []NodeReply  // by node, written by its call before it answers
	view   []nodeResult // early's view of the grants heard, reused

	// Set before settled is closed; the late answers read token, ll.
	lease   *Lease
	token   int64 // lease's token, 0 without one (see lateAcquire)
	err     error
	ll      *lateLease
	settled chan struct{}
	pending atomic.Int32 // late answers still to act on
}

func (h *handOff) call(ctx context.Context, i int, n Node, ifToken int64) (NodeReply, error) {
	rel, got, err := n.(HandOffer).HandOff(ctx, h.req.LeaseID, ifToken, h.na)
	h.grants[i] = got
	return rel, err
}

// grantsOf returns the grants of the nodes that answered the release in
// results, with the release's errors.
func (h *handOff) grantsOf(results []nodeResult) []nodeResult {
	g := make([]nodeResult, len(results))
	for i, res := range results {
		g[i] = h.grant(res)
	}
	return g
}

func (h *handOff) grant(res nodeResult) nodeResult {
	g := nodeResult{i: res.i, err: res.err}
	if res.err == nil {
		g.reply = h.grants[res.i]
	}
	return g
}

// early decides the hand-off once the nodes heard both released the lock
// (see Redlock.matched) and granted it to next (see Redlock.decidedEarly).
func (h *handOff) early(v view) bool {
	if !h.r.matched(v) {
		return false
	}
	if h.view == nil {
		h.view = make([]nodeResult, len(v.Answers))
	}
	for i, res := range v.Answers {
		h.view[i] = h.grant(res)
	}
	return h.r.decidedEarly(h.at, view{Answers: h.view, Heard: v.Heard})
}

// late acts on a node's answer that came after the hand-off was decided: a
// node that released without passing the lock on is announced, and its
// grant is acted on as an acquisition's late answer is (see lateAcquire).
func (h *handOff) late(res nodeResult, _ int64) {
	<-h.settled
	g := h.grant(res)
	if res.err == nil && res.reply.Status == StatusOK && !handedOn(g) {
		h.r.waits.announce(h.req.Resource, 1<<res.i)
	}
	h.r.lateAcquire(h.at, h.token, h.ll, g)
	if h.pending.Add(-1) == 0 {
		h.r.lates.end(h.ll)
	}
}

// handedOn reports whether a node's answer to a hand-off granted the lock
// to the next holder.
func handedOn(grant nodeResult) bool {
	s := grant.reply.Status
	return grant.err == nil && (s == StatusGranted || s == StatusReentered)
}

// unheard counts the nodes whose answer a decided round had not heard.
func unheard(results []nodeResult) int {
	n := 0
	for _, res := range results {
		if res.err != nil && errors.Is(res.err, errUnheard) {
			n++
		}
	}
	return n
}
