package nodetest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockgate/lockgate/lockcore"
)

// ErrNotWatcher is what Faulty.Watch returns when the node it wraps is not a
// lockcore.Watcher. A Redlock skips a node whose Watch fails, just as it
// skips a node that is no Watcher, so wrapping does not change how waiters
// learn of releases.
var ErrNotWatcher = errors.New("nodetest: the wrapped node is not a lockcore.Watcher")

// Faulty wraps a lockcore.Node and injects faults into the calls made
// through it, for tests of what a Redlock does when nodes fail, hang, are
// slow, or answer too late. With no fault set it is transparent: every call
// goes to the wrapped node unchanged and its answer comes back unchanged.
//
// Faults can be switched on and off at any time, from any goroutine; a call
// sees the settings in force when it reads them. Calls made directly on the
// wrapped node bypass every fault, which lets a test read the true state of
// a node that the Redlock sees as down.
//
// A call through Faulty goes through these steps, in order:
//
//  1. Acquire and HandOff only: the call is counted (see Acquires) and the
//     hook set with SetBeforeAcquire runs, whatever happens next.
//  2. Down (SetDown with a non-nil error): the call fails at once with that
//     error; the wrapped node is not called.
//  3. Hang (SetHang): the call blocks until its context ends and fails with
//     the context's error; the wrapped node is not called.
//  4. Delay (SetDelay): the call waits that long first; if its context ends
//     sooner, it fails with the context's error and the wrapped node is not
//     called.
//  5. Acquire (and HandOff), late grant (SetLateGrant): the wrapped node is asked to
//     acquire (and grants, if the lock is free) under a context that never
//     ends, but the reply is dropped: the call blocks until its own context
//     ends and fails with the context's error. This is a grant whose reply
//     was lost.
//  6. The wrapped node is called. For Acquire (and HandOff), if it answers
//     without error, the hook set with SetAfterAcquire runs with the request
//     and the reply (HandOff's next and its grant) before the reply is
//     returned.
//
// Steps 2 to 4 apply to every method but String: Acquire, Extend, Release,
// HandOff, RaiseFence, Inspect, Ping, and Watch when the wrapped node is a
// Watcher. HandOff with a late grant set reaches the wrapped node under a
// context that never ends and loses its reply, as Acquire does.
// String always names the wrapped node.
type Faulty struct {
	inner lockcore.Node

	mu           sync.Mutex
	down         error
	hang         bool
	lateGrant    bool
	delay        time.Duration
	gate         chan struct{}
	beforeAcq    func(lockcore.NodeAcquire)
	afterAcquire func(lockcore.NodeAcquire, lockcore.NodeReply)

	acquires atomic.Int64
}

var (
	_ lockcore.Node      = (*Faulty)(nil)
	_ lockcore.Watcher   = (*Faulty)(nil)
	_ lockcore.HandOffer = (*Faulty)(nil)
)

// ErrNotHandOffer is what Faulty.HandOff returns when the node it wraps is
// not a lockcore.HandOffer. A Redlock hands off only when every node is a
// HandOffer, so it never calls HandOff on such a wrapper.
var ErrNotHandOffer = errors.New("nodetest: the wrapped node is not a lockcore.HandOffer")

// NewFaulty wraps inner with no fault set.
func NewFaulty(inner lockcore.Node) *Faulty { return &Faulty{inner: inner} }

// Inner returns the wrapped node. Calls on it bypass every fault.
func (f *Faulty) Inner() lockcore.Node { return f.inner }

// SetDown makes every call fail at once with err; nil brings the node back
// up.
func (f *Faulty) SetDown(err error) { f.locked(func() { f.down = err }) }

// SetHang makes every call block until its context ends (true), or stops it
// (false).
func (f *Faulty) SetHang(hang bool) { f.locked(func() { f.hang = hang }) }

// SetDelay makes every call wait d before it reaches the wrapped node; 0
// removes the delay.
func (f *Faulty) SetDelay(d time.Duration) { f.locked(func() { f.delay = d }) }

