package watch

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockgate/lockgate/lockcore"
)

// Kind names what happened to a lock.
type Kind string

// Event kinds.
const (
	// State is the first event of every subscription: the lock as the
	// replica knows it when the subscription begins (Held false and Token
	// 0 when nothing holds it).
	State Kind = "state"
	// Acquired: a new holder, with its token, owner, TTL and expiry.
	Acquired Kind = "acquired"
	// Released: the holder with Token released the lock.
	Released Kind = "released"
	// Expired: the lock held with Token ran out of TTL.
	Expired Kind = "expired"
	// ForceReleased: this replica broke the lock held with Token.
	ForceReleased Kind = "force-released"
)

// Event is one change of a lock's holder, or a subscription's first State.
// It never carries a lease id.
type Event struct {
	Kind     Kind
	Resource string
	// Held is true for Acquired, and for a State of a held lock.
	Held bool
	// Token is the fencing token of the holder that came (Acquired, State)
	// or went (Released, Expired, ForceReleased); 0 in a State of a free
	// lock.
	Token   int64
	Owner   string
	TTL     time.Duration // Acquired and held State
	Expires time.Time     // Acquired and held State: unless extended
}

// Source is what a Hub needs of the lock service (*lockcore.Redlock).
type Source interface {
	Inspect(ctx context.Context, resource string) (*lockcore.LockInfo, error)
	WatchReleases(ctx context.Context, resource string, notify func()) (stop func(), err error)
}

// Options tune a Hub. A nil *Options means the defaults.
type Options struct {
	// MaxWatchers bounds the subscriptions open at once on this Hub (long
	// polls and streams together); past it Subscribe fails with
	// ErrTooManyWatchers. Default 1000.
	MaxWatchers int
	// Buffer is how many events a subscription may have unread; one more
	// drops it (ErrSlowReader). Default 16.
	Buffer int
	// Poll is how long a watched lock goes without being read again when
	// no release is announced and no TTL runs out: it bounds how late an
	// acquisition on another replica is seen. Default 1s.
	Poll time.Duration
	// ReadTimeout bounds each read of a lock and each subscription to the
	// nodes' release announcements. Default 2s.
	ReadTimeout time.Duration
}

func (o *Options) withDefaults() Options {
	var d Options
	if o != nil {
		d = *o
	}
	if d.MaxWatchers <= 0 {
		d.MaxWatchers = 1000
	}
	if d.Buffer <= 0 {
		d.Buffer = 16
	}
	if d.Poll <= 0 {
		d.Poll = time.Second
	}
	if d.ReadTimeout <= 0 {
		d.ReadTimeout = 2 * time.Second
	}
	return d
}

// Errors of Subscribe and of ended subscriptions.
var (
	// ErrTooManyWatchers: the Hub has Options.MaxWatchers subscriptions.
	ErrTooManyWatchers = errors.New("watch: this replica has its maximum number of watchers")
	// ErrSlowReader: the subscription had Options.Buffer events unread
	// when another came; it was ended rather than buffer without bound.
	ErrSlowReader = errors.New("watch: the watcher did not keep up and was dropped")
	// ErrClosed: the Hub was closed.
	ErrClosed = errors.New("watch: closed")
)

// Hub follows the locks that its subscriptions watch, one tracker per
// resource however many watch it, and tells each subscription what changes.
// It is safe for concurrent use.
type Hub struct {
	src Source
	opt Options

	mu       sync.Mutex
	trackers map[string]*tracker
	prefixes map[*PrefixSubscription]struct{}
	closed   bool
	wg       sync.WaitGroup

	watchers atomic.Int64
	sent     atomic.Int64
	dropped  atomic.Int64
}

// New returns a Hub reading src.
func New(src Source, opts *Options) *Hub {
	return &Hub{src: src, opt: opts.withDefaults(), trackers: map[string]*tracker{}, prefixes: map[*PrefixSubscription]struct{}{}}
}

// Watchers returns the number of open subscriptions.
func (h *Hub) Watchers() int { return int(h.watchers.Load()) }

// EventsSent returns the number of events handed to subscriptions so far.
func (h *Hub) EventsSent() int64 { return h.sent.Load() }

