package handlers

import (
	"context"
	"errors"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lockgate/lockgate/api"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/watch"
)

// LockWatch is what watching a lock needs (*watch.Hub).
type LockWatch interface {
	Subscribe(resource string) (*watch.Subscription, error)
	SubscribePrefix(prefix string) (*watch.PrefixSubscription, error)
	Wait(ctx context.Context, resource string, after int64) (watch.Event, error)
	Changed(resource string, how watch.Kind)
	ForceReleasing(resource string) (done func(broke bool))
}

// Stream timing defaults (see Options.StreamHeartbeat, StreamIdle).
const (
	defaultHeartbeat   = 15 * time.Second
	defaultStreamIdle  = 5 * time.Minute
	streamWriteTimeout = 10 * time.Second
)

var apiTooManyWatchers = problemKind{api.ProblemTooManyWatchers, "Too many watchers", "too_many_watchers"}

// watchOf returns the LockWatch of o, or a new watch.Hub over locker when
// locker can be watched, or nil.
func watchOf(o *Options, locker Locker) LockWatch {
	if o.Watch != nil {
		return o.Watch
	}
	if src, ok := locker.(watch.Source); ok {
		return watch.New(src, nil)
	}
	return nil
}

// wantsStream reports whether r asks for an event stream.
func wantsStream(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == api.MediaEventStream {
			return true
		}
	}
	return false
}

// watchFailed answers an error of the watch: a 429 for too many watchers,
// else as fail does.
func watchFailed(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, watch.ErrTooManyWatchers):
		w.Header().Set(api.HeaderRetryAfter, "1")
		problem(w, r, http.StatusTooManyRequests, apiTooManyWatchers,
			"this replica has its maximum number of watchers (-max-watchers); try again or another replica")
	case errors.Is(err, watch.ErrClosed):
		fail(w, r, lockcore.ErrClosed)
	case errors.Is(err, watch.ErrNoListing):
		problem(w, r, http.StatusInternalServerError, apiInternal, "this lock service cannot list locks")
	default:
		fail(w, r, err)
	}
}

// longPoll answers GET /locks/{resource}?after=…&wait_ms=…: the lock as
// inspect answers it (200 held, 404 free: token 0) as soon as its token
// differs from after, or when wait_ms ends.
func (s *server) longPoll(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	after, _ := strconv.ParseInt(q.Get("after"), 10, 64) // checked by the contract
	waitMs, _ := strconv.ParseInt(q.Get("wait_ms"), 10, 64)
	wait := time.Duration(waitMs) * time.Millisecond
	// The server's write timeout is sized for acquisitions' waits, which
	// may be configured shorter than a long poll's.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(wait + streamWriteTimeout))
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	ev, err := s.watch.Wait(ctx, resourceParam(r), after)
	if err == nil && r.Context().Err() != nil {
		err = r.Context().Err()
	}
	if err != nil {
		watchFailed(w, r, err)
		return
	}
	if !ev.Held {
		fail(w, r, lockcore.ErrNotHeld)
		return
	}
	setOutcome(r, "held")
	setHeaders(w.Header(), lockHeaders, []string{etag(ev.Token), api.MediaJSON})
	w.WriteHeader(http.StatusOK)
	encodeJSON(w, &api.LockInfo{
		Resource: ev.Resource, FencingToken: ev.Token, Owner: ev.Owner,
		TTLms: ev.TTL.Milliseconds(), ExpiresAt: ev.Expires.UTC(),
	})
}

// stream answers GET /locks/{resource} with Accept: text/event-stream: the
// lock's state, then every change, as Server-Sent Events, until the client
// leaves, the stream is idle for Options.StreamIdle, or the client reads
// too slowly (its events fill the subscription's buffer, or a write takes
// longer than streamWriteTimeout): then it ends.
func (s *server) stream(w http.ResponseWriter, r *http.Request) {
	sub, err := s.watch.Subscribe(resourceParam(r))
	if err != nil {
		watchFailed(w, r, err)
		return
	}
	defer sub.Close()
	s.streamEvents(w, r, sub.C)
}

