package lockcore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Readers-writer locks: see the package doc, "Readers-writer locks", for
// the rules (R1 to R7) these methods follow and why they are safe.

// RWMarkTTL is how long a waiting writer's mark lives on a node after the
// writer's last refused try (rule R4): how long a writer that went away
// keeps new readers out, at most.
const RWMarkTTL = time.Second

// rwRetry bounds the pause between the tries of a waiting readers-writer
// acquisition: far below RWMarkTTL, so that a waiting writer renews its
// marks long before they expire. Each pause is drawn between rwRetry/2 and
// rwRetry, so that waiters on several replicas do not try in step.
const rwRetry = 50 * time.Millisecond

// ErrModeHeld means the lease holds the readers-writer lock in the other
// mode: an upgrade from reader to writer (or a downgrade) is refused,
// changing nothing (rule R5). Release, then acquire in the other mode.
var ErrModeHeld = errors.New("lockcore: the lease holds this readers-writer lock in the other mode (upgrade and downgrade are refused)")

// RWAcquireRequest asks for a hold on a readers-writer lock.
type RWAcquireRequest struct {
	Name string
	// Exclusive asks for the writer's hold; false for a reader's.
	Exclusive bool
	// LeaseID is the caller's secret for this hold; empty: one is minted.
	// A lease that already holds in the mode asked gets its hold back, its
	// TTL reset and its token unchanged (RWLease.Reentered).
	LeaseID string
	TTL     time.Duration
	// Wait is how long to wait while the lock is held in a conflicting
	// mode; 0 fails at once with *TakenError. A waiting writer keeps new
	// readers out meanwhile (rule R4).
	Wait  time.Duration
	Owner string
}

// RWLease is a held reader's or writer's hold.
type RWLease struct {
	Name      string
	Exclusive bool
	ID        string // the lease id: a secret, never log it
	// Token is the fencing token. A writer's is above every earlier
	// holder's; what a reader's promises is rule R3 of the package doc.
	Token int64
	TTL   time.Duration
	// Validity and Expires as for Lease.
	Validity  time.Duration
	Expires   time.Time
	Reentered bool
	Owner     string
}

// RWExtendRequest extends a hold.
type RWExtendRequest struct {
	Name, LeaseID string
	TTL           time.Duration // 0: the TTL the hold was last set with
}

// RWReleaseRequest releases a hold.
type RWReleaseRequest struct {
	Name, LeaseID string
}

// RWHolder is one hold that a quorum of nodes keeps, without its lease id.
type RWHolder struct {
	Exclusive bool
	Token     int64
	Owner     string
	TTL       time.Duration
	// Remaining and Expires as for LockInfo.
	Remaining time.Duration
	Expires   time.Time
}

// RWInfo is who holds a readers-writer lock.
type RWInfo struct {
	Name string
	// Holders are the holds a quorum of nodes keep: readers, or one
	// writer, in token order.
	Holders []RWHolder
	// WriterWaiting is true while enough nodes carry a waiting writer's
	// mark that no new reader can be granted (more than N − quorum).
	WriterWaiting bool
}

// rwNodes returns the nodes as RWNodes, or ErrNotSupported when one does
// not keep readers-writer locks (rule R7).
func (r *Redlock) rwNodes() ([]RWNode, error) {
	out := make([]RWNode, len(r.nodes))
	for i, n := range r.nodes {
		rw, ok := n.(RWNode)
		if !ok {
			return nil, fmt.Errorf("%w: %s keeps no readers-writer locks", ErrNotSupported, n)
		}
		out[i] = rw
	}
	return out, nil
}

func (r *Redlock) checkRWName(name string) error {
	if !ValidResource(name) {
		return &InvalidError{Field: "name", Reason: "must be 1 to 200 characters of A-Z a-z 0-9 . _ - :"}
	}
	return nil
}

