package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/lockgate/lockgate/api"
)

// LockOptions tune Client.Lock. A nil *LockOptions means the defaults.
type LockOptions struct {
	// TTL of the lock; 0 means 30s. The watchdog renews it about every
	// TTL/3.
	TTL time.Duration
	// Wait is how long to wait for a lock another lease holds; 0 means fail
	// at once with ErrTaken. Transient failures (no quorum, no answer) are
	// retried with the same lease id until Wait (or 1s when Wait is 0) has
	// passed or ctx ends.
	Wait time.Duration
	// Owner is a label shown by Get.
	Owner string
	// Margin is how long before the end of the last granted validity Done
	// closes when renewal has not succeeded. Default TTL/10, at least 20ms
	// and at most 5s. It covers the time between Done closing and the
	// holder noticing, and a late timer.
	Margin time.Duration
	// MaxHold, if not 0, bounds how long the lock is held: MaxHold after
	// Lock returns the watchdog stops renewing and Done closes with
	// ErrMaxHold. The lock then runs out by its TTL unless released.
	MaxHold time.Duration
	// OnRenew, if set, is called after each successful renewal with the
	// new lease (for logs and tests). It runs on the watchdog's goroutine
	// and must not block.
	OnRenew func(*Lease)
}

const (
	defaultTTL       = api.DefaultTTLms * time.Millisecond
	minMargin        = 20 * time.Millisecond
	maxMargin        = 5 * time.Second
	minBackoff       = 25 * time.Millisecond
	transientBudget0 = time.Second
)

func (o *LockOptions) withDefaults() LockOptions {
	var v LockOptions
	if o != nil {
		v = *o
	}
	if v.TTL <= 0 {
		v.TTL = defaultTTL
	}
	if v.Margin <= 0 {
		v.Margin = min(max(v.TTL/10, minMargin), maxMargin)
	}
	return v
}

// Lock is a held lock with a watchdog that renews it about every TTL/3
// until Release, the end of MaxHold, or a loss.
//
// Done closes when the lock can no longer be counted on: at once when the
// gateway says the lease no longer holds it, and otherwise Margin before the
// end of the validity it was last granted (counted from when the granting
// request was sent, on the local monotonic clock), if no renewal succeeded
// by then. It never closes after that end, however the renewals fare. Err
// says why.
//
// Done closing does not make the holder stop: a process can be paused past
// any deadline. Storage that checks the fencing token (SetFencingHeaders)
// is what refuses a holder that acted too late.
type Lock struct {
	c        *Client
	resource string
	permit   int  // the permit's number for HoldPermit, -1 for a lock
	rw       bool // a readers-writer hold (HoldRW)
	// set is the members of a lock set (HoldSet), with their tokens; its
	// resource is the set's name. Written before the watchdog starts.
	set     []api.LockSetMember
	leaseID string
	token   int64
	ttl     time.Duration
	margin  time.Duration
	onRenew func(*Lease)

	// ctx is what Context returns. A Lock keeps a context because its whole
	// job is to hand one out, ending when Done closes (as etcd's Session).
	ctx    context.Context
	cancel context.CancelCauseFunc

	done    chan struct{}
	stop    chan struct{} // closed by Release: renew no more
	exited  chan struct{} // closed when the watchdog goroutine has returned
	stopped sync.Once

	mu        sync.Mutex
	last      *Lease
	failure   error // the last renewal's error, since the last success
	err       error
	lossTimer *time.Timer

	relMu      sync.Mutex // serialises Release
	released   bool
	releaseErr error
}

// Lock acquires the lock on resource and starts its watchdog. It retries
// transient failures with the same lease id (see LockOptions.Wait); if it
// gives up after such a failure it asks the gateway to release that lease,
// in case a lost answer had granted it. Errors: as Acquire's, the last one
// when retries ran out.
func (c *Client) Lock(ctx context.Context, resource string, o *LockOptions) (*Lock, error) {
	opt := o.withDefaults()
	ao := AcquireOptions{TTL: opt.TTL, Wait: opt.Wait, Owner: opt.Owner, LeaseID: NewLeaseID()}
	var lease *Lease
	unsure, err := c.retryTransient(ctx, opt.Wait, func(wait time.Duration) (err error) {
		ao.Wait = wait
		lease, err = c.acquire(ctx, resource, ao)
		return err
	})
	if err == nil && c.now().Sub(lease.Sent) > time.Duration(lease.ValidityMs)*time.Millisecond/3 {
		// A waited acquisition: the gateway counts the validity from its
		// last attempt, which the client cannot see; counted from Sent it
		// may be nearly gone. An extend now gives a validity counted from a
		// moment we know.
		var ext *Lease
		ext, err = c.Extend(ctx, resource, lease.LeaseID, &ExtendOptions{IfToken: lease.FencingToken})
		if err == nil {
			lease = ext
		}
		unsure = true
	}
	if err != nil {
		if unsure {
			c.releaseQuietly(ctx, resource, ao.LeaseID)
		}
		return nil, err
	}

	return c.hold(ctx, resource, -1, false, lease, nil, opt), nil
}

