package waitroom

import (
	"container/list"
	"context"
	"math/bits"
	"math/rand/v2"
	"sync"
	"time"
)

// Clock tells time and sets timers: the Redlock's clock, so that a test can
// drive every wait with a fake one.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed on this
	// clock, unless stop is called first.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// Watch subscribes to the releases of resource on one node: notify is
// called for each until stop is called (lockcore.Watcher.Watch).
type Watch func(ctx context.Context, resource string, notify func()) (stop func(), err error)

// Config is what a Room is built with.
type Config[L any] struct {
	Clock  Clock
	Quorum int
	// Watches holds, per node, how to subscribe to its releases; nil for a
	// node that announces nothing.
	Watches []Watch
	// WatchTimeout bounds each Watch call.
	WatchTimeout time.Duration
	// MaxWaiters bounds the waiters in the room, over every resource.
	MaxWaiters int
	// Abandon releases a lease that was handed to a waiter who left before
	// taking it: nobody will use it.
	Abandon func(L)
}

// Result is what one attempt (Request.Try) taught the room.
type Result struct {
	// Done: the wait is over, with a lock or with an error other than a
	// lock held by another lease; the caller keeps the answer.
	Done bool
	// Expires (Done with a lock) is when that lock runs out: the next
	// head sleeps until then unless a release wakes it.
	Expires time.Time
	// FreeIn (not Done) is how long until the holder's lock is free on a
	// quorum: the head tries again then, unless something wakes it first.
	FreeIn time.Duration
	// Split (not Done): some nodes granted the attempt, but not a quorum.
	Split bool
}

// Request is one waiting acquisition.
type Request[Q any] struct {
	Resource string
	// Lease is the request's lease id: a Release by the same lease is not
	// handed to it.
	Lease string
	Wait  time.Duration
	// Try makes one acquisition round.
	Try func(ctx context.Context) Result
	// Refresh, when not nil, is asked before the request joins a queue
	// without trying (behind others, or while the replica yields): it
	// reports true when the wait is over at once (the lease already holds
	// the lock: an idempotent retry; or it failed). Nil when the lease is
	// new and can hold nothing.
	Refresh func(ctx context.Context) bool
	// Data is kept with the waiter and given back by Claim: what a
	// hand-off to it needs.
	Data Q
}

// End says how a wait ended.
type End uint8

// How a wait ends.
const (
	Tried    End = iota // Try or Refresh ended it; the caller has the answer
	Handed              // a hand-off gave it Outcome.Lease
	RanOut              // the wait ran out; Outcome.FreeIn says when to come back
	Canceled            // the context ended
	Closed              // the room closed
	TooMany             // the room is full
)

// Outcome is how a wait ended.
type Outcome[L any] struct {
	End    End
	Lease  L             // Handed
	FreeIn time.Duration // RanOut: the holder's time left, as last learnt
	// Queued is how long the request stood in its queue, from joining it
	// to the end of the wait, by Config.Clock; 0 when it never joined (a
	// first try or a refresh ended the wait, or the room refused it).
	Queued time.Duration
}

// Room is one replica's waiting room: the queues of waiters, per resource.
// It is safe for concurrent use.
type Room[Q, L any] struct {
	cfg      Config[L]
	watchers uint64 // the nodes with a Watch (bit i: node i)
	mu       sync.Mutex
	queues   map[string]*queue[Q, L]
	// yields holds, per resource without a queue, until when this
	// replica's waiters let another replica's try first (see Yield).
	yields map[string]time.Time
	total  int
	closed bool
}

type queue[Q, L any] struct {
	resource string
	waiters  *list.List // of *waiter, head first
	stops    []func()
	ready    chan struct{} // closed once the first subscriptions are in place
	// watched: the nodes whose Watch is in place; resubscribed: when the
	// head last tried the missing ones.
	watched      uint64
	resubscribed time.Time
	// freed: the nodes announced free since the head's last attempt began
	// (or since it became the head).
	freed uint64
	// holderExpires is when the holder's lock runs out, as last learnt:
	// the answer to a waiter whose wait runs out.
	holderExpires time.Time
	yieldUntil    time.Time
}

type waiter[Q, L any] struct {
	q        *queue[Q, L]
	el       *list.Element
	req      Request[Q]
	deadline time.Time
	wake     chan struct{} // buffered(1): a pending wake-up is never lost
	// Guarded by Room.mu:
	state   state
	woken   bool
	poll    bool
	split   bool
	splits  int // failed attempts in a row that some nodes granted
	retryAt time.Time
	lease   L         // handed
	expires time.Time // when lease runs out
}