// rwFanout calls fn on every node, each call bounded by NodeTimeout, and
// returns once every node answered.
func (r *Redlock) rwFanout(ctx context.Context, nodes []RWNode, fn func(ctx context.Context, n RWNode) (NodeReply, error)) []nodeResult {
	return r.fanout(ctx, func(ctx context.Context, i int, _ Node) (NodeReply, error) { return fn(ctx, nodes[i]) })
}

// AcquireRW takes a reader's hold (req.Exclusive false) or the writer's
// hold on req.Name, waiting up to req.Wait while it is held in a
// conflicting mode. A hold is granted when a quorum of nodes granted it
// within its validity (rule R2); a failed try releases what it took. Its
// token is made to hold on a quorum of nodes first (rule R3). Every try of
// a waiting writer marks the nodes that refused it (rule R4); a wait that
// ends without the lock releases the lease everywhere, which drops its
// marks.
//
// Errors: *InvalidError (ErrInvalid); ErrNotSupported when a node keeps no
// readers-writer locks; ErrModeHeld when the lease holds in the other
// mode; *TakenError (ErrTaken) when still held after the wait;
// *QuorumError (ErrNoQuorum) when too few nodes answered;
// ErrTooManyWaiters when a wait would make the Redlock's waiters, both
// kinds together, more than Options.MaxWaiters; ErrClosed when the
// Redlock closes during the wait (or before one begins); or an error
// matching ctx.Err().
func (r *Redlock) AcquireRW(ctx context.Context, req RWAcquireRequest) (*RWLease, error) {
	if err := r.checkRWName(req.Name); err != nil {
		return nil, err
	}
	if req.LeaseID != "" {
		if err := checkLease(req.LeaseID); err != nil {
			return nil, err
		}
	}
	if err := r.checkTTL(req.TTL); err != nil {
		return nil, err
	}
	if req.Wait < 0 || req.Wait > r.opt.MaxWait {
		return nil, &InvalidError{Field: "wait_ms", Reason: fmt.Sprintf("must be between 0 and %d", r.opt.MaxWait.Milliseconds())}
	}
	if !ValidOwner(req.Owner) {
		return nil, &InvalidError{Field: "owner", Reason: "must be at most 256 printable characters"}
	}
	nodes, err := r.rwNodes()
	if err != nil {
		return nil, err
	}
	closing := r.guard.ctx.Done() // closed by Close: waits end with ErrClosed
	if req.Wait > 0 && r.guard.ctx.Err() != nil {
		return nil, ErrClosed
	}
	if req.Wait > 0 {
		// Readers-writer waits poll rather than wait in the room, but
		// count against the same bound.
		if n := r.rwWaiting.Add(1); r.waits.room.Waiting()+int(n) > r.opt.MaxWaiters {
			r.rwWaiting.Add(-1)
			return nil, ErrTooManyWaiters
		}
		defer r.rwWaiting.Add(-1)
	}
	if req.LeaseID == "" {
		req.LeaseID = NewLeaseID()
	}
	clock := r.opt.Clock
	deadline := clock.Now().Add(req.Wait)
	// marked: a try may have left wait marks; held: the lease held the
	// lock before (a try re-entered it), so giving up must not release it.
	marked, held := false, false
	for {
		waits := clock.Now().Before(deadline)
		marked = marked || (waits && req.Exclusive)
		lease, reentered, err := r.tryRW(ctx, nodes, req, waits)
		held = held || reentered
		if lease != nil || errors.Is(err, ErrModeHeld) {
			return lease, err
		}
		left := deadline.Sub(clock.Now())
		if left <= 0 || ended(ctx) != nil {
			if marked && !held {
				r.rwGiveUp(nodes, req.Name, req.LeaseID)
			}
			return nil, withCtx(ctx, err)
		}
		pause := min(left, rwRetry/2+rand.N(rwRetry/2))
		fired := make(chan struct{})
		stop := clock.AfterFunc(pause, func() { close(fired) })
		select {
		case <-fired:
		case <-ctx.Done():
			stop()
			if marked && !held {
				r.rwGiveUp(nodes, req.Name, req.LeaseID)
			}
			return nil, withCtx(ctx, err)
		case <-closing:
			stop()
			if marked && !held {
				r.rwGiveUp(nodes, req.Name, req.LeaseID)
			}
			return nil, ErrClosed
		}
	}
}

