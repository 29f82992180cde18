package lockcore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Lock sets: see the package doc, "Lock sets", for the rules (S1 to S8)
// these methods follow and why they are safe.

// MaxSetMembers bounds the members of a lock set.
const MaxSetMembers = 64

// SetSep joins the members of a lock set into its name ("a,b,c", see
// SetName). It lies outside the resource alphabet, so a set's name is
// never a resource's, and splitting a name at it gives its members back.
const SetSep = ','

// SetAcquireRequest asks for every member of a lock set, all or none.
type SetAcquireRequest struct {
	// Resources are the members, in any order (they are taken in the
	// canonical order, see SetMembers): 1 to MaxSetMembers resource names,
	// none twice.
	Resources []string
	// LeaseID is the caller's secret for the whole set: every member is
	// held by it. Empty: one is minted. A lease that already holds every
	// member gets the set back with each member's TTL reset and its token
	// unchanged (SetLease.Reentered).
	LeaseID string
	TTL     time.Duration
	// Wait is how long to wait, in all, for members held by other leases;
	// 0 fails at once with a *SetError wrapping the member's *TakenError.
	Wait  time.Duration
	Owner string
}

// SetLease is a held lock set: one lease id, one TTL and one validity for
// the set, and a fencing token per member.
type SetLease struct {
	ID string // the lease id: a secret, never log it
	// Members are the held members in the canonical order, each a Lease
	// with its own fencing token (step 1 to 4 of the package doc, per
	// member).
	Members []Lease
	TTL     time.Duration
	// Validity is how long every member is known to be held from the
	// moment the answer was produced: the least of the members'
	// validities, each counted as a Lease's. At least MinValidity.
	Validity time.Duration
	// Expires is Now()+Validity on the Redlock's clock.
	Expires time.Time
	// Reentered is true when the lease already held every member (an
	// idempotent retry).
	Reentered bool
	Owner     string
}

// SetExtendRequest extends every member of a held set.
type SetExtendRequest struct {
	Resources []string
	LeaseID   string
	TTL       time.Duration // 0: the TTL each member was last set with
}

// SetReleaseRequest releases every member of a set.
type SetReleaseRequest struct {
	Resources []string
	LeaseID   string
}

// SetMemberInfo is who holds one member of a set: Lock is nil when no
// lease holds it on a quorum of nodes.
type SetMemberInfo struct {
	Resource string
	Lock     *LockInfo
}

// SetError reports the member of a lock set an operation failed on, and
// why: Err is the member's error (a *TakenError, ErrNotHeld, a
// *QuorumError, ...). It matches whatever Err matches.
type SetError struct {
	Resource string
	Err      error
}

func (e *SetError) Error() string {
	return fmt.Sprintf("lockcore: lock set member %q: %v", e.Resource, e.Err)
}

// Unwrap returns the member's error.
func (e *SetError) Unwrap() error { return e.Err }

// SetMembers returns resources in the canonical order of lock sets (by
// name, byte by byte), after checking them: 1 to MaxSetMembers valid
// resource names (ValidResource), none twice. Every set operation uses
// this order (rule S2).
//
// Errors: *InvalidError with Field "resources".
func SetMembers(resources []string) ([]string, error) {
	bad := func(reason string) error { return &InvalidError{Field: "resources", Reason: reason} }
	if len(resources) == 0 || len(resources) > MaxSetMembers {
		return nil, bad(fmt.Sprintf("a lock set has 1 to %d members, not %d", MaxSetMembers, len(resources)))
	}
	out := slices.Clone(resources)
	slices.Sort(out)
	for i, m := range out {
		if !ValidResource(m) {
			return nil, bad(fmt.Sprintf("member %q: must be 1 to 200 characters of A-Z a-z 0-9 . _ - :", m))
		}
		if i > 0 && out[i-1] == m {
			return nil, bad(fmt.Sprintf("member %q is named twice", m))
		}
	}
	return out, nil
}

// SetName returns the name of the set of members, already in the
// canonical order: the members joined by SetSep.
func SetName(members []string) string { return strings.Join(members, string(SetSep)) }

// SplitSetName returns the members a set's name lists, in its order (see
// SetName); SetMembers checks them.
func SplitSetName(name string) []string { return strings.Split(name, string(SetSep)) }

