package lockcore

import (
	"context"
	"errors"
)

// fence makes sure a majority of nodes hold a fencing counter ≥ token (see
// the package doc for why). Nodes that returned token already do; the others
// are raised before answering when those are fewer than a quorum, and
// otherwise in the background (catchUp), so that no node stays behind.
func (r *Redlock) fence(ctx context.Context, resource, lease string, token int64, results []nodeResult) error {
	have := 0
	for _, res := range results {
		if res.err == nil && res.reply.Token == token && (res.reply.Status == StatusGranted ||
			res.reply.Status == StatusReentered || res.reply.Status == StatusOK) {
			have++
		}
	}
	if have >= r.quorum {
		r.catchUp(resource, lease, token, results)
		return nil
	}
	r.opt.Observer.Fenced()
	rd := r.call(ctx, func(ctx context.Context, _ int, n Node) (NodeReply, error) {
		return NodeReply{Status: StatusOK}, n.RaiseFence(ctx, resource, lease, token)
	}, func(v view) bool { return count(v.Answers, StatusOK).ok >= r.quorum })
	t := count(rd.Answers(), StatusOK)
	rd.Rest(nil, nil) // a raise heard late changed what it had to
	if t.ok < r.quorum {
		return r.noQuorum(&QuorumError{Op: "fence", Needed: r.quorum, Answered: t.ok, Causes: t.causes})
	}
	return nil
}

// catchUp raises, in the background, the counters of the nodes that did not
// answer token: those that answered lower (they missed grants while down or
// slow) and those that did not answer (other than quarantined ones). Close
// waits for the raises. Left
// behind, such a node would weaken the fencing argument once another node
// loses its data (see the package doc).
func (r *Redlock) catchUp(resource, lease string, token int64, results []nodeResult) {
	if r.unprotected {
		return
	}
	for i, res := range results {
		behind := res.err == nil && res.reply.Token < token
		// Nodes still to answer are raised when they answer (see lateAcquire).
		unheard := res.err != nil && !isQuarantined(res.err) && !errors.Is(res.err, errUnheard)
		if !behind && !unheard {
			continue
		}
		r.spawn(func() { r.raiseOn(i, resource, lease, token) })
	}
}

// level raises, in the background, the counters of the nodes that answered
// a round with a token below token (see settle's failure path).
func (r *Redlock) level(resource, lease string, token int64, results []nodeResult) {
	if r.unprotected {
		return
	}
	for i, res := range results {
		if res.err == nil && res.reply.Token < token {
			r.spawn(func() { r.raiseOn(i, resource, lease, token) })
		}
	}
}

// catchUpLate is catchUp for a node whose answer came after its round was
// decided with token: a node that answered a lower counter or token, or did
// not answer (unless it is quarantined), is raised.
func (r *Redlock) catchUpLate(resource, lease string, token int64, res nodeResult) {
	if (res.err == nil && res.reply.Token < token) || (res.err != nil && !isQuarantined(res.err)) {
		r.raiseOn(res.i, resource, lease, token)
	}
}

// nodeCall makes one call to node i in the background path of a round's
// late answers, bounded by the node timeout of the moment.
func (r *Redlock) nodeCall(i int, fn func(ctx context.Context, n Node) (NodeReply, error)) (NodeReply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.nodeTimeout())
	defer cancel()
	return fn(ctx, r.calls[i])
}

// raiseOn raises node i's counter for resource, and lease's token there,
// to token (see fence).
func (r *Redlock) raiseOn(i int, resource, lease string, token int64) {
	if r.unprotected {
		return
	}
	r.nodeCall(i, func(ctx context.Context, n Node) (NodeReply, error) {
		return NodeReply{}, n.RaiseFence(ctx, resource, lease, token)
	})
}
