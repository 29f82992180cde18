package lockcore

import (
	"context"
	"time"
)

// Ready returns nil when a quorum of nodes is in service: each answers its
// check, accepts writes, has its data whole and is not quarantined (see
// Node.Check). Otherwise it returns a *QuorumError whose causes say what is
// wrong with each other node (a *NodeError wrapping ErrQuarantined, a
// refusal of writes, or the check's error). It checks every node now (a
// check may write to the node); LastReady answers from the guard's last
// pass instead.
func (r *Redlock) Ready(ctx context.Context) error {
	if err := r.guard.ready(ctx); err != nil {
		return r.noQuorum(&QuorumError{Op: "check", Needed: r.quorum, Causes: []error{err}})
	}
	res := r.guard.check(ctx)
	r.guard.report(res)
	return r.readiness(res)
}

// LastReady is Ready as of the node guard's last pass over the nodes (one
// every Options.CheckInterval), so that it costs the nodes nothing: a
// readiness probe asked often, by anyone, must not write to every node at
// every call. When the last pass is older than two check intervals and a
// check's timeout (the guard is stuck in a long repair, say), it checks
// the nodes as Ready does.
func (r *Redlock) LastReady(ctx context.Context) error {
	if err := r.guard.ready(ctx); err != nil {
		return r.noQuorum(&QuorumError{Op: "check", Needed: r.quorum, Causes: []error{err}})
	}
	res, at := r.guard.lastPass()
	if res == nil || time.Since(at) > 2*r.opt.CheckInterval+r.checkTimeout() {
		return r.Ready(ctx)
	}
	return r.readiness(res)
}

// readiness is Ready's answer for the check results res.
func (r *Redlock) readiness(res []checkResult) error {
	var causes []error
	for i, c := range res {
		err := c.err
		if err == nil {
			err = healthError(c.h)
		}
		if err != nil {
			if c.err == nil && (c.h.Lost || !c.h.Initialized) {
				r.guard.poke()
			}
			causes = append(causes, &NodeError{Node: r.nodes[i].String(), Err: err})
		}
	}
	if ok := len(r.nodes) - len(causes); ok < r.quorum {
		r.opt.Observer.QuorumFailed("check")
		return r.noQuorum(&QuorumError{Op: "check", Needed: r.quorum, Answered: ok, Causes: causes})
	}
	return nil
}

// quarantine is how long a node that lost data stays out of service before
// it is repaired: longer than any lock it held can have lived on (the
// largest TTL, its drift allowance and the longest a node call can take,
// MaxNodeTimeout: the timeout of the moment may have been raised to it).
func (r *Redlock) quarantine() time.Duration {
	return r.opt.MaxTTL + r.drift(r.opt.MaxTTL) + r.opt.MaxNodeTimeout
}

// checkTimeout bounds one node's Check: a few node calls' worth of the node
// timeout of the moment, which a busy machine raises (a check that failed
// for want of CPU would take nodes out of service).
func (r *Redlock) checkTimeout() time.Duration { return max(4*r.nodeTimeout(), 250*time.Millisecond) }
