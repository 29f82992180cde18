// Package semaphore shares a named resource among up to K holders, each
// with a permit of its own: a lease, a TTL, extend, release and a fencing
// token.
//
// A semaphore of K permits is K locks, permit i being the Redlock mutex on
// lockcore.PermitResource(name, i), a name outside the resource alphabet
// that no lock can have. A permit is any one of those K locks that is free.
// Since each permit is a mutex of its own, at most one lease holds permit i
// (the quorum argument of package lockcore, unchanged), so at most K leases
// hold permits, and each permit's fencing tokens grow as a lock's do. The
// package is a layer over the lock service's public operations; see the
// section "Semaphores" of package lockcore's documentation for why a
// counter on each node would not be safe.
//
// K is part of the contract and is recorded with every permit: the lock's
// owner label is "K owner". While no permit is held the semaphore does not
// exist, and the next acquisition sets K anew. An acquisition reads every
// permit, 0 to lockcore.MaxPermits-1 (whatever its K: a holder of a larger
// K may hold a permit beyond it), before it takes one and again after: a
// holder that records another K makes it fail with *MismatchError,
// releasing any permit it took. So an acquisition with K fails while a
// permit with another K is held from before its first read to the end of
// that read, and two acquisitions with different K that overlap cannot
// both keep their permits: of the two grants, the one that completed
// later is followed by a read that sees the earlier one (each read of a
// permit asks every node, and one that completed is held by a majority).
// Both the reads and that argument rely on Inspect seeing a lock a
// majority holds, which it does when the nodes holding it answer; a node
// of that majority that does not answer the read (a timeout) can hide it,
// and then two K can be held at once, the holders being bounded by the
// larger K, never more. The next acquisition with either K whose reads
// are answered sees the disagreement.
package semaphore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockgate/lockgate/lockcore"
)

// Locker is what a Semaphores needs of the lock service (*lockcore.Redlock).
type Locker interface {
	Acquire(ctx context.Context, req lockcore.AcquireRequest) (*lockcore.Lease, error)
	Extend(ctx context.Context, req lockcore.ExtendRequest) (*lockcore.Lease, error)
	Release(ctx context.Context, req lockcore.ReleaseRequest) error
	Inspect(ctx context.Context, resource string) (*lockcore.LockInfo, error)
}

// limiter is implemented by a Locker that states the TTL and wait bounds
// its Acquire enforces (*lockcore.Redlock): Acquire then refuses a request
// outside them before any permit is read.
type limiter interface {
	Limits() (minTTL, maxTTL, maxWait time.Duration)
}

// MaxOwner is the longest owner label of a permit, in characters: the
// permit lock's owner also carries K (see the package doc).
const MaxOwner = 240

// Sentinel errors, matched with errors.Is.
var (
	// ErrMismatch means a holder of a permit records another number of
	// permits than the request's. Returned errors are *MismatchError.
	ErrMismatch = errors.New("semaphore: held with another number of permits")
	// ErrFull means every permit is held. Returned errors are *FullError.
	ErrFull = errors.New("semaphore: every permit is held")
)

// MismatchError reports a holder whose permit records Held permits where
// the request asked for Asked.
type MismatchError struct {
	Name         string
	Asked, Held  int
	HolderPermit int
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("semaphore: %q is held with %d permits, not %d", e.Name, e.Held, e.Asked)
}

// Is makes a *MismatchError match ErrMismatch.
func (e *MismatchError) Is(target error) bool { return target == ErrMismatch }

// FullError reports that all Permits permits of Name are held.
type FullError struct {
	Name    string
	Permits int
	// RetryAfter is the shortest remaining TTL the holders reported: a
	// permit frees itself by then unless it is extended.
	RetryAfter time.Duration
}

func (e *FullError) Error() string {
	return fmt.Sprintf("semaphore: all %d permits of %q are held (one expires in %v)", e.Permits, e.Name, e.RetryAfter)
}

// Is makes a *FullError match ErrFull.
func (e *FullError) Is(target error) bool { return target == ErrFull }

// AcquireRequest asks for a permit.
type AcquireRequest struct {
	Name    string
	Permits int // K, 1 to lockcore.MaxPermits
	TTL     time.Duration
	// Wait is how long to wait for a permit while all are held; 0 fails at
	// once with *FullError.
	Wait  time.Duration
	Owner string // at most MaxOwner characters, shown by Inspect
	// LeaseID is the caller's secret for the permit's lease; empty: one is
	// minted. A request with a lease id that already holds a permit of
	// Name gets that permit back, its TTL reset and its token unchanged
	// (Permit.Reentered), so that a request whose answer was lost can be
	// sent again without taking a second permit.
	LeaseID string
}

