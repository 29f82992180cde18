package lockcore

import (
	"container/list"
	"context"
	"errors"
	"math/bits"
	"math/rand/v2"
	"sync"
	"time"
)

// Waiting for a held lock.
//
// Waiters on one Redlock (one gateway replica) queue per resource in arrival
// order. Only the head of a queue is served; the others sleep until they
// become the head.
//
// A Release through this replica hands the lock straight to the head when
// the nodes allow it (HandOffer; see Redlock.handOffTo): the head is claimed
// (it does not try by itself meanwhile) and then either given its lease or,
// when the hand-off failed, woken to try. A head that left meanwhile has the
// lease released for it, once every node has answered the hand-off.
//
// Otherwise the head tries by itself when
//   - a release is announced on a quorum of nodes: by this replica's own
//     Release (it knows which nodes released), or by the nodes themselves
//     (Watcher), which announce each release in the same atomic step as
//     they delete the lock;
//   - the holder's remaining TTL, learnt from the failed attempt, runs out:
//     an expiry is announced by nobody;
//   - its own attempt was granted by some nodes but not a quorum (a split
//     vote with a waiter on another replica, or a minority of nodes the
//     holder never got): then after a short random pause that doubles with
//     each such failure in a row, as Redlock prescribes for split votes.
//
// A queue subscribes to its resource on every Watcher node once, when its
// first waiter arrives and before that waiter's next attempt, so a release
// between a failed attempt and the subscription cannot be missed; the
// subscription ends when the queue empties. Only which nodes announced a
// release counts, not which release it was: the queue keeps the set of nodes
// announced free since its head's last attempt began, whatever release or
// undo freed them, and wakes the head once that set is a quorum: the lock is
// then free on a quorum as far as anyone knows, and the head does not wake
// to find it still held on nodes a release has not reached yet. Undos of
// split votes add up (each frees a minority; together they free the lock);
// the undo of the head's own attempt on a minority the holder never got
// frees only that minority and wakes nobody. After a split vote a wake-up
// still waits out the random pause.
//
// An Acquire that waits tries once before joining when nobody waits for the
// resource on this replica and the replica is not yielding (below): no
// subscription is needed for a free lock. It
// joins the tail of a non-empty queue without trying first, so the releaser
// of a lock that others wait for cannot take it back ahead of them.
//
// Across replicas there is no queue: each replica's head tries on the same
// announcement, and whichever reaches a majority first wins. Hand-offs would
// let a replica with a busy queue keep a lock forever, so a node refuses to
// pass on a lock that a waiter through another replica was refused
// (NodeReply.Wanted). Such a release is announced, and the releasing replica
// yields for yieldFor: its head does not try on the announcement, and a new
// Acquire there joins the queue instead of trying first (right after its own
// release it would always win); yielding holds back every attempt of this
// replica's head, whatever woke it. The other replica's waiter usually gets
// the lock then; when it releases, this replica's head (refused meanwhile)
// is owed the next turn the same way, so two busy replicas tend to
// alternate. A replica slower than yieldFor to hear and try loses that turn.

type waitRoom struct {
	r        *Redlock
	watchers uint64 // the nodes that are Watchers (bit i: node i)
	mu       sync.Mutex
	queues   map[string]*waitQueue
	// yields holds, per resource released while a waiter on another
	// replica wanted it, until when this replica's waiters let that one
	// try first (see yield).
	yields  map[string]time.Time
	total   int
	closed  bool
	closing chan struct{}
}