// tryRW is one round of AcquireRW: acquire on every node, count, fence, or
// undo. held reports that the lease held the lock before the round (some
// node re-entered it): a failed round then releases nothing.
func (r *Redlock) tryRW(ctx context.Context, nodes []RWNode, req RWAcquireRequest, waits bool) (*RWLease, bool, error) {
	_ = r.guard.ready(ctx)
	start := r.opt.Clock.Now()
	na := NodeRWAcquire{Name: req.Name, Lease: req.LeaseID, Owner: req.Owner, TTL: req.TTL,
		Exclusive: req.Exclusive, Waits: waits, Mark: RWMarkTTL}
	results := r.rwFanout(ctx, nodes, func(ctx context.Context, n RWNode) (NodeReply, error) { return n.RWAcquire(ctx, na) })
	t := count(results, StatusGranted, StatusReentered)
	held := slices.ContainsFunc(results, func(res nodeResult) bool { return res.err == nil && res.reply.Status == StatusReentered })
	now := r.opt.Clock.Now()
	validity := r.validity(start, now, req.TTL)
	var err error
	switch {
	case t.mismatch > 0:
		err = ErrModeHeld
	case t.ok >= r.quorum && validity >= MinValidity && ended(ctx) == nil:
		if err = r.rwFence(ctx, nodes, req.Name, req.LeaseID, t.maxToken, results); err == nil {
			return &RWLease{Name: req.Name, Exclusive: req.Exclusive, ID: req.LeaseID, Token: t.maxToken, TTL: req.TTL,
				Validity: validity, Expires: now.Add(validity), Reentered: held, Owner: req.Owner}, held, nil
		}
	case t.ok >= r.quorum && validity < MinValidity:
		err = r.noQuorum(&QuorumError{Op: "acquire", Needed: r.quorum, Answered: t.ok, Causes: append(t.causes, ErrValidityExhausted)})
	case t.ok+t.taken+t.absent < r.quorum:
		err = r.noQuorum(&QuorumError{Op: "acquire", Needed: r.quorum, Answered: t.ok + t.taken + t.absent, Causes: t.causes})
	default:
		err = &TakenError{Resource: req.Name, RetryAfter: t.freeIn(r.quorum), granted: t.ok}
	}
	if !held {
		r.rwUndo(nodes, req.Name, req.LeaseID, results)
	}
	return nil, held, err
}

// rwFence makes sure a quorum of nodes hold a counter ≥ token (step 3 of
// the package doc): nodes that answered token already do; when they are
// fewer than a quorum the others are raised before the answer, and
// otherwise in the background.
func (r *Redlock) rwFence(ctx context.Context, nodes []RWNode, name, lease string, token int64, results []nodeResult) error {
	have := 0
	for _, res := range results {
		if res.err == nil && res.reply.Token == token && (res.reply.Status == StatusGranted ||
			res.reply.Status == StatusReentered || res.reply.Status == StatusOK) {
			have++
		}
	}
	if have >= r.quorum {
		for i, res := range results {
			if (res.err == nil && res.reply.Token < token) || (res.err != nil && !isQuarantined(res.err)) {
				r.spawn(func() {
					r.rwNodeCall(nodes[i], func(ctx context.Context, n RWNode) error { return n.RWRaise(ctx, name, lease, token) })
				})
			}
		}
		return nil
	}
	r.opt.Observer.Fenced()
	raised := r.rwFanout(ctx, nodes, func(ctx context.Context, n RWNode) (NodeReply, error) {
		return NodeReply{Status: StatusOK}, n.RWRaise(ctx, name, lease, token)
	})
	if t := count(raised, StatusOK); t.ok < r.quorum {
		return r.noQuorum(&QuorumError{Op: "fence", Needed: r.quorum, Answered: t.ok, Causes: t.causes})
	}
	return nil
}

