package watch

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/lockgate/lockgate/lockcore"
)

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

// subscriptions are a tracker's subscriptions to the nodes'
// announcements; nil when not in place.
type subscriptions struct{ releases, acquisitions func() }

// complete reports whether every change of holder is announced: the
// tracker then reads only when woken or when a TTL runs out.
func (s *subscriptions) complete() bool { return s.releases != nil && s.acquisitions != nil }

func (s *subscriptions) stop() {
	for _, f := range []func(){s.releases, s.acquisitions} {
		if f != nil {
			f()
		}
	}
}

// run reads the lock when woken or when nextRead says, until cancelled.
func (t *tracker) run() {
	defer t.h.wg.Done()
	var subs subscriptions
	defer subs.stop()
	for t.ctx.Err() == nil {
		t.subscribe(&subs)
		poll := t.h.opt.Poll
		if subs.complete() {
			poll = 0
		}
		var timeout <-chan time.Time
		var timer *time.Timer
		if wait, timed := t.readOnce(poll); timed {
			timer = time.NewTimer(wait)
			timeout = timer.C
		}
		select {
		case <-t.ctx.Done():
		case <-t.wake:
		case <-timeout:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// subscribe asks the nodes for the announcements s lacks, releases and
// acquisitions (lockcore.ErrNotAnnounced when too few nodes make them).
// One that could not be had stays nil: the next round tries again, and
// the tracker reads every Options.Poll meanwhile.
func (t *tracker) subscribe(s *subscriptions) {
	if s.releases == nil {
		s.releases = t.watch(t.h.src.WatchReleases, t.announced)
	}
	if s.acquisitions == nil {
		s.acquisitions = t.watch(t.h.src.WatchAcquisitions, t.wakeUp)
	}
}

// watch subscribes notify with w; nil when it failed.
func (t *tracker) watch(w func(ctx context.Context, resource string, notify func()) (func(), error), notify func()) func() {
	ctx, cancel := context.WithTimeout(t.ctx, t.h.opt.ReadTimeout)
	defer cancel()
	stop, err := w(ctx, t.resource, notify)
	if err != nil {
		return nil
	}
	return stop
}

// followUp is how soon a lock found free right after a release is read
// again when acquisitions are not announced: a waiter elsewhere usually
// takes it within a round trip or two.
const followUp = 50 * time.Millisecond

// readOnce reads the lock, tells the subscriptions, and returns how long
// to wait before the next read, if one is due without being woken (see
// nextRead; poll 0: every change is announced).
func (t *tracker) readOnce(poll time.Duration) (time.Duration, bool) {
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
		return min(t.h.opt.Poll, 100*time.Millisecond), true
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lastErr = nil
	evs, st := decide(t.st, ob, now)
	t.st = st
	t.deliver(evs)
	wait, timed := nextRead(st, now, poll)
	if poll > 0 && !ob.held && (released || forced) {
		wait = min(wait, followUp)
	}
	return wait, timed
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