// New returns an empty room.
func New[Q, L any](cfg Config[L]) *Room[Q, L] {
	r := &Room[Q, L]{cfg: cfg, queues: map[string]*queue[Q, L]{}, yields: map[string]time.Time{}}
	for i, w := range cfg.Watches {
		if w != nil {
			r.watchers |= 1 << i
		}
	}
	return r
}

func (w *waiter[Q, L]) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Wait waits in the resource's queue until the request gets the lock, its
// wait runs out, ctx ends or the room closes.
//
// A request that finds nobody waiting on this replica, and the replica not
// yielding, tries once before it joins: a free lock needs no subscription.
// One that finds a queue joins its tail without trying, so that the
// releaser of a lock others wait for cannot take it back ahead of them;
// but it asks Refresh first, since its lease may already hold the lock. So
// does one that joins without trying because the replica yields.
func (r *Room[Q, L]) Wait(ctx context.Context, req Request[Q]) Outcome[L] {
	deadline := r.cfg.Clock.Now().Add(req.Wait)
	r.mu.Lock()
	_, busy := r.queues[req.Resource]
	closed := r.closed
	yielding := r.cfg.Clock.Now().Before(r.yields[req.Resource])
	r.mu.Unlock()
	if closed {
		return Outcome[L]{End: Closed}
	}
	if (busy || yielding) && req.Refresh != nil && req.Refresh(ctx) {
		return Outcome[L]{End: Tried}
	}
	var holderExpires time.Time
	if !busy && !yielding {
		res := req.Try(ctx)
		if res.Done {
			return Outcome[L]{End: Tried}
		}
		holderExpires = r.cfg.Clock.Now().Add(res.FreeIn)
	}
	joined := r.cfg.Clock.Now()
	w, end := r.join(ctx, req, deadline, holderExpires)
	if end != Tried {
		return Outcome[L]{End: end}
	}
	out := r.serve(ctx, w)
	out.Queued = r.cfg.Clock.Now().Sub(joined)
	return out
}

// join adds a waiter at the tail of its queue, creating the queue (and
// subscribing to the resource) when it is the first. The subscriptions are
// in place before the waiter's first attempt in the queue, so a release
// after the attempt that sent it here is not missed. It returns Tried when
// the waiter joined, or why it could not (Closed, TooMany).
func (r *Room[Q, L]) join(ctx context.Context, req Request[Q], deadline, holderExpires time.Time) (*waiter[Q, L], End) {
	r.mu.Lock()
	switch {
	case r.closed:
		r.mu.Unlock()
		return nil, Closed
	case r.total >= r.cfg.MaxWaiters:
		r.mu.Unlock()
		return nil, TooMany
	}
	q := r.queues[req.Resource]
	first := q == nil
	if first {
		q = &queue[Q, L]{resource: req.Resource, waiters: list.New(), ready: make(chan struct{}),
			yieldUntil: r.yields[req.Resource], resubscribed: r.cfg.Clock.Now()}
		delete(r.yields, req.Resource)
		r.queues[req.Resource] = q
	}
	w := &waiter[Q, L]{q: q, req: req, deadline: deadline, wake: make(chan struct{}, 1)}
	if first {
		w.state, w.woken = head, true // a new queue's head tries at once
	}
	w.el = q.waiters.PushBack(w)
	if q.holderExpires.IsZero() {
		q.holderExpires = holderExpires
	}
	r.total++
	r.mu.Unlock()

	if first {
		r.subscribe(ctx, q, r.watchers)
		close(q.ready)
	} else {
		select {
		case <-q.ready:
		case <-ctx.Done():
		}
	}
	return w, Tried
}

// serve runs one waiter: it asks decide what to do, does it, and asks
// again, until the wait is over.
func (r *Room[Q, L]) serve(ctx context.Context, w *waiter[Q, L]) Outcome[L] {
	var hint time.Time // when the lock this waiter got runs out
	defer func() { r.leave(w, hint) }()
	for {
		a, step := r.next(w)
		switch a.verb {
		case take:
			hint = step.expires
			return Outcome[L]{End: Handed, Lease: step.lease}
		case shut:
			return Outcome[L]{End: Closed}
		case giveUp:
			return Outcome[L]{End: RanOut, FreeIn: step.freeIn}
		case resubscribe:
			r.subscribe(ctx, w.q, step.missing)
		case attempt:
			res := w.req.Try(ctx)
			r.attempted(w, res)
			if res.Done {
				hint = res.Expires
				return Outcome[L]{End: Tried}
			}
		case sleep:
			if !r.sleep(ctx, w, a.until) {
				return Outcome[L]{End: Canceled}
			}
		}
	}
}

