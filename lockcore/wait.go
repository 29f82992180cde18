package lockcore

import (
	"container/list"
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"
)

// Waiting for a held lock.
//
// Waiters on one Redlock (one gateway replica) queue per resource in arrival
// order. Only the head of a queue tries to acquire; the others sleep until
// they become the head. The head tries again when
//   - a release is announced: by this replica's own Release, or by a node
//     (Watcher) whose release script publishes a notice, or
//   - the holder's remaining TTL, learnt from the failed attempt, runs out:
//     an expiry is announced by nobody.
//
// A queue subscribes to its resource on every Watcher node once, when its
// first waiter arrives and before that waiter's first attempt, so a release
// between a failed attempt and the subscription cannot be missed; the
// subscription ends when the queue empties. Each release carries a random
// notice announced by every node it was released on, so it wakes the head
// once, not once per node; once per attempt, rather: a release still under
// way on other nodes when the head tries must wake it again. The undo of the
// head's own failed attempt wakes nobody in its queue. After a failed
// attempt the head pauses a few random milliseconds, so that heads on
// different replicas, which hear each other's undos, do not retry in a loop.
//
// A new Acquire that waits joins the tail of a non-empty queue without trying
// first, so the releaser of a lock that others wait for cannot take it back
// ahead of them. Across replicas there is no queue: each replica's head tries
// on the same announcement, and whichever reaches a majority first wins.

type waitRoom struct {
	r       *Redlock
	mu      sync.Mutex
	queues  map[string]*waitQueue
	total   int
	closed  bool
	closing chan struct{}
}

type waitQueue struct {
	resource string
	waiters  *list.List // of *waiter, head first
	stops    []func()
	ready    chan struct{} // closed once the subscriptions are in place
	seen     [8]string     // recent notices, to count each release once
	next     int
	own      [8]string // notices of the head's own failed attempts' undos
	nextOwn  int
}

type waiter struct {
	wake chan struct{} // buffered(1): a pending wake-up is never lost
	// Guarded by waitRoom.mu:
	// released is set when a release was announced (or the head before this
	// waiter left without the lock): the lock may be free, try now.
	released bool
	// retryAt is when the holder's TTL runs out, as far as this waiter knows.
	retryAt time.Time
}

func newWaitRoom(r *Redlock) *waitRoom {
	return &waitRoom{r: r, queues: map[string]*waitQueue{}, closing: make(chan struct{})}
}

func (w *waiter) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// join adds a waiter at the tail of the resource's queue, creating the queue
// (and its subscriptions) when it is the first.
func (wr *waitRoom) join(ctx context.Context, resource string) (*waitQueue, *list.Element, error) {
	wr.mu.Lock()
	if wr.closed {
		wr.mu.Unlock()
		return nil, nil, ErrClosed
	}
	if wr.total >= wr.r.opt.MaxWaiters {
		wr.mu.Unlock()
		return nil, nil, ErrTooManyWaiters
	}
	q := wr.queues[resource]
	first := q == nil
	if first {
		q = &waitQueue{resource: resource, waiters: list.New(), ready: make(chan struct{})}
		wr.queues[resource] = q
	}
	el := q.waiters.PushBack(&waiter{wake: make(chan struct{}, 1)})
	wr.total++
	wr.mu.Unlock()

	if first {
		stops := wr.subscribe(ctx, q)
		wr.mu.Lock()
		q.stops = stops
		wr.mu.Unlock()
		close(q.ready)
	} else {
		select {
		case <-q.ready:
		case <-ctx.Done():
		}
	}
	return q, el, nil
}

// subscribe watches resource on every Watcher node in parallel. A node that
// cannot subscribe is skipped: its releases are then learnt from the TTL.
func (wr *waitRoom) subscribe(ctx context.Context, q *waitQueue) []func() {
	var (
		mu    sync.Mutex
		stops []func()
		wg    sync.WaitGroup
	)
	notify := func(notice string) { wr.announce(q.resource, notice) }
	for _, n := range wr.r.nodes {
		wn, ok := n.(Watcher)
		if !ok {
			continue
		}
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, wr.r.opt.NodeTimeout)
			defer cancel()
			stop, err := wn.Watch(cctx, q.resource, notify)
			if err != nil {
				return
			}
			mu.Lock()
			stops = append(stops, stop)
			mu.Unlock()
		})
	}
	wg.Wait()
	return stops
}

// leave removes a waiter. If it was the head, the next waiter becomes the
// head and is woken to try (with hint as the holder's expiry when the leaver
// just took the lock). The last waiter out ends the subscriptions.
func (wr *waitRoom) leave(q *waitQueue, el *list.Element, hint time.Time) {
	wr.mu.Lock()
	wasHead := q.waiters.Front() == el
	q.waiters.Remove(el)
	wr.total--
	var stops []func()
	if q.waiters.Len() == 0 {
		delete(wr.queues, q.resource)
		stops = q.stops
		q.stops = nil
	} else if wasHead {
		next := q.waiters.Front().Value.(*waiter)
		if hint.IsZero() {
			next.released = true
		} else {
			next.retryAt = hint
		}
		next.poke()
	}
	wr.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
}