// Dropped returns the number of subscriptions ended as slow readers so far.
func (h *Hub) Dropped() int64 { return h.dropped.Load() }

// Close ends every subscription (ErrClosed) and waits for the Hub's
// goroutines.
func (h *Hub) Close() {
	h.mu.Lock()
	h.closed = true
	ts := h.trackers
	h.trackers = map[string]*tracker{}
	for p := range h.prefixes {
		p.sink.end(ErrClosed)
		p.cancel()
	}
	h.mu.Unlock()
	for _, t := range ts {
		t.cancel()
		t.endAll(ErrClosed)
	}
	h.wg.Wait()
}

// Subscription is one watcher of one resource. Its events arrive on C,
// State first; C is closed when the subscription ends other than by Close,
// and Err then says why.
type Subscription struct {
	// C delivers the events, in the order they happened.
	C <-chan Event

	sink   *sink
	h      *Hub
	t      *tracker
	primed bool // got its State; t.mu
	ended  bool // left t; t.mu
	// first, if set, replaces the State event (false: none is sent): a
	// prefix subscription's view of a resource it found late.
	first  func(Event) (Event, bool)
	closed bool // h.mu
}

// sink is where subscriptions deliver: one channel, closed once with the
// reason. A prefix subscription's resources share one.
type sink struct {
	mu    sync.Mutex
	ch    chan Event
	ended bool
	err   error
}

func newSink(n int) *sink { return &sink{ch: make(chan Event, n)} }

// put delivers ev; when the buffer is full it ends the sink as a slow
// reader instead. It reports whether ev was delivered, and whether this
// call ended the sink.
func (k *sink) put(ev Event) (ok, dropped bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ended {
		return false, false
	}
	select {
	case k.ch <- ev:
		return true, false
	default:
		k.ended, k.err = true, ErrSlowReader
		close(k.ch)
		return false, true
	}
}

// end closes the sink with err, unless it has ended.
func (k *sink) end(err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.ended {
		k.ended, k.err = true, err
		close(k.ch)
	}
}

func (k *sink) reason() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.err
}

// Subscribe starts watching resource. The first event is its State once
// the replica has read it.
//
// Errors: ErrTooManyWatchers; ErrClosed.
func (h *Hub) Subscribe(resource string) (*Subscription, error) {
	return h.subscribe(resource, newSink(h.opt.Buffer), nil)
}

// subscribe starts a subscription of resource that delivers to k.
func (h *Hub) subscribe(resource string, k *sink, first func(Event) (Event, bool)) (*Subscription, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	if h.watchers.Load() >= int64(h.opt.MaxWatchers) {
		return nil, ErrTooManyWatchers
	}
	h.watchers.Add(1)
	t := h.trackers[resource]
	if t == nil {
		t = h.newTracker(resource)
		h.trackers[resource] = t
	}
	s := &Subscription{C: k.ch, sink: k, h: h, t: t, first: first}
	t.mu.Lock()
	t.subs[s] = struct{}{}
	if t.st.known {
		t.prime(s)
	}
	t.mu.Unlock()
	return s, nil
}

// Err says why C was closed: ErrSlowReader or ErrClosed; nil while open or
// after Close.
func (s *Subscription) Err() error { return s.sink.reason() }

// Close ends the subscription. It may be called more than once.
func (s *Subscription) Close() {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	s.closeLocked(false)
}

// closeLocked takes s out of its tracker, and stops the tracker if s was
// its last subscription; with onlyIfFree, only if the tracker last read
// the lock free, checked in the same step. It reports whether it closed
// s now. h.mu must be held.
func (s *Subscription) closeLocked(onlyIfFree bool) bool {
	if s.closed {
		return false
	}
	h, t := s.h, s.t
	t.mu.Lock()
	if onlyIfFree && !(t.st.known && !t.st.held) {
		t.mu.Unlock()
		return false
	}
	s.closed = true
	t.leave(s, nil)
	empty := len(t.subs) == 0
	t.mu.Unlock()
	if empty && h.trackers[t.resource] == t {
		delete(h.trackers, t.resource)
		t.cancel()
	}
	return true
}

// lastError returns the error of the tracker's last failed read, if the
// last read failed.
func (s *Subscription) lastError() error {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	return s.t.lastErr
}

