package watch

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/lockgate/lockgate/lockcore"
)

// Lister is what watching a prefix needs of the lock service besides
// Source (*lockcore.Redlock).
type Lister interface {
	List(ctx context.Context, prefix string, limit int, cursor string) (*lockcore.ListPage, error)
}

// ErrNoListing is what SubscribePrefix fails with when the Hub's Source
// cannot list locks.
var ErrNoListing = errors.New("watch: this lock service cannot list locks")

// PrefixSubscription watches every resource whose name starts with a
// prefix. Its events arrive on C: first a State for each lock held when
// it began, then the events of every resource under the prefix, each
// resource's in order (a resource found held later, by a listing, comes
// as Acquired). C is closed when it ends other than by Close (Err says
// why).
//
// It finds resources by listing the prefix every Options.Poll (and at
// once when this replica changes one under it), and follows each it found
// held as Subscribe does, until a listing finds it free again. Each
// resource it follows counts as a watcher (Options.MaxWatchers), and the
// subscription itself as one: past the bound, it ends with
// ErrTooManyWatchers.
type PrefixSubscription struct {
	// C delivers the events.
	C <-chan Event

	h      *Hub
	prefix string
	sink   *sink
	wake   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once

	subs map[string]*Subscription // owned by scan
}

// SubscribePrefix starts watching every resource whose name starts with
// prefix ("" for all).
//
// Errors: ErrTooManyWatchers; ErrClosed; ErrNoListing.
func (h *Hub) SubscribePrefix(prefix string) (*PrefixSubscription, error) {
	if _, ok := h.src.(Lister); !ok {
		return nil, ErrNoListing
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	if h.watchers.Load() >= int64(h.opt.MaxWatchers) {
		return nil, ErrTooManyWatchers
	}
	h.watchers.Add(1)
	ctx, cancel := context.WithCancel(context.Background())
	k := newSink(h.opt.Buffer)
	p := &PrefixSubscription{C: k.ch, h: h, prefix: prefix, sink: k, wake: make(chan struct{}, 1),
		cancel: cancel, done: make(chan struct{}), subs: map[string]*Subscription{}}
	h.prefixes[p] = struct{}{}
	h.wg.Add(1)
	go p.scan(ctx)
	return p, nil
}

// Err says why C was closed: ErrSlowReader, ErrTooManyWatchers, ErrClosed
// or the listing's error; nil while open or after Close.
func (p *PrefixSubscription) Err() error { return p.sink.reason() }

// Close ends the subscription and waits for its goroutine. It may be
// called more than once.
func (p *PrefixSubscription) Close() {
	p.once.Do(func() {
		p.cancel()
		<-p.done
		p.h.mu.Lock()
		delete(p.h.prefixes, p)
		p.h.mu.Unlock()
		p.h.watchers.Add(-1)
	})
}

// changed wakes the scan when resource is under the prefix.
func (p *PrefixSubscription) changed(resource string) {
	if strings.HasPrefix(resource, p.prefix) {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

// scan lists the prefix when woken or every Poll and follows what it
// finds, until cancelled or its sink ends.
func (p *PrefixSubscription) scan(ctx context.Context) {
	defer p.h.wg.Done()
	defer close(p.done)
	defer func() {
		for _, s := range p.subs {
			s.Close()
		}
	}()
	for first := true; ; first = false {
		if err := p.list(ctx, first); err != nil {
			if ctx.Err() == nil {
				p.sink.end(err)
			}
			return
		}
		timer := time.NewTimer(p.h.opt.Poll)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-p.wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// list reads the prefix's held locks, follows those it does not follow
// yet, and lets go of those found free. On the first listing a lock comes
// as its State; later, as Acquired.
func (p *PrefixSubscription) list(ctx context.Context, first bool) error {
	held, err := p.held(ctx)
	if err != nil {
		if errors.Is(err, ErrClosed) || errors.Is(err, ErrTooManyWatchers) {
			return err
		}
		return nil // a failed listing (no quorum): the next one tries again
	}
	for resource := range held {
		if p.subs[resource] != nil {
			continue
		}
		s, err := p.h.subscribe(resource, p.sink, arrival(first))
		if err != nil {
			return err
		}
		p.subs[resource] = s
	}
	for resource, s := range p.subs {
		if _, ok := held[resource]; !ok && s.leaveIfFree() {
			delete(p.subs, resource)
		}
	}
	return nil
}

// held returns the names of the locks held under the prefix.
func (p *PrefixSubscription) held(ctx context.Context) (map[string]struct{}, error) {
	l := p.h.src.(Lister)
	out := map[string]struct{}{}
	cursor := ""
	for {
		rctx, cancel := context.WithTimeout(ctx, p.h.opt.ReadTimeout)
		page, err := l.List(rctx, p.prefix, lockcore.MaxListLimit, cursor)
		cancel()
		if err != nil {
			return nil, err
		}
		for _, info := range page.Locks {
			out[info.Resource] = struct{}{}
		}
		if cursor = page.Next; cursor == "" {
			return out, nil
		}
	}
}

// arrival is how a prefix subscription shows a resource's State: as is
// in the first listing, as Acquired in a later one (it was taken since),
// and not at all when the resource is free by then.
func arrival(first bool) func(Event) (Event, bool) {
	return func(ev Event) (Event, bool) {
		if !ev.Held {
			return ev, false
		}
		if !first {
			ev.Kind = Acquired
		}
		return ev, true
	}
}

// leaveIfFree closes s if its tracker last read the lock free, checked in
// the same step, so that no event comes between the two: a later holder is
// found by a later listing, as new.
func (s *Subscription) leaveIfFree() bool {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	return s.closeLocked(true)
}