// Permit is a held permit.
type Permit struct {
	Name    string
	Index   int // which permit, 0 to Permits-1
	Permits int // K; 0 when not known (an extension)
	ID      string
	Token   int64
	TTL     time.Duration
	// Validity and Expires as for lockcore.Lease.
	Validity time.Duration
	Expires  time.Time
	Owner    string
	// Reentered is true when the lease already held this permit (a retry
	// with AcquireRequest.LeaseID) and false for a new grant.
	Reentered bool
}

// Holder is one held permit, without its lease id.
type Holder struct {
	Index int
	// Permits is the K the holder's acquisition asked for.
	Permits   int
	Token     int64
	Owner     string
	TTL       time.Duration
	Remaining time.Duration
	Expires   time.Time
}

// State is who holds a semaphore's permits.
type State struct {
	Name string
	// Permits is the largest K a holder records: the bound on the
	// holders. Holders of different K are all listed (see the package doc
	// for when they can coexist).
	Permits int
	Holders []Holder // every held permit, by Index
}

// Semaphores grants permits through a Locker, and counts the permits
// granted through it that are still held (InUse). Safe for concurrent use.
type Semaphores struct {
	locker Locker
	now    func() time.Time

	mu    sync.Mutex
	inUse map[string]tracked // by permit lock name
	// pruneAt is the size of inUse at which track drops the expired
	// entries, so that permits left to expire do not grow it without
	// bound when InUse is never called.
	pruneAt int
}

// tracked is a permit granted or extended through a Semaphores.
type tracked struct {
	lease   string
	expires time.Time
}

// New returns Semaphores over locker.
func New(locker Locker) *Semaphores {
	return &Semaphores{locker: locker, now: time.Now, inUse: map[string]tracked{}, pruneAt: minPrune}
}

func invalid(field, reason string) error {
	return &lockcore.InvalidError{Field: field, Reason: reason}
}

func checkPermits(k int) error {
	if k < 1 || k > lockcore.MaxPermits {
		return invalid("permits", "must be between 1 and "+strconv.Itoa(lockcore.MaxPermits))
	}
	return nil
}

func checkName(name string) error {
	if !lockcore.ValidResource(name) {
		return invalid("name", "must be 1 to 200 characters of A-Z a-z 0-9 . _ - :")
	}
	return nil
}

func checkIndex(i int) error {
	if i < 0 || i >= lockcore.MaxPermits {
		return invalid("permit", "must be between 0 and "+strconv.Itoa(lockcore.MaxPermits-1))
	}
	return nil
}

// ownerLabel is the permit lock's owner: K, a space, the caller's owner.
func ownerLabel(k int, owner string) string { return strconv.Itoa(k) + " " + owner }

// parseOwner splits a permit lock's owner label; k is 0 when the label is
// not one ownerLabel makes.
func parseOwner(label string) (k int, owner string) {
	num, owner, ok := strings.Cut(label, " ")
	k, err := strconv.Atoi(num)
	if !ok || err != nil || k < 1 || k > lockcore.MaxPermits {
		return 0, label
	}
	return k, owner
}

// Acquire takes a free permit of req.Name, waiting up to req.Wait for one
// when all are held. Acquisitions on one replica wait in its waiting room
// for every permit at once (K waiters), in arrival order per permit, and a
// permit released on this replica is handed to its first waiter. A
// request whose LeaseID holds a permit of req.Name gets it back
// (Permit.Reentered) instead of a second one.
//
// Errors: *lockcore.InvalidError (before any permit is read);
// *MismatchError (ErrMismatch); *FullError (ErrFull); or any error of the
// Locker's Acquire, Extend and Inspect (*lockcore.QuorumError,
// lockcore.ErrTooManyWaiters, lockcore.ErrClosed, an error matching
// ctx.Err()).
func (s *Semaphores) Acquire(ctx context.Context, req AcquireRequest) (*Permit, error) {
	if err := s.checkAcquire(req); err != nil {
		return nil, err
	}
	view, err := s.read(ctx, req.Name)
	if err != nil {
		return nil, err
	}
	if err := view.conflict(req.Name, req.Permits, -1); err != nil {
		return nil, err
	}
	if req.LeaseID != "" {
		if p, err := s.reenter(ctx, req, view); p != nil || err != nil {
			return p, err
		}
	}
	i, lease, err := s.grant(ctx, req, view)
	if err != nil {
		return nil, err
	}
	if err := s.recheck(ctx, req, i, lease); err != nil {
		return nil, err
	}
	s.track(lease)
	return s.permit(req, i, lease), nil
}