// step is what next hands the I/O loop along with the action.
type step[L any] struct {
	lease   L             // take
	expires time.Time     // take: when lease runs out
	freeIn  time.Duration // giveUp
	missing uint64        // resubscribe
}

// next decides the waiter's next action and records what it implies.
func (r *Room[Q, L]) next(w *waiter[Q, L]) (action, step[L]) {
	r.mu.Lock()
	defer r.mu.Unlock()
	q, now := w.q, r.cfg.Clock.Now()
	a := decide(r.view(w, now))
	var s step[L]
	switch a.verb {
	case take:
		s.lease, s.expires, w.state = w.lease, w.expires, served
		var zero L
		w.lease = zero
	case giveUp:
		s.freeIn = max(0, q.holderExpires.Sub(now))
	case resubscribe:
		s.missing = r.watchers &^ q.watched
		q.resubscribed, w.poll = now, true
	case attempt:
		// What was announced so far, the attempt sees.
		w.state, w.woken, w.poll, q.freed = attempting, false, false, 0
	}
	return a, s
}

// view gathers what decide looks at; r.mu must be held.
func (r *Room[Q, L]) view(w *waiter[Q, L], now time.Time) view {
	q := w.q
	v := view{state: w.state, now: now, deadline: w.deadline, closed: r.closed,
		quorum: r.cfg.Quorum, woken: w.woken, retryAt: w.retryAt, split: w.split, poll: w.poll,
		yieldUntil: q.yieldUntil}
	if w.state == head {
		v.freed = bits.OnesCount64(q.freed)
		if r.watchers&^q.watched != 0 {
			v.resubscribeAt = q.resubscribed.Add(ResubscribeEvery)
		}
	}
	return v
}

// attempted records the result of the head's own attempt.
func (r *Room[Q, L]) attempted(w *waiter[Q, L], res Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if res.Done {
		w.state = served
		return
	}
	w.state = head
	now := r.cfg.Clock.Now()
	w.q.holderExpires = now.Add(res.FreeIn)
	w.split = res.Split
	if res.Split {
		w.splits++
		w.retryAt = now.Add(SplitPause(w.splits))
	} else {
		w.splits = 0
		w.retryAt = w.q.holderExpires.Add(time.Millisecond)
	}
}

// sleep waits until the clock reaches until, something wakes w, or ctx
// ends (false).
func (r *Room[Q, L]) sleep(ctx context.Context, w *waiter[Q, L], until time.Time) bool {
	stop := r.cfg.Clock.AfterFunc(until.Sub(r.cfg.Clock.Now()), w.poke)
	defer stop()
	select {
	case <-w.wake:
		return true
	case <-ctx.Done():
		return false
	}
}

// leave removes a waiter. If it was the head, the next waiter becomes the
// head: it tries at once, or, when the leaver got the lock (hint is when
// that lock runs out), sleeps until then unless a release wakes it. The
// last waiter out ends the subscriptions.
func (r *Room[Q, L]) leave(w *waiter[Q, L], hint time.Time) {
	r.mu.Lock()
	q := w.q
	wasHead := q.waiters.Front() == w.el
	abandoned, wasHanded := w.lease, w.state == handed
	var zero L
	w.state, w.lease = gone, zero
	q.waiters.Remove(w.el)
	r.total--
	var stops []func()
	switch {
	case q.waiters.Len() == 0:
		delete(r.queues, q.resource)
		stops, q.stops = q.stops, nil
	case wasHead:
		// What was announced free so far, the old head has seen.
		q.freed = 0
		next := q.waiters.Front().Value.(*waiter[Q, L])
		next.state, next.woken, next.retryAt = head, hint.IsZero(), hint
		if !hint.IsZero() {
			q.holderExpires = hint
		}
		next.poke()
	}
	r.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
	if wasHanded {
		r.cfg.Abandon(abandoned)
	}
}

