package lockcore

import (
	"cmp"
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/lockgate/lockgate/lockcore/internal/waitroom"
)

// Waiting for a held lock is package waitroom's job (its doc says the
// states of a waiter and when it wakes); this file connects it to the
// Redlock. The room asks the Redlock to try (an acquisition round, or a
// refresh of a lease that may already hold the lock) and to release leases
// that nobody will use; the Redlock tells the room which nodes released a
// lock (announce), that a waiter elsewhere wants it (yield), and hands locks
// to its heads (claim, deliver).

// waitRoom is a Redlock's waiting room.
type waitRoom struct {
	r    *Redlock
	room *waitroom.Room[acquisition, *Lease]
}

// waiter is a queue's head claimed for a hand-off by a Release: q is the
// copy of its acquisition that the room kept when it joined.
type waiter struct {
	c *waitroom.Claim[acquisition, *Lease]
	q acquisition
}

func newWaitRoom(r *Redlock) *waitRoom {
	watches := make([]waitroom.Watch, len(r.nodes))
	for i, n := range r.nodes {
		if w, ok := n.(Watcher); ok {
			watches[i] = w.Watch
		}
	}
	// WatchTimeout is NodeTimeout, not the node timeout of the moment: a
	// watch that cannot subscribe in time is tried again later (waitroom's
	// resubscribeAt), and its queue's head tries the lock each time
	// meanwhile (a deaf queue polls), so a slow node makes a hand-off
	// slower, never a call fail.
	return &waitRoom{r: r, room: waitroom.New[acquisition](waitroom.Config[*Lease]{
		Clock:        r.opt.Clock,
		Quorum:       r.quorum,
		Watches:      watches,
		WatchTimeout: r.opt.NodeTimeout,
		MaxWaiters:   r.opt.MaxWaiters,
		Abandon:      r.abandon,
	})}
}

// acquire waits in the queue for q.Resource until the lock is acquired,
// q.Wait runs out, ctx ends or the room closes.
func (wr *waitRoom) acquire(ctx context.Context, q acquisition) (*Lease, error) {
	r := wr.r
	// The answer of the Try or Refresh that ended the wait, if one did.
	var lease *Lease
	var err error
	q.rounds = new(atomic.Int64) // see attempt.superseded
	try := func(ctx context.Context) waitroom.Result {
		lease, err = r.tryAcquire(ctx, &q) // q keeps what its first round learnt
		if taken, ok := errors.AsType[*TakenError](err); ok {
			return waitroom.Result{FreeIn: cmp.Or(max(0, taken.RetryAfter), r.opt.MinTTL), Split: taken.granted > 0}
		}
		lease, err = r.handOver(ctx, lease, err)
		if err != nil {
			return waitroom.Result{Done: true}
		}
		// The next waiter sleeps until this lease expires or is released.
		return waitroom.Result{Done: true, Expires: lease.Expires}
	}
	var refresh func(ctx context.Context) bool
	if !q.minted {
		// Others wait, so this request will not try ahead of them; but its
		// lease may already hold the lock (a retry whose answer was lost):
		// then refreshing it is the answer, not a place in the queue.
		refresh = func(ctx context.Context) bool {
			lease, err = r.Extend(ctx, ExtendRequest{Resource: q.Resource, LeaseID: q.LeaseID, TTL: q.TTL})
			switch {
			case err == nil:
				lease.Owner = q.Owner
				return true
			case errors.Is(err, ErrNotHeld) || errors.Is(err, ErrHeldByOther):
				// The lease cannot hold a quorum (see verdict): every copy
				// a later round finds, a hand-off's lost grant included,
				// is this request's own (see acquisition.fresh).
				q.tried, q.fresh = true, true
				return false
			}
			return true
		}
	}
	out := wr.room.Wait(ctx, waitroom.Request[acquisition]{
		Resource: q.Resource, Lease: q.LeaseID, Wait: q.Wait, Try: try, Refresh: refresh, Data: q,
	})
	recordWait(ctx, out.Queued, out.End)
	switch out.End {
	case waitroom.Tried:
		return lease, err
	case waitroom.Handed:
		return r.handOver(ctx, out.Lease, nil)
	case waitroom.RanOut:
		return nil, &TakenError{Resource: q.Resource, RetryAfter: out.FreeIn}
	case waitroom.TooMany:
		return nil, ErrTooManyWaiters
	case waitroom.Canceled:
		return nil, ctx.Err()
	default:
		return nil, ErrClosed
	}
}

// claim picks the head of resource's queue for a hand-off by the Release of
// lease, or returns nil (see waitroom.Room.Claim).
func (wr *waitRoom) claim(resource, lease string) *waiter {
	c := wr.room.Claim(resource, lease)
	if c == nil {
		return nil
	}
	return &waiter{c: c, q: c.Data()}
}

// deliver ends a hand-off to w: it gets lease, or, when the hand-off failed
// (err), goes on waiting, and tries at once if the hand-off freed nodes. A
// lease for a waiter that has left is released.
func (wr *waitRoom) deliver(w *waiter, lease *Lease, err error, freed bool) {
	var expires time.Time
	if err == nil {
		expires = lease.Expires
	}
	wr.room.Deliver(w.c, lease, expires, err == nil, freed)
}

// announce tells the room that the nodes in mask released resource.
func (wr *waitRoom) announce(resource string, mask uint64) { wr.room.Announce(resource, mask) }

// yield makes this replica's waiters on resource let a waiter on another
// replica try first (see waitroom.Room.Yield).
func (wr *waitRoom) yield(resource string) { wr.room.Yield(resource) }

func (wr *waitRoom) close() { wr.room.Close() }

// handOver returns an acquisition's result to the caller, unless the caller
// has left meanwhile: then nobody will use the lock, so nobody must wait for
// it, and it is released at once.
//
// A lease that re-entered (the caller already held the lock before this
// request) is not released: the caller may still count on its earlier
// answer, and its lock stays as it was, with the TTL refreshed.
func (r *Redlock) handOver(ctx context.Context, lease *Lease, err error) (*Lease, error) {
	if cerr := ended(ctx); err == nil && cerr != nil {
		r.abandon(lease)
		return nil, cerr
	}
	return lease, err
}

// abandon releases a lease that nobody will use, unless it re-entered (see
// handOver).
func (r *Redlock) abandon(l *Lease) {
	if !l.Reentered {
		r.releaseAbandoned(l)
	}
}

// releaseAbandoned releases a lease acquired for a caller that has gone.
//
// A minted lease is released again in the background (see retryUndo) until
// every node has answered: its copy on a node whose answer was lost would
// otherwise stay until its TTL runs out.
func (r *Redlock) releaseAbandoned(l *Lease) {
	ctx := context.Background()
	_ = r.Release(ctx, ReleaseRequest{Resource: l.Resource, LeaseID: l.ID})
	if l.minted {
		all := make([]bool, len(r.nodes))
		for i := range all {
			all[i] = true
		}
		r.retries.Go(func() { r.retryUndo(l.Resource, l.ID, all, l.Validity, func() bool { return false }) })
	}
}