// grant takes a permit that view saw free or, with req.Wait, the first
// permit freed; *FullError when none is granted.
func (s *Semaphores) grant(ctx context.Context, req AcquireRequest, view view) (int, *lockcore.Lease, error) {
	lr := lockcore.AcquireRequest{TTL: req.TTL, Owner: ownerLabel(req.Permits, req.Owner), LeaseID: req.LeaseID}
	i, lease, err := s.tryFree(ctx, req, lr, view)
	if err != nil || lease != nil {
		return i, lease, err
	}
	if req.Wait > 0 {
		i, lease, err = s.waitAny(ctx, req, lr)
		if err != nil || lease != nil {
			return i, lease, err
		}
		// The wait ran out: the holders' remaining TTLs are those of
		// now, not of the first read.
		if view, err = s.read(ctx, req.Name); err != nil {
			return 0, nil, err
		}
	}
	return 0, nil, &FullError{Name: req.Name, Permits: req.Permits, RetryAfter: view.soonest(req.Permits)}
}

func (s *Semaphores) permit(req AcquireRequest, i int, lease *lockcore.Lease) *Permit {
	return &Permit{Name: req.Name, Index: i, Permits: req.Permits, ID: lease.ID, Token: lease.Token,
		TTL: lease.TTL, Validity: lease.Validity, Expires: lease.Expires, Owner: req.Owner, Reentered: lease.Reentered}
}

// checkAcquire refuses a request that Acquire would refuse, before any
// read: a request's validity does not depend on the semaphore's state.
func (s *Semaphores) checkAcquire(req AcquireRequest) error {
	if err := checkName(req.Name); err != nil {
		return err
	}
	if err := checkPermits(req.Permits); err != nil {
		return err
	}
	if !lockcore.ValidOwner(req.Owner) || len([]rune(req.Owner)) > MaxOwner {
		return invalid("owner", "must be at most "+strconv.Itoa(MaxOwner)+" printable characters")
	}
	if req.LeaseID != "" && !lockcore.ValidLeaseID(req.LeaseID) {
		return invalid("lease_id", "must be 16 to 128 characters of A-Z a-z 0-9 - _")
	}
	l, ok := s.locker.(limiter)
	if !ok {
		return nil
	}
	minTTL, maxTTL, maxWait := l.Limits()
	if req.TTL < minTTL || req.TTL > maxTTL {
		return invalid("ttl_ms", fmt.Sprintf("must be between %d and %d", minTTL.Milliseconds(), maxTTL.Milliseconds()))
	}
	if req.Wait < 0 || req.Wait > maxWait {
		return invalid("wait_ms", fmt.Sprintf("must be between 0 and %d", maxWait.Milliseconds()))
	}
	return nil
}

// reenter looks for the permit of req.Name that req.LeaseID holds among
// those view saw held with req.Permits, by extending each with that lease
// (an extension by another lease changes nothing). It returns nil, nil
// when the lease holds none.
func (s *Semaphores) reenter(ctx context.Context, req AcquireRequest, v view) (*Permit, error) {
	found := make([]*lockcore.Lease, len(v.held))
	errs := make([]error, len(v.held))
	s.each(len(v.held), func(i int) {
		if v.held[i] == nil {
			return
		}
		lease, err := s.locker.Extend(ctx, lockcore.ExtendRequest{Resource: lockcore.PermitResource(req.Name, i), LeaseID: req.LeaseID, TTL: req.TTL})
		switch {
		case err == nil:
			found[i] = lease
		case !errors.Is(err, lockcore.ErrNotHeld) && !errors.Is(err, lockcore.ErrHeldByOther):
			errs[i] = err
		}
	})
	for i, lease := range found {
		if lease != nil {
			lease.Reentered = true
			s.track(lease)
			return s.permit(req, i, lease), nil
		}
	}
	return nil, errors.Join(errs...)
}

// tryFree tries, without waiting, the permits view saw free, lowest first.
// It returns a nil lease when every one was taken meanwhile.
func (s *Semaphores) tryFree(ctx context.Context, req AcquireRequest, lr lockcore.AcquireRequest, v view) (int, *lockcore.Lease, error) {
	for i := range req.Permits {
		if v.held[i] != nil {
			continue
		}
		lr.Resource = lockcore.PermitResource(req.Name, i)
		lease, err := s.locker.Acquire(ctx, lr)
		if err == nil {
			return i, lease, nil
		}
		if !errors.Is(err, lockcore.ErrTaken) {
			return 0, nil, err
		}
	}
	return 0, nil, nil
}