// SetGate makes every call wait, before it reaches the wrapped node, until
// gate is closed or the call's context ends; nil removes the gate. Calls
// already waiting keep waiting for the gate they found.
func (f *Faulty) SetGate(gate chan struct{}) { f.locked(func() { f.gate = gate }) }

// SetLateGrant makes Acquire and HandOff reach the wrapped node but lose their reply
// (true), or answer normally again (false).
func (f *Faulty) SetLateGrant(late bool) { f.locked(func() { f.lateGrant = late }) }

// SetBeforeAcquire sets a hook that runs at the start of every Acquire,
// before any fault is applied; nil removes it. The hook runs on the caller's
// goroutine, so a hook that blocks holds up that call.
func (f *Faulty) SetBeforeAcquire(hook func(lockcore.NodeAcquire)) {
	f.locked(func() { f.beforeAcq = hook })
}

// SetAfterAcquire sets a hook that runs once the wrapped node has answered an
// Acquire without error, before the reply is returned; nil removes it. It
// does not run when a fault made the call fail.
func (f *Faulty) SetAfterAcquire(hook func(lockcore.NodeAcquire, lockcore.NodeReply)) {
	f.locked(func() { f.afterAcquire = hook })
}

// Acquires returns how many Acquire and HandOff calls were made through f,
// whatever their fate.
func (f *Faulty) Acquires() int64 { return f.acquires.Load() }

// locked runs fn with f.mu held.
func (f *Faulty) locked(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
}