// Changed tells the Hub that this replica changed resource's lock (how is
// Acquired or Released), so that its watchers learn of it at once instead
// of at the next announcement or read. It costs nothing when nobody
// watches resource.
func (h *Hub) Changed(resource string, how Kind) {
	h.mu.Lock()
	if how == Acquired {
		for p := range h.prefixes {
			p.changed(resource)
		}
	}
	t := h.trackers[resource]
	h.mu.Unlock()
	if t == nil {
		return
	}
	if how == Released {
		t.mu.Lock()
		t.released = true
		t.mu.Unlock()
	}
	t.wakeUp()
}

// ForceReleasing tells the Hub that this replica is about to break
// resource's lock; done must be called once the attempt is over, with
// whether it broke a lock. A holder seen gone meanwhile, or at the next
// read after a done(true), is reported as ForceReleased (the nodes
// announce a force release as any release, at once).
func (h *Hub) ForceReleasing(resource string) (done func(broke bool)) {
	t := h.tracker(resource)
	if t == nil {
		return func(bool) {}
	}
	t.mu.Lock()
	t.forcing++
	t.mu.Unlock()
	return func(broke bool) {
		t.mu.Lock()
		t.forcing--
		t.forced = t.forced || broke
		t.mu.Unlock()
		t.wakeUp()
	}
}

// tracker returns resource's tracker, nil when nobody watches it.
func (h *Hub) tracker(resource string) *tracker {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.trackers[resource]
}

// Wait answers a long poll: the lock's state (an Event of Kind State) as
// soon as its token differs from after (0 meaning free: a free lock has
// token 0), or, when ctx ends first, the state then. A change is a
// new holder or the lock becoming free; an extension is not.
//
// Errors: those of Subscribe; ErrSlowReader is not possible. When ctx ends
// before the lock could be read at all, the last read's error (e.g.
// *lockcore.QuorumError), else ctx's.
func (h *Hub) Wait(ctx context.Context, resource string, after int64) (Event, error) {
	s, err := h.Subscribe(resource)
	if err != nil {
		return Event{}, err
	}
	defer s.Close()
	var cur Event
	have := false
	for {
		select {
		case ev, ok := <-s.C:
			if !ok {
				return cur, s.Err()
			}
			// A change may come as an end and an acquisition: take all
			// that is there before comparing.
			cur, have = drain(s.C, fold(cur, ev)), true
			if cur.Token != after {
				return cur, nil
			}
		case <-ctx.Done():
			if have {
				return cur, nil
			}
			return Event{}, cmpOr(s.lastError(), ctx.Err())
		}
	}
}

// cmpOr returns the first error that is not nil.
func cmpOr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// drain folds into cur the events c holds now.
func drain(c <-chan Event, cur Event) Event {
	for {
		select {
		case ev, ok := <-c:
			if !ok {
				return cur
			}
			cur = fold(cur, ev)
		default:
			return cur
		}
	}
}

// fold returns the State after ev.
func fold(cur Event, ev Event) Event {
	switch ev.Kind {
	case State, Acquired:
		ev.Kind = State
		return ev
	default:
		return Event{Kind: State, Resource: cur.Resource}
	}
}

// tracker reads one resource for its subscriptions.
type tracker struct {
	h        *Hub
	resource string
	ctx      context.Context
	cancel   context.CancelFunc
	wake     chan struct{}

	mu       sync.Mutex
	subs     map[*Subscription]struct{}
	st       state
	lastErr  error
	released bool // announced since the last read
	forced   bool // force-released here since the last read
	forcing  int  // force releases in flight here
}

// newTracker starts a tracker's goroutine. h.mu must be held.
func (h *Hub) newTracker(resource string) *tracker {
	ctx, cancel := context.WithCancel(context.Background())
	t := &tracker{h: h, resource: resource, ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1), subs: map[*Subscription]struct{}{}}
	h.wg.Add(1)
	go t.run()
	return t
}

func (t *tracker) wakeUp() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// announced is the nodes' release notification: it must not block.
func (t *tracker) announced() {
	t.mu.Lock()
	t.released = true
	t.mu.Unlock()
	t.wakeUp()
}