// rwNodeCall makes one background call to n, bounded by NodeTimeout.
func (r *Redlock) rwNodeCall(n RWNode, fn func(ctx context.Context, n RWNode) error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.opt.NodeTimeout)
	defer cancel()
	_ = fn(ctx, n)
}

// rwUndo releases, in the background, the copies a failed round may have
// granted: on the nodes that granted it and those whose answer was lost.
func (r *Redlock) rwUndo(nodes []RWNode, name, lease string, results []nodeResult) {
	for i, res := range results {
		if (res.err == nil && res.reply.Status == StatusGranted) || (res.err != nil && !isQuarantined(res.err)) {
			r.spawn(func() {
				r.rwNodeCall(nodes[i], func(ctx context.Context, n RWNode) error { _, err := n.RWRelease(ctx, name, lease); return err })
			})
		}
	}
}

// rwGiveUp releases lease on every node in the background, dropping a
// waiting writer's marks when its wait ended without the lock.
func (r *Redlock) rwGiveUp(nodes []RWNode, name, lease string) {
	for _, n := range nodes {
		r.spawn(func() {
			r.rwNodeCall(n, func(ctx context.Context, n RWNode) error { _, err := n.RWRelease(ctx, name, lease); return err })
		})
	}
}

// ExtendRW resets the TTL of the lease's hold on req.Name: it holds when a
// quorum of nodes extended it within the new validity, and answers the
// highest token they keep for it, fenced as an acquisition's.
//
// Errors: *InvalidError; ErrNotSupported; ErrNotHeld when the lease no
// longer holds on a quorum; *QuorumError; or an error matching ctx.Err().
func (r *Redlock) ExtendRW(ctx context.Context, req RWExtendRequest) (*RWLease, error) {
	if err := r.checkRWName(req.Name); err != nil {
		return nil, err
	}
	if err := checkLease(req.LeaseID); err != nil {
		return nil, err
	}
	if req.TTL != 0 {
		if err := r.checkTTL(req.TTL); err != nil {
			return nil, err
		}
	}
	nodes, err := r.rwNodes()
	if err != nil {
		return nil, err
	}
	_ = r.guard.ready(ctx)
	start := r.opt.Clock.Now()
	results := r.rwFanout(ctx, nodes, func(ctx context.Context, n RWNode) (NodeReply, error) {
		return n.RWExtend(ctx, req.Name, req.LeaseID, req.TTL)
	})
	t := count(results, StatusOK)
	var ttl time.Duration
	for _, res := range results {
		if res.err == nil && res.reply.Status == StatusOK {
			ttl = max(ttl, res.reply.TTL)
		}
	}
	now := r.opt.Clock.Now()
	validity := r.validity(start, now, ttl)
	switch {
	case t.ok >= r.quorum && validity >= MinValidity:
		if err := r.rwFence(ctx, nodes, req.Name, req.LeaseID, t.maxToken, results); err != nil {
			return nil, withCtx(ctx, err)
		}
		return &RWLease{Name: req.Name, ID: req.LeaseID, Token: t.maxToken, TTL: ttl, Validity: validity, Expires: now.Add(validity)}, nil
	case t.ok >= r.quorum:
		return nil, r.noQuorum(&QuorumError{Op: "extend", Needed: r.quorum, Answered: t.ok, Causes: append(t.causes, ErrValidityExhausted)})
	case t.ok+t.taken+t.absent >= r.quorum:
		return nil, ErrNotHeld
	default:
		return nil, withCtx(ctx, r.noQuorum(&QuorumError{Op: "extend", Needed: r.quorum, Answered: t.ok + t.taken + t.absent, Causes: t.causes}))
	}
}