// announce wakes the head of resource's queue for a release, once per notice.
func (wr *waitRoom) announce(resource, notice string) {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	q := wr.queues[resource]
	if q == nil {
		return
	}
	for _, s := range q.own {
		if s == notice {
			return // an undo of our own attempt, not a release
		}
	}
	for _, s := range q.seen {
		if s == notice {
			return
		}
	}
	q.seen[q.next] = notice
	q.next = (q.next + 1) % len(q.seen)
	if front := q.waiters.Front(); front != nil {
		w := front.Value.(*waiter)
		w.released = true
		w.poke()
	}
}

func (wr *waitRoom) isHead(q *waitQueue, el *list.Element) bool {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	return q.waiters.Front() == el
}

func (wr *waitRoom) close() {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	if !wr.closed {
		wr.closed = true
		close(wr.closing)
	}
}

// acquire waits in the queue for req.Resource until the lock is acquired,
// req.Wait runs out, ctx ends or the room closes.
func (wr *waitRoom) acquire(ctx context.Context, req AcquireRequest) (*Lease, error) {
	clock := wr.r.opt.Clock
	deadline := clock.Now().Add(req.Wait)
	q, el, err := wr.join(ctx, req.Resource)
	if err != nil {
		return nil, err
	}
	me := el.Value.(*waiter)
	var lastTaken *TakenError
	var hint time.Time
	defer func() { wr.leave(q, el, hint) }()

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for attempt := true; ; {
		if attempt && wr.isHead(q, el) {
			// If the attempt fails, its undo announces notice: that is not
			// the holder's release and must not wake this waiter, or it
			// would retry in a loop while the lock is held (on a quorum,
			// with a free minority that each attempt takes and undoes).
			notice := newNotice()
			wr.mu.Lock()
			me.released = false
			q.own[q.nextOwn] = notice
			q.nextOwn = (q.nextOwn + 1) % len(q.own)
			// A release that woke this waiter may still be under way on
			// other nodes, which this attempt may find held: their
			// announcements of it must wake the waiter again.
			clear(q.seen[:])
			wr.mu.Unlock()
			lease, err := wr.r.tryAcquire(ctx, req, notice)
			switch {
			case err == nil:
				if ctx.Err() != nil {
					// The caller left while we were acquiring: nobody will
					// use this lock, so nobody must wait for it.
					wr.r.releaseAbandoned(lease)
					return nil, ctx.Err()
				}
				hint = lease.Expires
				return lease, nil
			case errors.As(err, &lastTaken):
				wait := lastTaken.RetryAfter
				if wait <= 0 {
					wait = wr.r.opt.MinTTL
				}
				wr.mu.Lock()
				// A release announced during the attempt leaves released
				// set and a wake-up pending: the next round tries again.
				me.retryAt = clock.Now().Add(wait + time.Millisecond)
				wr.mu.Unlock()
				// Heads on other replicas hear this attempt's undo and try
				// at once, and this one hears theirs: pause a random moment
				// before trying again, so that they do not take and undo
				// the free nodes in a tight loop (and split votes clear).
				if err := wr.pause(ctx, retryPause+rand.N(retryPause*4)); err != nil {
					return nil, err
				}
			default:
				return nil, err
			}
		}
		now := clock.Now()
		if !now.Before(deadline) {
			if lastTaken == nil {
				lastTaken = &TakenError{Resource: req.Resource}
			}
			return nil, lastTaken
		}
		sleep := deadline.Sub(now)
		wr.mu.Lock()
		retryAt := me.retryAt
		wr.mu.Unlock()
		if !retryAt.IsZero() && retryAt.Sub(now) < sleep {
			sleep = max(0, retryAt.Sub(now))
		}
		timer.Reset(sleep)
		select {
		case <-me.wake:
		case <-timer.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-wr.closing:
			return nil, ErrClosed
		}
		// Try when a release was announced or the holder's TTL ran out;
		// otherwise (a new expiry hint, or the deadline) just look again.
		wr.mu.Lock()
		attempt = me.released || (!me.retryAt.IsZero() && !clock.Now().Before(me.retryAt))
		me.released = false
		wr.mu.Unlock()
	}
}

// retryPause is the shortest pause of a waiter between a failed attempt and
// the next; a random share of up to 4 times as much is added.
const retryPause = 5 * time.Millisecond

// pause sleeps for d unless ctx ends or the room closes.
func (wr *waitRoom) pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-wr.closing:
		return ErrClosed
	}
}

// releaseAbandoned releases a lease acquired for a caller that has gone.
func (r *Redlock) releaseAbandoned(l *Lease) {
	ctx := context.Background()
	_ = r.Release(ctx, ReleaseRequest{Resource: l.Resource, LeaseID: l.ID})
}