// run reads the lock when woken or when nextRead says, until cancelled.
func (t *tracker) run() {
	defer t.h.wg.Done()
	var stop func()
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	for t.ctx.Err() == nil {
		if stop == nil {
			stop = t.subscribe()
		}
		wait := t.readOnce()
		timer := time.NewTimer(wait)
		select {
		case <-t.ctx.Done():
		case <-t.wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// subscribe asks the nodes for release announcements; nil when none could
// be had (the next round tries again, reads carry on meanwhile).
func (t *tracker) subscribe() func() {
	ctx, cancel := context.WithTimeout(t.ctx, t.h.opt.ReadTimeout)
	defer cancel()
	stop, err := t.h.src.WatchReleases(ctx, t.resource, t.announced)
	if err != nil {
		return nil
	}
	return stop
}

// followUp is how soon a lock found free right after a release is read
// again: a waiter elsewhere usually takes it within a round trip or two.
const followUp = 50 * time.Millisecond

// readOnce reads the lock, tells the subscriptions, and returns how long
// to wait before the next read.
func (t *tracker) readOnce() time.Duration {
	t.mu.Lock()
	released, forced := t.released, t.forced || t.forcing > 0
	t.released, t.forced = false, false
	t.mu.Unlock()

	ob, err := t.read(released, forced)
	if err != nil {
		t.mu.Lock()
		t.lastErr = err
		t.released, t.forced = t.released || released, t.forced || forced
		t.mu.Unlock()
		return min(t.h.opt.Poll, 100*time.Millisecond)
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lastErr = nil
	evs, st := decide(t.st, ob, now)
	t.st = st
	t.deliver(evs)
	wait := nextRead(st, now, t.h.opt.Poll)
	if !ob.held && (released || forced) {
		wait = min(wait, followUp)
	}
	return wait
}

// read reads the lock: an observation, or the error of a read that could
// not tell.
func (t *tracker) read(released, forced bool) (observation, error) {
	ctx, cancel := context.WithTimeout(t.ctx, t.h.opt.ReadTimeout)
	defer cancel()
	info, err := t.h.src.Inspect(ctx, t.resource)
	ob := observation{released: released, forced: forced}
	switch {
	case err == nil:
		ob.held, ob.token, ob.owner, ob.ttl = true, info.Token, info.Owner, info.TTL
		ob.expires = time.Now().Add(info.Remaining)
	case !errors.Is(err, lockcore.ErrNotHeld):
		return ob, err
	}
	return ob, nil
}

// deliver hands evs to every subscription, and its State first to one
// that has none yet. t.mu must be held.
func (t *tracker) deliver(evs []Event) {
	for i := range evs {
		evs[i].Resource = t.resource
	}
	for s := range t.subs {
		if !s.primed {
			t.prime(s)
			continue
		}
		for _, ev := range evs {
			if !t.send(s, ev) {
				break
			}
		}
	}
}

// prime sends s its State. t.mu must be held, t.st known.
func (t *tracker) prime(s *Subscription) {
	s.primed = true
	ev := Event{Kind: State, Resource: t.resource}
	if t.st.held {
		ev.Held, ev.Token, ev.Owner, ev.TTL, ev.Expires = true, t.st.token, t.st.owner, t.st.ttl, t.st.expires
	}
	if s.first != nil {
		var ok bool
		if ev, ok = s.first(ev); !ok {
			return
		}
	}
	t.send(s, ev)
}

// send hands ev to s, or drops s's sink when its buffer is full. t.mu must
// be held.
func (t *tracker) send(s *Subscription, ev Event) bool {
	ok, dropped := s.sink.put(ev)
	if ok {
		t.h.sent.Add(1)
		return true
	}
	if dropped {
		t.h.dropped.Add(1)
	}
	t.leave(s, nil)
	return false
}

// leave takes s out of t; with err, its sink is ended with err. t.mu must
// be held.
func (t *tracker) leave(s *Subscription, err error) {
	if s.ended {
		return
	}
	s.ended = true
	delete(t.subs, s)
	t.h.watchers.Add(-1)
	if err != nil {
		s.sink.end(err)
	}
}

// endAll ends every subscription with err.
func (t *tracker) endAll(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for s := range t.subs {
		t.leave(s, err)
	}
}