type waitQueue struct {
	resource string
	waiters  *list.List // of *waiter, head first
	stops    []func()
	// watched is the set of nodes (bit i: node i) whose Watch is in place;
	// resubscribed is when the head last tried to add the missing ones.
	watched      uint64
	resubscribed time.Time
	ready        chan struct{} // closed once the subscriptions are in place
	// freed is the set of nodes (bit i: node i) announced free since the
	// current head's last attempt began (or since it became the head);
	// woken records that it reached a quorum and the head was woken for it.
	freed uint64
	woken bool
	// holderExpires is when the current holder's lock runs out, as far as
	// this queue knows: the answer to a waiter whose wait runs out.
	holderExpires time.Time
	// yieldUntil: this replica released a lock that a waiter on another
	// replica wanted; until then the head does not try at all, so that the
	// other replica's waiter gets it.
	yieldUntil time.Time
}

type waiter struct {
	wake chan struct{} // buffered(1): a pending wake-up is never lost
	req  AcquireRequest
	// Guarded by waitRoom.mu:
	// attempting: the waiter's own acquisition round is under way.
	// claimed: a Release is handing the lock to this waiter (see claim).
	// handed: the lease handed over to it, not yet taken by the waiter.
	// served: it has a lease, by its own attempt or a hand-off, and is
	// about to leave; a Release must not claim it.
	// missed: it was due to try while claimed; deliver makes it try then.
	// gone: the waiter has left the queue.
	attempting, claimed, served, missed, gone bool
	handed                                    *Lease
	// released is set when a release was announced (or the head before this
	// waiter left without the lock): the lock may be free, try now.
	released bool
	// retryAt is when to try again without an announcement: the holder's
	// expiry, or the end of a pause after a split vote.
	retryAt time.Time
}

func newWaitRoom(r *Redlock) *waitRoom {
	wr := &waitRoom{r: r, queues: map[string]*waitQueue{}, yields: map[string]time.Time{}, closing: make(chan struct{})}
	for i, n := range r.nodes {
		if _, ok := n.(Watcher); ok {
			wr.watchers |= 1 << i
		}
	}
	return wr
}

func (w *waiter) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// join adds a waiter at the tail of the resource's queue, creating the queue
// (and its subscriptions) when it is the first.
func (wr *waitRoom) join(ctx context.Context, req AcquireRequest) (*waitQueue, *list.Element, error) {
	resource := req.Resource
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
		q = &waitQueue{resource: resource, waiters: list.New(), ready: make(chan struct{}), yieldUntil: wr.yields[resource]}
		delete(wr.yields, resource)
		wr.queues[resource] = q
	}
	el := q.waiters.PushBack(&waiter{wake: make(chan struct{}, 1), req: req})
	wr.total++
	wr.mu.Unlock()

	if first {
		wr.mu.Lock()
		q.resubscribed = time.Now()
		wr.mu.Unlock()
		wr.subscribe(ctx, q, wr.watchers)
		close(q.ready)
	} else {
		select {
		case <-q.ready:
		case <-ctx.Done():
		}
	}
	return q, el, nil
}

// subscribe watches resource on the Watcher nodes in mask, in parallel,
// each bounded by NodeTimeout but not by the caller's context: the queue
// outlives the waiter that created it. A node that cannot subscribe is left
// out of q.watched; the head tries it again before a later attempt (see
// resubscribe). Until then its releases are learnt from the other nodes'
// announcements or from the TTL.
func (wr *waitRoom) subscribe(ctx context.Context, q *waitQueue, mask uint64) {
	ctx = context.WithoutCancel(ctx)
	var wg sync.WaitGroup
	for i, n := range wr.r.nodes {
		wn, ok := n.(Watcher)
		if !ok || mask&(1<<i) == 0 {
			continue
		}
		notify := func() { wr.announce(q.resource, 1<<i) }
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, wr.r.opt.NodeTimeout)
			defer cancel()
			stop, err := wn.Watch(cctx, q.resource, notify)
			if err != nil {
				return
			}
			wr.mu.Lock()
			q.stops = append(q.stops, stop)
			q.watched |= 1 << i
			wr.mu.Unlock()
		})
	}
	wg.Wait()
}

// resubscribeEvery bounds how often a head retries Watch on nodes where it
// failed, so that a node that is down does not slow every attempt.
const resubscribeEvery = time.Second