// streamPrefix answers GET /locks?prefix=… with Accept: text/event-stream:
// the held locks whose names start with prefix, then every change of
// them, as stream does for one lock. With grants (Options.Grants), the
// prefix must lie within one of them: 403 otherwise.
func (s *server) streamPrefix(w http.ResponseWriter, r *http.Request) {
	prefix := r.URL.Query().Get("prefix")
	if s.opt.Grants != nil {
		grants, all := s.opt.Grants(r)
		if parts := listParts(prefix, grants, all); len(parts) != 1 || parts[0] != prefix {
			problem(w, r, http.StatusForbidden, apiForbidden, "this token may watch only a prefix within one of its "+
				"resource-name prefixes; "+strconv.Quote(prefix)+" is not")
			return
		}
	}
	sub, err := s.watch.SubscribePrefix(prefix)
	if err != nil {
		watchFailed(w, r, err)
		return
	}
	defer sub.Close()
	s.streamEvents(w, r, sub.C)
}

// streamEvents writes events as Server-Sent Events until the client
// leaves, the stream is idle for Options.StreamIdle, the client reads too
// slowly (events ends: its buffer filled, or a write takes longer than
// streamWriteTimeout), or the gateway shuts down (Drain.EndStreams: a
// last shutdown event).
func (s *server) streamEvents(w http.ResponseWriter, r *http.Request, events <-chan watch.Event) {
	rc := http.NewResponseController(w)
	setOutcome(r, "watched")
	h := w.Header()
	h.Set("Content-Type", api.MediaEventStream)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // proxies must not hold events back
	w.WriteHeader(http.StatusOK)
	if !flush(rc) {
		return
	}
	heartbeat := time.NewTicker(s.opt.StreamHeartbeat)
	defer heartbeat.Stop()
	idle := time.NewTimer(s.opt.StreamIdle)
	defer idle.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-idle.C:
			setOutcome(r, "idle")
			return
		case <-heartbeat.C:
			if !writeFlush(w, rc, ": heartbeat\n\n") {
				return
			}
		case <-s.opt.Drain.ended():
			writeShutdown(w, r, rc)
			return
		case ev, ok := <-events:
			if !ok && s.opt.Drain.streamsEnded() {
				// The hub closed its subscriptions after EndStreams.
				writeShutdown(w, r, rc)
				return
			}
			if !ok || !writeFlush(w, rc, sseEvent(ev)) {
				setOutcome(r, "dropped")
				return
			}
			idle.Reset(s.opt.StreamIdle)
		}
	}
}

// writeFlush writes one event or comment within streamWriteTimeout; false
// when the client did not take it.
func writeFlush(w http.ResponseWriter, rc *http.ResponseController, s string) bool {
	_ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
	if _, err := w.Write([]byte(s)); err != nil {
		return false
	}
	return flush(rc)
}

func flush(rc *http.ResponseController) bool { return rc.Flush() == nil }

// sseEvent formats ev as one Server-Sent Event: its kind as event, its
// token as id, api.WatchEvent as data.
func sseEvent(ev watch.Event) string {
	data := api.WatchEvent{Resource: ev.Resource, Held: ev.Held, FencingToken: ev.Token, Owner: ev.Owner}
	if ev.Held {
		exp := ev.Expires.UTC()
		data.TTLms, data.ExpiresAt = ev.TTL.Milliseconds(), &exp
	}
	var b strings.Builder
	b.WriteString("event: ")
	b.WriteString(string(ev.Kind))
	b.WriteString("\nid: ")
	b.WriteString(strconv.FormatInt(ev.Token, 10))
	b.WriteString("\ndata: ")
	encodeJSON(&b, &data) // one line, ends with a newline
	b.WriteString("\n")
	return b.String()
}