// retryTransient calls try until it returns nil or an error that is not
// Transient, with backoff, for up to wait (transientBudget0 when 0); each
// call gets what is left of wait. unsure is true when an attempt failed
// transiently: it may have been granted without our hearing it, so the
// caller gives back what that lease holds if it gives up.
func (c *Client) retryTransient(ctx context.Context, wait time.Duration, try func(wait time.Duration) error) (unsure bool, err error) {
	budget := wait
	if budget <= 0 {
		budget = transientBudget0
	}
	start := c.now()
	backoff := minBackoff
	for {
		err = try(max(0, wait-c.now().Sub(start)))
		if err == nil || !Transient(err) {
			return unsure, err
		}
		unsure = true
		pause := jitter(backoff)
		backoff = min(2*backoff, time.Second)
		if c.now().Add(pause).Sub(start) > budget {
			return unsure, err
		}
		if !sleep(ctx, pause) {
			return unsure, errors.Join(err, ctx.Err())
		}
	}
}

// hold starts the watchdog of lease, a lock on resource or, with permit ≥
// 0, permit of the semaphore resource, or with rw a readers-writer hold,
// or with set the lock set resource of those members.
func (c *Client) hold(ctx context.Context, resource string, permit int, rw bool, lease *Lease, set []api.LockSetMember, opt LockOptions) *Lock {
	l := &Lock{
		c: c, resource: resource, permit: permit, rw: rw, set: set, leaseID: lease.LeaseID, token: lease.FencingToken,
		ttl: opt.TTL, margin: opt.Margin, onRenew: opt.OnRenew,
		done: make(chan struct{}), stop: make(chan struct{}), exited: make(chan struct{}),
		last: lease,
	}
	// Context keeps ctx's values, not its cancellation: ctx bounded the
	// acquisition, the lock outlives it.
	l.ctx, l.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	l.mu.Lock()
	l.lossTimer = time.AfterFunc(time.Until(l.lossAt(lease)), l.checkLoss)
	l.mu.Unlock()
	var hold *time.Timer
	if opt.MaxHold > 0 {
		hold = time.NewTimer(opt.MaxHold) // counted from now: the wait is not holding
	}
	go l.watch(hold)
	return l
}

// releaseQuietly clears what a failed attempt may have left on the nodes.
func (c *Client) releaseQuietly(ctx context.Context, resource, leaseID string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = c.Release(rctx, resource, leaseID, 0)
}

// lossAt is when Done must close if nothing renews lease.
func (l *Lock) lossAt(lease *Lease) time.Time { return lease.ValidUntil().Add(-l.margin) }

// renewAt is when the watchdog first tries to renew lease: a third of the
// TTL after it was sent, or earlier if the validity is short.
func renewAt(lease *Lease, ttl, margin time.Duration) time.Time {
	validity := time.Duration(lease.ValidityMs) * time.Millisecond
	return lease.Sent.Add(min(ttl/3, (validity-margin)/2))
}

// checkLoss runs when the loss timer fires. A renewal may have moved the
// deadline while the timer was firing; then it re-arms the timer instead.
func (l *Lock) checkLoss() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	if d := time.Until(l.lossAt(l.last)); d > 0 {
		l.lossTimer.Reset(d)
		return
	}
	why := "no renewal was due yet"
	if l.failure != nil {
		why = "last renewal: " + l.failure.Error()
	}
	l.closeLocked(fmt.Errorf("%w: not renewed within the validity last granted (%dms, from %s ago; %s)",
		ErrLost, l.last.ValidityMs, time.Since(l.last.Sent).Round(time.Millisecond), why))
}

// lose closes Done with err unless it is closed already.
func (l *Lock) lose(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closeLocked(err)
}

func (l *Lock) closeLocked(err error) {
	if l.err != nil {
		return
	}
	l.err = err
	l.lossTimer.Stop()
	close(l.done)
	l.cancel(err)
}

// renewed records a successful renewal, unless Done closed meanwhile.
func (l *Lock) renewed(lease *Lease) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return false
	}
	// A renewal that took longer than the last validity may count from
	// before the old deadline; keep whichever ends later.
	l.failure = nil
	if lease.ValidUntil().After(l.last.ValidUntil()) {
		l.last = lease
		l.lossTimer.Reset(time.Until(l.lossAt(lease)))
	}
	return true
}

func (l *Lock) failed(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failure = err
}