// resubscribeAt returns when the head should next retry Watch on the nodes
// missing from q.watched, or the zero time when none is missing. While one
// is, the head also wakes then to try again, since a release it would have
// announced may have been missed: a deaf queue polls, once per
// resubscribeEvery, until it hears again. wr.mu must be held.
func (wr *waitRoom) resubscribeAt(q *waitQueue) time.Time {
	if wr.watchers&^q.watched == 0 {
		return time.Time{}
	}
	return q.resubscribed.Add(resubscribeEvery)
}

// resubscribe retries Watch on the Watcher nodes missing from q.watched, at
// most once per resubscribeEvery. The head calls it before an attempt, so a
// subscription it adds is in place before the attempt, as at join.
func (wr *waitRoom) resubscribe(ctx context.Context, q *waitQueue) {
	now := time.Now()
	wr.mu.Lock()
	at := wr.resubscribeAt(q)
	due := !at.IsZero() && !now.Before(at)
	if due {
		q.resubscribed = now
	}
	missing := wr.watchers &^ q.watched
	wr.mu.Unlock()
	if due {
		wr.subscribe(ctx, q, missing)
	}
}

// leave removes a waiter. If it was the head, the next waiter becomes the
// head and is woken to try (or, when the leaver just took the lock, learns
// that lock's expiry as hint). The last waiter out ends the subscriptions.
func (wr *waitRoom) leave(q *waitQueue, el *list.Element, hint time.Time) {
	wr.mu.Lock()
	me := el.Value.(*waiter)
	me.gone = true
	// A lease handed over as the waiter gave up: nobody will use it.
	abandoned := me.handed
	me.handed = nil
	wasHead := q.waiters.Front() == el
	q.waiters.Remove(el)
	wr.total--
	var stops []func()
	if q.waiters.Len() == 0 {
		delete(wr.queues, q.resource)
		stops = q.stops
		q.stops = nil
	} else if wasHead {
		// A new head: what was announced free so far has been seen (and
		// acted on) by the old one; the new head counts afresh.
		q.freed, q.woken = 0, false
		next := q.waiters.Front().Value.(*waiter)
		if hint.IsZero() {
			next.released = true
		} else {
			next.retryAt = hint
			q.holderExpires = hint
		}
		next.poke()
	}
	wr.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
	if abandoned != nil {
		wr.r.abandon(abandoned)
	}
}

// claim picks the head of resource's queue for a hand-off by the Release of
// lease, or returns nil when there is nobody to hand the lock to: no queue,
// the room is closed, the head is trying by itself, already has a lease or
// one coming, or asks with the releasing lease. A claimed head does not try
// by itself until deliver answers.
func (wr *waitRoom) claim(resource, lease string) *waiter {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	q := wr.queues[resource]
	if wr.closed || q == nil || q.waiters.Len() == 0 {
		return nil
	}
	w := q.waiters.Front().Value.(*waiter)
	if w.attempting || w.claimed || w.served || w.gone || w.handed != nil || w.req.LeaseID == lease {
		return nil
	}
	w.claimed = true
	return w
}

// yield makes this replica's waiters on resource let a waiter on another
// replica try first: for yieldFor, the head does not try on a release
// announcement, and a new Acquire joins the queue instead of trying at once
// (which, right after its own release, would win every time).
func (wr *waitRoom) yield(resource string) {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	wr.yieldLocked(resource)
}

func (wr *waitRoom) yieldLocked(resource string) {
	now := wr.r.opt.Clock.Now()
	until := now.Add(yieldFor)
	if q := wr.queues[resource]; q != nil {
		q.yieldUntil = until
		return
	}
	if len(wr.yields) >= 1024 {
		for res, t := range wr.yields {
			if !now.Before(t) {
				delete(wr.yields, res)
			}
		}
	}
	wr.yields[resource] = until
}