// subscribe watches the queue's resource on the nodes in mask, in
// parallel, each bounded by WatchTimeout but not by the caller's context:
// the queue outlives the waiter that subscribes. A node that cannot
// subscribe is left out of q.watched; the head tries it again later (see
// view.resubscribeAt).
func (r *Room[Q, L]) subscribe(ctx context.Context, q *queue[Q, L], mask uint64) {
	ctx = context.WithoutCancel(ctx)
	var wg sync.WaitGroup
	for i, watch := range r.cfg.Watches {
		if watch == nil || mask&(1<<i) == 0 {
			continue
		}
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, r.cfg.WatchTimeout)
			defer cancel()
			stop, err := watch(cctx, q.resource, func() { r.Announce(q.resource, 1<<i) })
			if err != nil {
				return
			}
			r.mu.Lock()
			q.stops = append(q.stops, stop)
			q.watched |= 1 << i
			r.mu.Unlock()
		})
	}
	wg.Wait()
}

// Announce records that the nodes in mask released the lock on resource,
// and wakes the queue's head to decide whether that frees the lock. Only
// which nodes count, not which release: announcements of one release by
// several nodes, or of several releases, add up without counting a node
// twice.
func (r *Room[Q, L]) Announce(resource string, mask uint64) {
	if mask == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.queues[resource]
	if q == nil {
		return
	}
	q.freed |= mask
	q.waiters.Front().Value.(*waiter[Q, L]).poke()
}

// Claim picks the head of resource's queue for a hand-off by the Release
// of lease, or returns nil when there is nobody to hand the lock to: no
// queue, the room is closed, the head is trying by itself, has a lease or
// one coming, or asks with the releasing lease. A claimed head does not try
// by itself until Deliver.
func (r *Room[Q, L]) Claim(resource, lease string) *Claim[Q, L] {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.queues[resource]
	if r.closed || q == nil {
		return nil
	}
	w := q.waiters.Front().Value.(*waiter[Q, L])
	if w.state != head || w.req.Lease == lease {
		return nil
	}
	w.state = claimed
	return &Claim[Q, L]{w: w}
}

// Claim is a hand-off under way to a queue's head.
type Claim[Q, L any] struct{ w *waiter[Q, L] }

// Data returns the claimed waiter's Request.Data.
func (c *Claim[Q, L]) Data() Q { return c.w.req.Data }

// Deliver ends a hand-off. When ok, the waiter gets lease, which runs out
// at expires; if it has left meanwhile, the lease is abandoned. Otherwise
// it is the head again and decides anew; freed says that the hand-off
// released nodes without passing the lock on, so it tries.
func (r *Room[Q, L]) Deliver(c *Claim[Q, L], lease L, expires time.Time, ok, freed bool) {
	w := c.w
	r.mu.Lock()
	switch {
	case w.state == gone && ok:
		r.mu.Unlock()
		r.cfg.Abandon(lease)
		return
	case w.state != claimed:
	case ok:
		w.state, w.lease, w.expires = handed, lease, expires
	default:
		w.state = head
		w.woken = w.woken || freed
	}
	r.mu.Unlock()
	w.poke()
}

// Yield makes this replica's waiters on resource let a waiter on another
// replica try first: for YieldFor, the head does not try, and a new Wait
// joins the queue instead of trying at once (which, right after its own
// release, would win every time).
func (r *Room[Q, L]) Yield(resource string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.cfg.Clock.Now()
	until := now.Add(YieldFor)
	if q := r.queues[resource]; q != nil {
		q.yieldUntil = until
		return
	}
	if len(r.yields) >= 1024 {
		for res, t := range r.yields {
			if !now.Before(t) {
				delete(r.yields, res)
			}
		}
	}
	r.yields[resource] = until
}

// Waiting returns how many waiters are in the room.
func (r *Room[Q, L]) Waiting() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}

// Close ends every wait with Closed, and makes later ones end so at once.
func (r *Room[Q, L]) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	for _, q := range r.queues {
		for e := q.waiters.Front(); e != nil; e = e.Next() {
			e.Value.(*waiter[Q, L]).poke()
		}
	}
}

// ResubscribeEvery bounds how often a head retries Watch on nodes where it
// failed, so that a node that is down does not slow every attempt.
const ResubscribeEvery = time.Second

// YieldFor is how long this replica's waiters hold back after it released
// a lock that a waiter on another replica wanted: enough, on a LAN, for
// that replica to hear the release and acquire.
const YieldFor = 3 * time.Millisecond

// SplitPause is how long a head waits after its n-th failed attempt in a
// row that some nodes granted: 2 ms doubled per failure up to about 1 s,
// with ±50 % jitter so that competing replicas fall out of step.
func SplitPause(n int) time.Duration {
	base := 2 * time.Millisecond << min(n-1, 9)
	return base/2 + rand.N(base)
}