// fault applies the faults common to every call (down, gate, hang, delay).
func (f *Faulty) fault(ctx context.Context) error {
	f.mu.Lock()
	down, hang, delay, gate := f.down, f.hang, f.delay, f.gate
	f.mu.Unlock()
	if down != nil {
		return down
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if hang {
		<-ctx.Done()
		return ctx.Err()
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Acquire implements lockcore.Node.
func (f *Faulty) Acquire(ctx context.Context, req lockcore.NodeAcquire) (lockcore.NodeReply, error) {
	late, after, err := f.acquiring(ctx, req)
	if err != nil {
		return lockcore.NodeReply{}, err
	}
	if late {
		_, _ = f.inner.Acquire(context.Background(), req)
		<-ctx.Done()
		return lockcore.NodeReply{}, ctx.Err()
	}
	rep, err := f.inner.Acquire(ctx, req)
	if err == nil && after != nil {
		after(req, rep)
	}
	return rep, err
}

// acquiring runs steps 1 to 4 for an acquisition for req (Acquire, or
// HandOff for its next holder) and returns what step 5 and 6 need: whether
// the grant is to be late, and the after-acquire hook.
func (f *Faulty) acquiring(ctx context.Context, req lockcore.NodeAcquire) (late bool, after func(lockcore.NodeAcquire, lockcore.NodeReply), err error) {
	f.acquires.Add(1)
	f.mu.Lock()
	before := f.beforeAcq
	f.mu.Unlock()
	if before != nil {
		before(req)
	}
	if err := f.fault(ctx); err != nil {
		return false, nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lateGrant, f.afterAcquire, nil
}

// Extend implements lockcore.Node.
func (f *Faulty) Extend(ctx context.Context, resource, lease string, ttl time.Duration, ifToken int64) (lockcore.NodeReply, error) {
	if err := f.fault(ctx); err != nil {
		return lockcore.NodeReply{}, err
	}
	return f.inner.Extend(ctx, resource, lease, ttl, ifToken)
}

// Release implements lockcore.Node.
func (f *Faulty) Release(ctx context.Context, resource, lease string, ifToken int64) (lockcore.NodeReply, error) {
	if err := f.fault(ctx); err != nil {
		return lockcore.NodeReply{}, err
	}
	return f.inner.Release(ctx, resource, lease, ifToken)
}

// HandOff implements lockcore.HandOffer by delegating to the wrapped node; it
// fails with ErrNotHandOffer when the wrapped node is no HandOffer. A
// hand-off is an acquisition for next: it is counted by Acquires, and the
// acquire hooks run with next (SetAfterAcquire's with the grant's reply).
func (f *Faulty) HandOff(ctx context.Context, lease string, ifToken int64, next lockcore.NodeAcquire) (released, granted lockcore.NodeReply, err error) {
	h, ok := f.inner.(lockcore.HandOffer)
	if !ok {
		return released, granted, ErrNotHandOffer
	}
	late, after, err := f.acquiring(ctx, next)
	if err != nil {
		return released, granted, err
	}
	if late {
		_, _, _ = h.HandOff(context.Background(), lease, ifToken, next)
		<-ctx.Done()
		return released, granted, ctx.Err()
	}
	released, granted, err = h.HandOff(ctx, lease, ifToken, next)
	if err == nil && after != nil {
		after(next, granted)
	}
	return released, granted, err
}

// RaiseFence implements lockcore.Node.
func (f *Faulty) RaiseFence(ctx context.Context, resource, lease string, token int64) error {
	if err := f.fault(ctx); err != nil {
		return err
	}
	return f.inner.RaiseFence(ctx, resource, lease, token)
}

// Inspect implements lockcore.Node.
func (f *Faulty) Inspect(ctx context.Context, resource string) (lockcore.NodeLock, error) {
	if err := f.fault(ctx); err != nil {
		return lockcore.NodeLock{}, err
	}
	return f.inner.Inspect(ctx, resource)
}

// Ping implements lockcore.Node.
func (f *Faulty) Ping(ctx context.Context) error {
	if err := f.fault(ctx); err != nil {
		return err
	}
	return f.inner.Ping(ctx)
}

// Watch implements lockcore.Watcher by delegating to the wrapped node. It
// fails with ErrNotWatcher when the wrapped node is no Watcher; the wrapped
// node's announcements are passed on as it makes them, faults or not (the
// release announced has already happened).
func (f *Faulty) Watch(ctx context.Context, resource string, notify func()) (func(), error) {
	w, ok := f.inner.(lockcore.Watcher)
	if !ok {
		return nil, ErrNotWatcher
	}
	if err := f.fault(ctx); err != nil {
		return nil, err
	}
	return w.Watch(ctx, resource, notify)
}

// String names the wrapped node.
func (f *Faulty) String() string { return f.inner.String() }

// Check implements lockcore.Node.
func (f *Faulty) Check(ctx context.Context) (lockcore.NodeHealth, error) {
	if err := f.fault(ctx); err != nil {
		return lockcore.NodeHealth{}, err
	}
	return f.inner.Check(ctx)
}

// Quarantine implements lockcore.Node.
func (f *Faulty) Quarantine(ctx context.Context) error {
	if err := f.fault(ctx); err != nil {
		return err
	}
	return f.inner.Quarantine(ctx)
}

// MarkInitializing implements lockcore.Node.
func (f *Faulty) MarkInitializing(ctx context.Context) (string, error) {
	if err := f.fault(ctx); err != nil {
		return "", err
	}
	return f.inner.MarkInitializing(ctx)
}

// Counters implements lockcore.Node.
func (f *Faulty) Counters(ctx context.Context) ([]int64, error) {
	if err := f.fault(ctx); err != nil {
		return nil, err
	}
	return f.inner.Counters(ctx)
}

// Repair implements lockcore.Node.
func (f *Faulty) Repair(ctx context.Context, floor []int64, epoch string) error {
	if err := f.fault(ctx); err != nil {
		return err
	}
	return f.inner.Repair(ctx, floor, epoch)
}

var _ lockcore.RecoveryClaimer = (*Faulty)(nil)

// ClaimRecovery implements lockcore.RecoveryClaimer by delegating to the
// wrapped node, after the faults set; a wrapped node that is no
// RecoveryClaimer grants every claim (each replica then recovers on its
// own, as without claims).
func (f *Faulty) ClaimRecovery(ctx context.Context, holder string, ttl time.Duration) (bool, error) {
	if err := f.fault(ctx); err != nil {
		return false, err
	}
	c, ok := f.inner.(lockcore.RecoveryClaimer)
	if !ok {
		return true, nil
	}
	return c.ClaimRecovery(ctx, holder, ttl)
}

// DropRecoveryClaim implements lockcore.RecoveryClaimer as ClaimRecovery
// does.
func (f *Faulty) DropRecoveryClaim(ctx context.Context, holder string) error {
	if err := f.fault(ctx); err != nil {
		return err
	}
	if c, ok := f.inner.(lockcore.RecoveryClaimer); ok {
		return c.DropRecoveryClaim(ctx, holder)
	}
	return nil
}

// ErrNotAcquireWatcher is what Faulty.WatchAcquired returns when the node
// it wraps is not a lockcore.AcquireWatcher.
var ErrNotAcquireWatcher = errors.New("nodetest: the wrapped node is not a lockcore.AcquireWatcher")

var _ lockcore.AcquireWatcher = (*Faulty)(nil)

// WatchAcquired implements lockcore.AcquireWatcher as Watch does: by
// delegating to the wrapped node (ErrNotAcquireWatcher when it is none),
// after the faults set, passing the grants announced on as they come.
func (f *Faulty) WatchAcquired(ctx context.Context, resource string, notify func()) (func(), error) {
	w, ok := f.inner.(lockcore.AcquireWatcher)
	if !ok {
		return nil, ErrNotAcquireWatcher
	}
	if err := f.fault(ctx); err != nil {
		return nil, err
	}
	return w.WatchAcquired(ctx, resource, notify)
}

var _ lockcore.Rejoiner = (*Faulty)(nil)

// Witness implements lockcore.Rejoiner by delegating to the wrapped node,
// after the faults set; a wrapped node that is no Rejoiner records
// nothing.
func (f *Faulty) Witness(ctx context.Context, seen map[string]int64) error {
	if err := f.fault(ctx); err != nil {
		return err
	}
	if r, ok := f.inner.(lockcore.Rejoiner); ok {
		return r.Witness(ctx, seen)
	}
	return nil
}

// Lent implements lockcore.Rejoiner: the wrapped node's view, each read
// after the faults set; a wrapped node that is no Rejoiner lends nothing
// (every read fails with lockcore.ErrNotSupported).
func (f *Faulty) Lent(epoch string) lockcore.LentNode {
	var inner lockcore.LentNode
	if r, ok := f.inner.(lockcore.Rejoiner); ok {
		inner = r.Lent(epoch)
	}
	return faultyLent{f, inner}
}

type faultyLent struct {
	f     *Faulty
	inner lockcore.LentNode
}

func (l faultyLent) ScanLocks(ctx context.Context, prefix, cursor string, count int) ([]string, string, error) {
	if err := l.f.fault(ctx); err != nil {
		return nil, "", err
	}
	if l.inner == nil {
		return nil, "", lockcore.ErrNotSupported
	}
	return l.inner.ScanLocks(ctx, prefix, cursor, count)
}

func (l faultyLent) InspectLocks(ctx context.Context, resources []string) ([]lockcore.NodeLock, error) {
	if err := l.f.fault(ctx); err != nil {
		return nil, err
	}
	if l.inner == nil {
		return nil, lockcore.ErrNotSupported
	}
	return l.inner.InspectLocks(ctx, resources)
}

func (l faultyLent) Counters(ctx context.Context) ([]int64, error) {
	if err := l.f.fault(ctx); err != nil {
		return nil, err
	}
	if l.inner == nil {
		return nil, lockcore.ErrNotSupported
	}
	return l.inner.Counters(ctx)
}

var _ lockcore.ForceReleaser = (*Faulty)(nil)

// BreakLock implements lockcore.ForceReleaser by delegating to the wrapped
// node, after the faults set; ErrNotSupported when the wrapped node is no
// ForceReleaser.
func (f *Faulty) BreakLock(ctx context.Context, resource, lease string, ttl time.Duration) (broken, counter int64, err error) {
	if err := f.fault(ctx); err != nil {
		return 0, 0, err
	}
	fr, ok := f.inner.(lockcore.ForceReleaser)
	if !ok {
		return 0, 0, lockcore.ErrNotSupported
	}
	return fr.BreakLock(ctx, resource, lease, ttl)
}