// yieldFor is how long this replica's waiters hold back after it released a
// lock that a waiter on another replica wanted: enough, on a LAN, for that
// replica to hear the release and acquire.
const yieldFor = 3 * time.Millisecond

// deliver ends a hand-off to w: it gives w the lease, or, when the
// hand-off failed (err), wakes w to try by itself if the lock was freed or w
// was due to try meanwhile (otherwise nothing changed, and w goes on waiting
// as before). If w has left, the lease is returned: nobody will use it, and
// the caller must release it.
func (wr *waitRoom) deliver(w *waiter, lease *Lease, err error, freed bool) (abandoned *Lease) {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	w.claimed = false
	missed := w.missed
	w.missed = false
	switch {
	case err == nil && w.gone:
		return lease
	case err == nil:
		w.handed, w.served = lease, true
	case missed:
		// It was due to try (a retry time, an announcement) while it
		// waited for the hand-off: it tries now, split pause or not.
		w.retryAt = wr.r.opt.Clock.Now()
	case freed:
		w.released = true
	}
	w.poke()
	return nil
}

// announce records that the nodes in mask released the lock on resource,
// and wakes the queue's head once the nodes freed since its last attempt
// began make a quorum. Only the nodes count, so announcements of one release
// by several nodes, or of several releases, add up without counting a node
// twice.
func (wr *waitRoom) announce(resource string, mask uint64) {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	q := wr.queues[resource]
	if q == nil {
		return
	}
	q.freed |= mask
	if q.woken || bits.OnesCount64(q.freed) < wr.r.quorum {
		return
	}
	q.woken = true
	if front := q.waiters.Front(); front != nil {
		w := front.Value.(*waiter)
		w.released = true
		w.poke()
	}
}