// waitAny waits for every permit at once and keeps the first granted; a
// permit granted to one of the other waits is released again. If one wait
// finds the waiting room full, the others end at once and, unless one was
// granted meanwhile, ErrTooManyWaiters is returned.
func (s *Semaphores) waitAny(ctx context.Context, req AcquireRequest, lr lockcore.AcquireRequest) (int, *lockcore.Lease, error) {
	type result struct {
		i     int
		lease *lockcore.Lease
		err   error
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan result, req.Permits)
	lr.Wait = req.Wait
	for i := range req.Permits {
		r := lr
		r.Resource = lockcore.PermitResource(req.Name, i)
		go func() {
			lease, err := s.locker.Acquire(wctx, r)
			results <- result{i, lease, err}
		}()
	}
	won := result{err: nil}
	var firstErr error
	for range req.Permits {
		r := <-results
		switch {
		case r.err == nil && won.lease == nil:
			won = r
			cancel()
		case r.err == nil:
			s.releaseQuietly(ctx, r.lease) // a second grant: not needed
		case firstErr == nil && !errors.Is(r.err, context.Canceled) && !errors.Is(r.err, lockcore.ErrTaken):
			firstErr = r.err
			if errors.Is(r.err, lockcore.ErrTooManyWaiters) {
				// The room is full: the request is refused now, not
				// after waiting on the permits that found room.
				cancel()
			}
		}
	}
	if won.lease != nil {
		return won.i, won.lease, nil
	}
	if err := ctx.Err(); err != nil {
		return 0, nil, errors.Join(err, firstErr)
	}
	return 0, nil, firstErr
}

// recheck reads every permit again after permit i was granted, and gives
// the permit back when a holder records another K.
func (s *Semaphores) recheck(ctx context.Context, req AcquireRequest, i int, lease *lockcore.Lease) error {
	v, err := s.read(ctx, req.Name)
	if err == nil {
		err = v.conflict(req.Name, req.Permits, i)
	}
	if err != nil {
		s.releaseQuietly(ctx, lease)
	}
	return err
}

// releaseQuietly gives back a lease the caller will never see; a failure
// leaves it to expire with its TTL.
func (s *Semaphores) releaseQuietly(ctx context.Context, l *lockcore.Lease) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = s.locker.Release(rctx, lockcore.ReleaseRequest{Resource: l.Resource, LeaseID: l.ID})
}

// Extend resets permit i's TTL (0: the TTL last set), as lockcore's Extend
// does for a lock, with IfToken checked the same way.
//
// Errors: *lockcore.InvalidError; and those of lockcore.Redlock.Extend
// (lockcore.ErrNotHeld, *lockcore.HeldByOtherError,
// lockcore.ErrTokenMismatch, *lockcore.QuorumError, ctx.Err()).
func (s *Semaphores) Extend(ctx context.Context, name string, i int, leaseID string, ttl time.Duration, ifToken int64) (*Permit, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if err := checkIndex(i); err != nil {
		return nil, err
	}
	lease, err := s.locker.Extend(ctx, lockcore.ExtendRequest{Resource: lockcore.PermitResource(name, i), LeaseID: leaseID, TTL: ttl, IfToken: ifToken})
	if err != nil {
		return nil, err
	}
	s.track(lease)
	return &Permit{Name: name, Index: i, ID: lease.ID, Token: lease.Token, TTL: lease.TTL,
		Validity: lease.Validity, Expires: lease.Expires}, nil
}

// Release gives permit i back; a waiter on this replica gets it at once.
//
// Errors: *lockcore.InvalidError; and those of lockcore.Redlock.Release.
func (s *Semaphores) Release(ctx context.Context, name string, i int, leaseID string, ifToken int64) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := checkIndex(i); err != nil {
		return err
	}
	res := lockcore.PermitResource(name, i)
	err := s.locker.Release(ctx, lockcore.ReleaseRequest{Resource: res, LeaseID: leaseID, IfToken: ifToken})
	if err == nil || errors.Is(err, lockcore.ErrNotHeld) || errors.Is(err, lockcore.ErrHeldByOther) {
		s.untrack(res, leaseID)
	}
	return err
}

// Inspect reports who holds name's permits, never their lease ids. It reads
// every permit (lockcore.MaxPermits locks, in one round when the Locker
// can), so a holder of any K is shown.
//
// Errors: *lockcore.InvalidError; lockcore.ErrNotHeld when no permit is
// held; or an error of the Locker's Inspect.
func (s *Semaphores) Inspect(ctx context.Context, name string) (*State, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	v, err := s.read(ctx, name)
	if err != nil {
		return nil, err
	}
	st := &State{Name: name}
	for i, info := range v.held {
		if info == nil {
			continue
		}
		k, owner := parseOwner(info.Owner)
		k = max(k, 1) // a label no semaphore wrote
		st.Permits = max(st.Permits, k)
		st.Holders = append(st.Holders, Holder{Index: i, Permits: k, Token: info.Token, Owner: owner,
			TTL: info.TTL, Remaining: info.Remaining, Expires: info.Expires})
	}
	if st.Holders == nil {
		return nil, lockcore.ErrNotHeld
	}
	return st, nil
}
