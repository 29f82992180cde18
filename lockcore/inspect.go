package lockcore

import (
	"context"
	"time"
)

// Inspect reports who holds the lock: the lease that holds it on a majority
// of nodes. The lease id is not reported.
//
// Errors: *InvalidError; ErrNotHeld when no lease can hold a quorum (the
// nodes that did not answer included); *QuorumError (ErrNoQuorum) when too
// few nodes answered, or when a lease the answers show could hold a quorum
// with the nodes that did not answer; or an error matching ctx.Err().
func (r *Redlock) Inspect(ctx context.Context, resource string) (*LockInfo, error) {
	if err := r.checkResource(resource); err != nil {
		return nil, err
	}
	_ = r.guard.ready(ctx) // before the clock starts; call reports its error
	for try := 1; ; try++ {
		info, agreed, err := r.inspect(ctx, resource)
		if err != nil || agreed || try == inspectTries || ctx.Err() != nil {
			return info, err
		}
		time.Sleep(inspectPause)
	}
}

// While the copies of the lease that holds a lock agree on no token (a
// grant between its answers and step 3's raise), Inspect reads them again,
// up to inspectTries times inspectPause apart, so that an observer is not
// told a token the holder is never answered (see agreedToken).
const (
	inspectTries = 4
	inspectPause = 2 * time.Millisecond
)

// inspect is one read of Inspect; agreed is false when the lock's copies
// agree on no token.
func (r *Redlock) inspect(ctx context.Context, resource string) (_ *LockInfo, agreed bool, _ error) {
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
		return nil, false, withCtx(ctx, r.noQuorum(&QuorumError{Op: "inspect", Needed: r.quorum, Answered: answered, Causes: causes}))
	}
	for _, held := range byLease {
		if len(held) < r.quorum {
			continue
		}
		_, agreed := agreedToken(held, r.quorum)
		info := r.lockInfo(resource, held, start, r.opt.Clock.Now())
		return &info, agreed, nil
	}
	// Not held is an answer only when the nodes that did not answer could
	// not make a quorum for a lease found: otherwise a holder whose copies
	// are on slow nodes would be reported gone (and an observer would
	// hear of "no leader" while it leads). A quarantined node holds no
	// copy that counts.
	unsure := 0
	for _, c := range causes {
		if !isQuarantined(c) {
			unsure++
		}
	}
	for _, held := range byLease {
		if len(held)+unsure >= r.quorum {
			r.opt.Observer.QuorumFailed("inspect")
			return nil, false, withCtx(ctx, r.noQuorum(&QuorumError{Op: "inspect", Needed: r.quorum, Answered: len(r.nodes) - len(causes), Causes: causes}))
		}
	}
	return nil, true, ErrNotHeld
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
