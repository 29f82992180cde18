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

// Source is what a Hub needs of the lock service (*lockcore.Redlock): a
// quorum read, and the nodes' announcements of releases and acquisitions.
// A watch fails (lockcore.ErrNotAnnounced) when it cannot hear every
// change made on a quorum; the Hub then reads every Options.Poll.
type Source interface {
	Inspect(ctx context.Context, resource string) (*lockcore.LockInfo, error)
	WatchReleases(ctx context.Context, resource string, notify func()) (stop func(), err error)
	WatchAcquisitions(ctx context.Context, resource string, notify func()) (stop func(), err error)
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
	// Poll is how often a prefix is listed (PrefixSubscription), and how
	// often a watched lock is read while its tracker lacks a subscription
	// to the nodes' release or acquisition announcements (too few nodes
	// announce, or could be subscribed to; it tries again at each read).
	// A lock whose changes are all announced is never polled. Default 1s.
	Poll time.Duration
	// ReadTimeout bounds each read of a lock and each subscription to the
	// nodes' announcements. Default 2s.
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