// watch renews the lock until stop, a loss or maxHold.
func (l *Lock) watch(hold *time.Timer) {
	defer close(l.exited)
	var maxHold <-chan time.Time
	if hold != nil {
		defer hold.Stop()
		maxHold = hold.C
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	l.mu.Lock()
	next := renewAt(l.last, l.ttl, l.margin)
	l.mu.Unlock()
	backoff := minBackoff
	for {
		timer.Reset(time.Until(next))
		select {
		case <-l.stop:
			return
		case <-l.done:
			return
		case <-maxHold:
			l.lose(fmt.Errorf("%w: held for the maximum hold time; renewal stopped", ErrMaxHold))
			return
		case <-timer.C:
		}
		l.mu.Lock()
		deadline := l.lossAt(l.last)
		l.mu.Unlock()
		// The request may not outlast the loss deadline: an answer after it
		// is of no use, Done has closed.
		ctx, cancel := context.WithDeadline(l.ctx, deadline)
		lease, err := l.extend(ctx, &ExtendOptions{TTL: l.ttl, IfToken: l.token})
		cancel()
		switch {
		case err == nil:
			if !l.renewed(lease) {
				return
			}
			if l.onRenew != nil {
				l.onRenew(lease)
			}
			backoff = minBackoff
			next = renewAt(lease, l.ttl, l.margin)
		case Transient(err):
			l.failed(err)
			// Retry within what is left of the validity; the loss timer
			// closes Done when it runs out, whatever the retries do.
			next = time.Now().Add(jitter(backoff))
			backoff = min(2*backoff, max(l.ttl/10, minBackoff))
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
			// The loss deadline passed during the request (the loss timer
			// closes Done), or Done closed.
			next = time.Now().Add(jitter(backoff))
		default:
			// A definite answer: not held, held by another lease, token
			// mismatch, refused.
			l.lose(fmt.Errorf("%w: %w", ErrLost, err))
			return
		}
	}
}

// Done is closed when the lock can no longer be counted on (see Lock) or
// Release was called. It is closed before the last granted validity ends.
func (l *Lock) Done() <-chan struct{} { return l.done }

// Err is nil while Done is open; then it says why Done closed: ErrLost
// (wrapping the gateway's answer or the renewal failures), ErrMaxHold or
// ErrReleased.
func (l *Lock) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Context returns a context that is cancelled, with Err as its cause, when
// Done closes. It carries the values of the context given to Lock.
func (l *Lock) Context() context.Context { return l.ctx }

// Resource is the locked resource's name (the semaphore's, for HoldPermit).
func (l *Lock) Resource() string { return l.resource }

// LeaseID is the lease's secret id. Never log it.
func (l *Lock) LeaseID() string { return l.leaseID }

// FencingToken is the lock's fencing token; it does not change on renewal.
// A lock set has one per member (Members), and 0 here.
func (l *Lock) FencingToken() int64 { return l.token }

// ValidUntil is the local time until which the lock is known to be held,
// as of the last successful acquire or renewal.
func (l *Lock) ValidUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last.ValidUntil()
}

// SetFencingHeaders sets Fencing-Token and Fencing-Resource on req, a
// request to storage guarded by the fencing package's middleware; for a
// permit, Fencing-Resource is FenceResource. For a lock set it sets
// nothing (see HoldSet).
func (l *Lock) SetFencingHeaders(req *http.Request) {
	if l.set != nil {
		return // a token per member: see HoldSet
	}
	SetFencingHeaders(req, l.fenceResource(), l.token)
}

// SetFencingHeaders sets the fencing token, and the resource it was granted
// for if resource is not empty, on req as the fencing package's middleware
// reads them (the Fencing-Token and Fencing-Resource headers).
func SetFencingHeaders(req *http.Request, resource string, token int64) {
	req.Header.Set(api.HeaderFencingToken, strconv.FormatInt(token, 10))
	if resource != "" {
		req.Header.Set(fencingResourceHeader, resource)
	}
}

// fencingResourceHeader is fencing.ResourceHeader, spelt out so that a
// client does not import the storage-side package; a test checks they match.
const fencingResourceHeader = "Fencing-Resource"

// Release stops the watchdog, waits for a renewal in flight to be answered
// (so that no renewal reaches the gateway after Release returns), then
// releases the lock (DELETE, checking the fencing token). Done is closed
// with ErrReleased unless it had closed already. If ctx ends while a
// renewal is in flight, that renewal is abandoned and Release returns
// ctx's error without releasing: the lock then expires by its TTL. A second
// call returns the first one's result. Errors: as Client.Release's
// (ErrNotHeld or ErrHeldByOther when the lock had been lost).
func (l *Lock) Release(ctx context.Context) error {
	l.relMu.Lock()
	defer l.relMu.Unlock()
	if l.released {
		return l.releaseErr
	}
	l.stopped.Do(func() { close(l.stop) })
	select {
	case <-l.exited:
	case <-ctx.Done():
		l.lose(fmt.Errorf("%w: %w", ErrReleased, ctx.Err())) // cancels the renewal in flight
		<-l.exited
		return errors.Join(fmt.Errorf("client: release of %s abandoned: %w", l.resource, ctx.Err()), ctx.Err())
	}
	// Done closes before the lock is free, so that work under Context()
	// is told to stop before another holder can start.
	l.lose(ErrReleased)
	l.released = true
	l.releaseErr = l.release(ctx)
	return l.releaseErr
}

// jitter returns d ± 20%.
func jitter(d time.Duration) time.Duration {
	return d - d/5 + time.Duration(rand.Int64N(int64(d)*2/5+1))
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