// ReleaseRW releases the lease's hold on req.Name on every node (and its
// waiting writer's marks).
//
// Errors: *InvalidError; ErrNotSupported; ErrNotHeld when no node that
// answered held it; *QuorumError when fewer than a quorum answered; or an
// error matching ctx.Err().
func (r *Redlock) ReleaseRW(ctx context.Context, req RWReleaseRequest) error {
	if err := r.checkRWName(req.Name); err != nil {
		return err
	}
	if err := checkLease(req.LeaseID); err != nil {
		return err
	}
	nodes, err := r.rwNodes()
	if err != nil {
		return err
	}
	results := r.rwFanout(ctx, nodes, func(ctx context.Context, n RWNode) (NodeReply, error) {
		return n.RWRelease(ctx, req.Name, req.LeaseID)
	})
	t := count(results, StatusOK)
	switch {
	case t.ok+t.absent < r.quorum && t.ok == 0:
		return withCtx(ctx, r.noQuorum(&QuorumError{Op: "release", Needed: r.quorum, Answered: t.ok + t.absent, Causes: t.causes}))
	case t.ok == 0:
		return ErrNotHeld
	}
	return nil
}

// InspectRW reads who holds req.Name: the holds that a quorum of nodes
// keep, each with the highest token its copies carry and the validity
// left on the quorum-th node to expire it (less the drift allowance).
//
// Errors: *InvalidError; ErrNotSupported; *QuorumError when fewer than a
// quorum answered; or an error matching ctx.Err().
func (r *Redlock) InspectRW(ctx context.Context, name string) (*RWInfo, error) {
	if err := r.checkRWName(name); err != nil {
		return nil, err
	}
	nodes, err := r.rwNodes()
	if err != nil {
		return nil, err
	}
	views := make([]NodeRW, len(nodes)) // each written by its node's call only
	results := r.fanout(ctx, func(ctx context.Context, i int, _ Node) (NodeReply, error) {
		v, err := nodes[i].RWInspect(ctx, name)
		views[i] = v
		return NodeReply{Status: StatusOK}, err
	})
	type copies struct {
		h      NodeRWHold
		remain []time.Duration
	}
	byHold := map[string]*copies{}
	t := count(results, StatusOK)
	if t.ok < r.quorum {
		return nil, withCtx(ctx, r.noQuorum(&QuorumError{Op: "inspect", Needed: r.quorum, Answered: t.ok, Causes: t.causes}))
	}
	marked := 0
	for i, res := range results {
		if res.err != nil {
			continue
		}
		if views[i].Waiting {
			marked++
		}
		for _, h := range views[i].Holds {
			key := RWHoldResource(name, h.Exclusive, h.Lease)
			c := byHold[key]
			if c == nil {
				c = &copies{h: h}
				byHold[key] = c
			}
			c.h.Token = max(c.h.Token, h.Token)
			c.remain = append(c.remain, h.Remaining)
		}
	}
	now := r.opt.Clock.Now()
	info := &RWInfo{Name: name, WriterWaiting: marked > len(nodes)-r.quorum}
	for _, c := range byHold {
		if len(c.remain) < r.quorum {
			continue
		}
		slices.SortFunc(c.remain, func(a, b time.Duration) int { return int(b - a) })
		rem := c.remain[r.quorum-1] - r.drift(c.h.TTL)
		if rem <= 0 {
			continue
		}
		info.Holders = append(info.Holders, RWHolder{Exclusive: c.h.Exclusive, Token: c.h.Token, Owner: c.h.Owner,
			TTL: c.h.TTL, Remaining: rem, Expires: now.Add(rem)})
	}
	slices.SortFunc(info.Holders, func(a, b RWHolder) int { return int(a.Token - b.Token) })
	return info, nil
}