// startAttempt prepares the head's own attempt: the subscriptions it lacks
// are retried first, and what was announced so far is forgotten (the attempt
// sees it). It returns false when a hand-off to the head is under way or
// done (the head waits for it instead), while the queue yields to another
// replica (the head tries when that ends), or once the wait is over
// (deadline), which joining the queue or retrying the subscriptions can
// take: no attempt starts past it.
func (wr *waitRoom) startAttempt(ctx context.Context, q *waitQueue, me *waiter, now, deadline time.Time) bool {
	over := func() bool { return !wr.r.opt.Clock.Now().Before(deadline) }
	if over() {
		return false
	}
	wr.resubscribe(ctx, q)
	if over() {
		return false
	}
	wr.mu.Lock()
	defer wr.mu.Unlock()
	if me.claimed || me.handed != nil {
		// deliver pokes it, and makes it try if the hand-off fails; until
		// then there is nothing to try for.
		me.retryAt, me.missed = time.Time{}, true
		return false
	}
	if now.Before(q.yieldUntil) {
		// Another replica's waiter goes first; try once it had time.
		me.retryAt = q.yieldUntil
		return false
	}
	me.attempting, me.released = true, false
	q.freed, q.woken = 0, false
	return true
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

	wr.mu.Lock()
	_, busy := wr.queues[req.Resource]
	closed := wr.closed
	// Right after this replica released a lock a waiter elsewhere wanted,
	// trying at once would win every time: join, and let the other go first.
	yielding := clock.Now().Before(wr.yields[req.Resource])
	wr.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	var taken *TakenError
	var triedAt time.Time
	if busy && !req.minted {
		// Others wait here, so this request will not try ahead of them;
		// but its lease may already hold the lock (a retry whose answer was
		// lost): then refreshing it is the answer, not a place in the queue.
		lease, err := wr.r.Extend(ctx, ExtendRequest{Resource: req.Resource, LeaseID: req.LeaseID, TTL: req.TTL})
		switch {
		case err == nil:
			lease.Owner = req.Owner
			return lease, nil
		case !errors.Is(err, ErrNotHeld) && !errors.Is(err, ErrHeldByOther):
			return nil, err
		}
	}
	if !busy && !yielding {
		// Nobody waits here: try once before paying for a subscription.
		lease, err := wr.r.tryAcquire(ctx, req)
		if !errors.As(err, &taken) {
			return wr.r.handOver(ctx, lease, err)
		}
		triedAt = clock.Now()
	}

	q, el, err := wr.join(ctx, req)
	if err != nil {
		return nil, err
	}
	if taken != nil {
		// What the try before joining learnt of the holder, for a new
		// queue: a wait that ends before its first attempt in the queue
		// still says when to come back.
		wr.mu.Lock()
		if q.holderExpires.IsZero() {
			q.holderExpires = triedAt.Add(taken.RetryAfter)
		}
		wr.mu.Unlock()
	}
	me := el.Value.(*waiter)
	var hint time.Time
	defer func() { wr.leave(q, el, hint) }()

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	splits := 0 // failed attempts in a row that some nodes granted
	for attempt := true; ; {
		if attempt && wr.isHead(q, el) && wr.startAttempt(ctx, q, me, clock.Now(), deadline) {
			lease, err := wr.r.tryAcquire(ctx, req)
			wr.mu.Lock()
			me.attempting, me.served = false, err == nil
			wr.mu.Unlock()
			if !errors.As(err, &taken) {
				lease, err = wr.r.handOver(ctx, lease, err)
				if err == nil {
					// The next waiter sleeps until this lease expires or is
					// released; an abandoned lease is already released.
					hint = lease.Expires
				}
				return lease, err
			}
			now := clock.Now()
			wr.mu.Lock()
			wait := taken.RetryAfter
			if wait <= 0 {
				wait = wr.r.opt.MinTTL
			}
			q.holderExpires = now.Add(wait)
			// A release announced during the attempt leaves released set
			// and a wake-up pending: the next round tries again.
			me.retryAt = q.holderExpires.Add(time.Millisecond)
			if taken.granted > 0 {
				splits++
				me.retryAt = now.Add(splitPause(splits))
			} else {
				splits = 0
			}
			wr.mu.Unlock()
		}
		wr.mu.Lock()
		if lease := me.handed; lease != nil {
			me.handed = nil
			wr.mu.Unlock()
			lease, err := wr.r.handOver(ctx, lease, nil)
			if err == nil {
				hint = lease.Expires
			}
			return lease, err
		}
		now := clock.Now()
		retryAt, expires := me.retryAt, q.holderExpires
		if q.waiters.Front() == el {
			if at := wr.resubscribeAt(q); !at.IsZero() && (retryAt.IsZero() || at.Before(retryAt)) {
				retryAt = at
			}
		}
		wr.mu.Unlock()
		if !now.Before(deadline) {
			return nil, &TakenError{Resource: req.Resource, RetryAfter: max(0, expires.Sub(now))}
		}
		sleep := deadline.Sub(now)
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
		// Try when a release was announced (after a split vote, once the
		// random pause is over) or the retry time came; otherwise (a new
		// expiry hint, or the deadline) just look again.
		wr.mu.Lock()
		due := !me.retryAt.IsZero() && !clock.Now().Before(me.retryAt)
		if at := wr.resubscribeAt(q); !at.IsZero() && !time.Now().Before(at) && q.waiters.Front() == el {
			due = true
		}
		attempt = due || (me.released && splits == 0)
		if attempt {
			me.released = false
		}
		wr.mu.Unlock()
	}
}

// splitPause is how long a head waits after its n-th failed attempt in a row
// that some nodes granted: 2 ms doubled per failure up to about 1 s, with
// ±50 % jitter so that competing replicas fall out of step.
func splitPause(n int) time.Duration {
	base := 2 * time.Millisecond << min(n-1, 9)
	return base/2 + rand.N(base)
}

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
		go r.retryUndo(l.Resource, l.ID, all, l.Validity)
	}
}