// AcquireSet takes every member of req.Resources for one lease, all or
// none, waiting up to req.Wait in all while members are held by others.
// The members are taken one by one in the canonical order (rule S2), each
// by Acquire's Redlock round under the set's lease id, with a fencing
// token of its own; a waiting member waits in that member's queue, as a
// waiting Acquire does (rule S4). While a set waits for a later member,
// the members it holds are extended every TTL/3 (rule S5). When a member
// cannot be had, every member this request took is released before the
// answer (rule S3): a refused set leaves nothing held. When the last
// member is granted, the members taken well before it are extended, and
// the set's validity is the least of its members' (rule S6).
//
// Errors: *InvalidError (ErrInvalid); a *SetError naming the member that
// could not be had, wrapping its error: a *TakenError (ErrTaken) when
// another lease holds it after the wait, or held one the set had that
// lapsed while it waited, *QuorumError (ErrNoQuorum), ErrTooManyWaiters,
// ErrClosed; or an error matching ctx.Err().
func (r *Redlock) AcquireSet(ctx context.Context, req SetAcquireRequest) (*SetLease, error) {
	members, err := SetMembers(req.Resources)
	if err != nil {
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
	minted := req.LeaseID == ""
	if minted {
		req.LeaseID = NewLeaseID()
	}
	return r.acquireSet(ctx, members, req, minted)
}

// acquireSet takes members in the order given (AcquireSet gives the
// canonical one): see AcquireSet.
func (r *Redlock) acquireSet(ctx context.Context, members []string, req SetAcquireRequest, minted bool) (*SetLease, error) {
	clock := r.opt.Clock
	deadline := clock.Now().Add(req.Wait)
	var k *setKeeper
	mctx := ctx
	if req.Wait > 0 && len(members) > 1 {
		k = r.keepSet(ctx, req.TTL)
		mctx = k.ctx
	}
	held := make([]*Lease, 0, len(members))
	for _, m := range members {
		var wait time.Duration
		if req.Wait > 0 {
			wait = max(0, deadline.Sub(clock.Now()))
		}
		l, err := r.acquire(mctx, AcquireRequest{Resource: m, LeaseID: req.LeaseID, TTL: req.TTL, Wait: wait, Owner: req.Owner}, minted)
		if err != nil {
			var serr error = &SetError{Resource: m, Err: err}
			if lost := k.stop(); lost != nil && ctx.Err() == nil {
				serr = lost // the wait was ended because a held member lapsed
			}
			r.undoSet(held)
			return nil, withCtx(ctx, serr)
		}
		held = append(held, l)
		k.add(l)
	}
	if lost := k.stop(); lost != nil {
		r.undoSet(held)
		return nil, lost
	}
	return r.finishSet(ctx, req, held)
}

// finishSet answers a set whose members are all held: the members whose
// validity ends more than a tenth of the TTL before the last member's (a
// wait, or a slow round, came between) are extended first, and the set's
// validity is the least of its members' (rule S6). A failed extend, or a
// validity below MinValidity, undoes the set.
func (r *Redlock) finishSet(ctx context.Context, req SetAcquireRequest, held []*Lease) (*SetLease, error) {
	last := held[len(held)-1]
	errs := make([]error, len(held))
	var wg sync.WaitGroup
	for i, l := range held[:len(held)-1] {
		if last.Expires.Sub(l.Expires) <= req.TTL/10 {
			continue
		}
		wg.Go(func() {
			e, err := r.Extend(ctx, ExtendRequest{Resource: l.Resource, LeaseID: l.ID, TTL: req.TTL})
			if err != nil {
				errs[i] = err
				return
			}
			l.Validity, l.Expires = e.Validity, e.Expires
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			r.undoSet(held)
			return nil, withCtx(ctx, &SetError{Resource: held[i].Resource, Err: err})
		}
	}
	set := &SetLease{ID: req.LeaseID, TTL: req.TTL, Owner: req.Owner, Reentered: true, Members: make([]Lease, len(held))}
	first := 0
	for i, l := range held {
		set.Members[i] = *l
		set.Reentered = set.Reentered && l.Reentered
		if l.Expires.Before(held[first].Expires) {
			first = i
		}
	}
	now := r.opt.Clock.Now()
	set.Expires = held[first].Expires
	set.Validity = set.Expires.Sub(now)
	if set.Validity < MinValidity {
		r.undoSet(held)
		return nil, &SetError{Resource: held[first].Resource, Err: r.noQuorum(&QuorumError{Op: "acquire", Needed: r.quorum,
			Answered: r.quorum, Causes: []error{ErrValidityExhausted}})}
	}
	if err := ended(ctx); err != nil {
		r.undoSet(held)
		return nil, err
	}
	return set, nil
}

// undoSet releases the members a set request took (rule S3), all at once,
// and returns when each release has been answered. A member the lease
// held before the request (it re-entered) is left as it was, as Acquire
// leaves it: the caller may count on its earlier answer. For a minted
// lease id, a member whose release a node did not answer is released
// again in the background (see releaseAbandoned); otherwise it expires
// with its TTL.
func (r *Redlock) undoSet(held []*Lease) {
	var wg sync.WaitGroup
	for _, l := range held {
		if !l.Reentered {
			wg.Go(func() { r.releaseAbandoned(l) })
		}
	}
	wg.Wait()
}

// setKeeper extends the members a waiting set holds while it waits for
// the next (rule S5), every TTL/3. When a held member's validity runs out
// before an extend succeeds, it ends the set's wait (ctx) and records why.
type setKeeper struct {
	r      *Redlock
	ttl    time.Duration
	ctx    context.Context
	cancel context.CancelFunc
	quit   chan struct{}
	done   chan struct{}
	once   sync.Once

	mu   sync.Mutex
	held []*Lease
	lost error // a *SetError: the member that lapsed
}

func (r *Redlock) keepSet(ctx context.Context, ttl time.Duration) *setKeeper {
	kctx, cancel := context.WithCancel(ctx)
	k := &setKeeper{r: r, ttl: ttl, ctx: kctx, cancel: cancel, quit: make(chan struct{}), done: make(chan struct{})}
	go k.run()
	return k
}

// add hands the keeper a member just taken.
func (k *setKeeper) add(l *Lease) {
	if k == nil {
		return
	}
	k.mu.Lock()
	k.held = append(k.held, l)
	k.mu.Unlock()
}

// stop ends the keeper and returns once it has ended: nil, or the
// *SetError of a member that lapsed. The keeper's leases are the caller's
// again. A nil keeper returns nil.
func (k *setKeeper) stop() error {
	if k == nil {
		return nil
	}
	k.once.Do(func() { close(k.quit) })
	<-k.done
	k.cancel()
	return k.lost
}

func (k *setKeeper) run() {
	defer close(k.done)
	for {
		fired := make(chan struct{})
		stop := k.r.opt.Clock.AfterFunc(k.ttl/3, func() { close(fired) })
		select {
		case <-k.quit:
			stop()
			return
		case <-fired:
		}
		if !k.extend() {
			return
		}
	}
}

// extend extends every held member once; false when one lapsed (the wait
// is then ended).
func (k *setKeeper) extend() bool {
	k.mu.Lock()
	held := slices.Clone(k.held)
	k.mu.Unlock()
	errs := make([]error, len(held))
	var wg sync.WaitGroup
	for i, l := range held {
		wg.Go(func() {
			e, err := k.r.Extend(k.ctx, ExtendRequest{Resource: l.Resource, LeaseID: l.ID, TTL: k.ttl})
			if err != nil {
				errs[i] = err
				return
			}
			k.mu.Lock()
			l.Validity, l.Expires = e.Validity, e.Expires
			k.mu.Unlock()
		})
	}
	wg.Wait()
	now := k.r.opt.Clock.Now()
	for i, l := range held {
		k.mu.Lock()
		lapsed := errs[i] != nil && !now.Before(l.Expires)
		k.mu.Unlock()
		// A member another lease holds, or nobody, is lost for good.
		gone := errors.Is(errs[i], ErrNotHeld) || errors.Is(errs[i], ErrHeldByOther)
		if (lapsed || gone) && k.ctx.Err() == nil {
			k.lost = &SetError{Resource: l.Resource, Err: &TakenError{Resource: l.Resource}}
			k.cancel()
			return false
		}
	}
	return true
}

// ExtendSet resets the TTL of every member the lease holds, all at once:
// the set holds when every member was extended, and its validity is the
// least of theirs. When a member is no longer held by the lease (expired,
// or another lease's), the set is lost: the members still held are
// released (rule S7), so a lost set is not left held in part.
//
// Errors: *InvalidError; a *SetError naming a member, wrapping ErrNotHeld
// (or *HeldByOtherError) when the set was lost, or its *QuorumError (the
// set may still be held: extending again is safe); or an error matching
// ctx.Err().
func (r *Redlock) ExtendSet(ctx context.Context, req SetExtendRequest) (*SetLease, error) {
	members, err := SetMembers(req.Resources)
	if err != nil {
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
	leases := make([]*Lease, len(members))
	errs := r.eachMember(members, func(i int, m string) error {
		var err error
		leases[i], err = r.Extend(ctx, ExtendRequest{Resource: m, LeaseID: req.LeaseID, TTL: req.TTL})
		return err
	})
	if i := slices.IndexFunc(errs, lostMember); i >= 0 {
		r.eachMember(members, func(j int, m string) error {
			if errs[j] == nil {
				_ = r.Release(context.WithoutCancel(ctx), ReleaseRequest{Resource: m, LeaseID: req.LeaseID})
			}
			return nil
		})
		return nil, &SetError{Resource: members[i], Err: errs[i]}
	}
	for i, err := range errs {
		if err != nil {
			return nil, withCtx(ctx, &SetError{Resource: members[i], Err: err})
		}
	}
	set := &SetLease{ID: req.LeaseID, Members: make([]Lease, len(members)), TTL: leases[0].TTL, Expires: leases[0].Expires}
	for i, l := range leases {
		set.Members[i] = *l
		set.TTL = min(set.TTL, l.TTL)
		if l.Expires.Before(set.Expires) {
			set.Expires = l.Expires
		}
	}
	set.Validity = set.Expires.Sub(r.opt.Clock.Now())
	if set.Validity < MinValidity {
		return nil, &SetError{Resource: members[0], Err: r.noQuorum(&QuorumError{Op: "extend", Needed: r.quorum,
			Answered: r.quorum, Causes: []error{ErrValidityExhausted}})}
	}
	return set, nil
}

// lostMember reports whether a member's extend found the lease no longer
// holding it.
func lostMember(err error) bool { return errors.Is(err, ErrNotHeld) || errors.Is(err, ErrHeldByOther) }

// eachMember calls fn for every member at once and returns their errors,
// by member.
func (r *Redlock) eachMember(members []string, fn func(i int, m string) error) []error {
	errs := make([]error, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Go(func() { errs[i] = fn(i, m) })
	}
	wg.Wait()
	return errs
}

// ReleaseSet releases every member the lease holds, all at once (each a
// Release: a member a waiter of this replica waits for is handed to it).
//
// Errors: *InvalidError; ErrNotHeld when the lease held no member; a
// *SetError naming a member whose release failed otherwise (a
// *QuorumError: releasing again is safe); or an error matching ctx.Err().
func (r *Redlock) ReleaseSet(ctx context.Context, req SetReleaseRequest) error {
	members, err := SetMembers(req.Resources)
	if err != nil {
		return err
	}
	if err := checkLease(req.LeaseID); err != nil {
		return err
	}
	errs := r.eachMember(members, func(_ int, m string) error {
		return r.Release(ctx, ReleaseRequest{Resource: m, LeaseID: req.LeaseID})
	})
	notHeld := 0
	for i, err := range errs {
		switch {
		case err == nil:
		case lostMember(err):
			notHeld++
		default:
			return withCtx(ctx, &SetError{Resource: members[i], Err: err})
		}
	}
	if notHeld == len(members) {
		return ErrNotHeld
	}
	return nil
}

// InspectSet reports who holds each member of a set, in the canonical
// order, as Inspect does (never a lease id). It reads them in one round
// when the nodes can (see InspectMany), else one Inspect per member.
//
// Errors: *InvalidError; a *QuorumError (ErrNoQuorum), within a *SetError
// when it names a member; or an error matching ctx.Err().
func (r *Redlock) InspectSet(ctx context.Context, resources []string) ([]SetMemberInfo, error) {
	members, err := SetMembers(resources)
	if err != nil {
		return nil, err
	}
	out := make([]SetMemberInfo, len(members))
	infos, err := r.InspectMany(ctx, members)
	switch {
	case err == nil:
		for i, m := range members {
			out[i] = SetMemberInfo{Resource: m, Lock: infos[i]}
		}
		return out, nil
	case !errors.Is(err, ErrNotSupported):
		return nil, err
	}
	errs := r.eachMember(members, func(i int, m string) error {
		info, err := r.Inspect(ctx, m)
		out[i] = SetMemberInfo{Resource: m, Lock: info}
		if errors.Is(err, ErrNotHeld) {
			return nil
		}
		return err
	})
	for i, err := range errs {
		if err != nil {
			return nil, withCtx(ctx, &SetError{Resource: members[i], Err: err})
		}
	}
	return out, nil
}
