package lockcore

import (
	"context"
)

// Inspect reports who holds the lock: the lease that holds it on a majority
// of nodes. The lease id is not reported.
//
// Errors: *InvalidError; ErrNotHeld; *QuorumError (ErrNoQuorum); or an error
// matching ctx.Err().
func (r *Redlock) Inspect(ctx context.Context, resource string) (*LockInfo, error) {
	if err := r.checkResource(resource); err != nil {
		return nil, err
	}
	_ = r.guard.ready(ctx) // before the clock starts; call reports its error
	start := r.opt.Clock.Now()
	locks := make([]NodeLock, len(r.nodes))
	// A lease that a quorum of the nodes heard holds decides; later answers
	// cannot change that. The locks of nodes not heard are not read.
	var v view
	heldAt := func(i int) bool { return v.Heard[i] && v.Answers[i].err == nil && locks[i].Found }
	rd := r.call(ctx, func(ctx context.Context, i int, n Node) (NodeReply, error) {
		l, err := n.Inspect(ctx, resource)
		locks[i] = l
		return NodeReply{}, err
	}, func(heard view) bool { v = heard; return quorumHolds(r.quorum, locks, heldAt) })
	v = rd.View()
	results := v.Answers
	rd.Rest(nil, nil)
	var causes []error
	byLease := map[string][]NodeLock{}
	for i, res := range results {
		if res.err != nil {
			causes = append(causes, res.err)
			continue
		}
		if heldAt(i) {
			byLease[locks[i].Lease] = append(byLease[locks[i].Lease], locks[i])
		}
	}
	if answered := len(r.nodes) - len(causes); answered < r.quorum {
		r.opt.Observer.QuorumFailed("inspect")
		return nil, withCtx(ctx, r.noQuorum(&QuorumError{Op: "inspect", Needed: r.quorum, Answered: answered, Causes: causes}))
	}
	for _, held := range byLease {
		if len(held) < r.quorum {
			continue
		}
		info := r.lockInfo(resource, held, start, r.opt.Clock.Now())
		return &info, nil
	}
	return nil, ErrNotHeld
}

// quorumHolds reports whether one lease holds quorum of locks, counting only
// the nodes i for which held(i).
func quorumHolds(quorum int, locks []NodeLock, held func(i int) bool) bool {
	for i := range locks {
		n := 0
		for j := range locks {
			if held(i) && held(j) && locks[j].Lease == locks[i].Lease {
				n++
			}
		}
		if n >= quorum {
			return true
		}
	}
	return false
}
