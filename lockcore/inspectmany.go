package lockcore

import (
	"context"
	"fmt"
	"time"
)

// InspectMany reports, for each of resources in order, what Inspect would:
// the lock's holder, or nil where no lease holds it on a quorum of nodes.
// It reads them all in one round, one call per node (Lister.InspectLocks),
// so that a node's slow answer or a stall of this process costs one node
// timeout for the lot rather than one per lock. A semaphore's permits are
// read this way.
//
// Errors: *InvalidError; ErrNotSupported when a node is not a Lister;
// *QuorumError (ErrNoQuorum); or an error matching ctx.Err().
func (r *Redlock) InspectMany(ctx context.Context, resources []string) ([]*LockInfo, error) {
	for _, res := range resources {
		if err := r.checkResource(res); err != nil {
			return nil, err
		}
	}
	listers, err := r.listers()
	if err != nil {
		return nil, err
	}
	_ = r.guard.ready(ctx) // before the clock starts, as Inspect
	start := r.opt.Clock.Now()
	views := make([][]NodeLock, len(r.nodes))
	results := r.fanout(ctx, func(ctx context.Context, i int, _ Node) (NodeReply, error) {
		v, err := listers[i].InspectLocks(ctx, resources)
		if err == nil && len(v) != len(resources) {
			err = fmt.Errorf("lockcore: %d locks read for %d names", len(v), len(resources))
		}
		views[i] = v
		return NodeReply{}, err
	})
	var causes []error
	for _, res := range results {
		if res.err != nil {
			causes = append(causes, res.err)
			views[res.i] = nil
		}
	}
	if answered := len(r.nodes) - len(causes); answered < r.quorum {
		r.opt.Observer.QuorumFailed("inspect")
		return nil, withCtx(ctx, r.noQuorum(&QuorumError{Op: "inspect", Needed: r.quorum, Answered: answered, Causes: causes}))
	}
	now := r.opt.Clock.Now()
	out := make([]*LockInfo, len(resources))
	for k, name := range resources {
		out[k] = r.heldBy(views, k, name, start, now)
	}
	return out, nil
}

// listers returns the nodes as Listers, or ErrNotSupported.
func (r *Redlock) listers() ([]Lister, error) {
	listers := make([]Lister, len(r.nodes))
	for i, n := range r.nodes {
		l, ok := n.(Lister)
		if !ok {
			return nil, ErrNotSupported
		}
		listers[i] = l
	}
	return listers, nil
}

// heldBy describes the lock on name (views[i][k] for node i) if one lease
// holds it on a quorum of nodes, else nil.
func (r *Redlock) heldBy(views [][]NodeLock, k int, name string, start, now time.Time) *LockInfo {
	for _, held := range holders(views, k) {
		if len(held) < r.quorum {
			continue
		}
		locks := make([]NodeLock, len(held))
		for j, i := range held {
			locks[j] = views[i][k]
		}
		info := r.lockInfo(name, locks, start, now)
		return &info
	}
	return nil
}
