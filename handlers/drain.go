package handlers

import (
	"net/http"
	"sync"
	"sync/atomic"
)

// Drain is a gateway's shutdown as its handlers see it, in two steps:
//
//   - Begin: /readyz answers 503 shutting-down at once, so that a load
//     balancer (a Kubernetes Service, whose endpoints follow readiness)
//     stops sending new requests, while every other route still serves,
//     each answer with Connection: close, so that clients connect again,
//     to a replica that is ready;
//   - EndStreams: every event stream writes a `shutdown` event and ends,
//     so that its client connects again, to another replica.
//
// Waits and long polls are ended by the lock service and the watch hub
// themselves (lockcore.ErrClosed, watch.ErrClosed: 503 shutting-down with
// Retry-After). The zero value is not usable; make one with NewDrain. A nil
// *Drain never drains.
type Drain struct {
	draining atomic.Bool
	once     sync.Once
	end      chan struct{}
}

// NewDrain returns a Drain that has not begun.
func NewDrain() *Drain { return &Drain{end: make(chan struct{})} }

// Begin turns /readyz to 503. It may be called more than once.
func (d *Drain) Begin() { d.draining.Store(true) }

// Draining reports whether Begin was called.
func (d *Drain) Draining() bool { return d != nil && d.draining.Load() }

// EndStreams begins the drain if it has not begun and ends every event
// stream with a shutdown event. It returns at once; a stream ends when its
// handler next runs. It may be called more than once.
func (d *Drain) EndStreams() {
	d.Begin()
	d.once.Do(func() { close(d.end) })
}

// ended is closed by EndStreams; nil (never closed) for a nil Drain.
func (d *Drain) ended() <-chan struct{} {
	if d == nil {
		return nil
	}
	return d.end
}

// streamsEnded reports whether EndStreams was called.
func (d *Drain) streamsEnded() bool {
	select {
	case <-d.ended():
		return true
	default:
		return false
	}
}

// shutdownEvent is the last event of a stream that the gateway ends as it
// shuts down (see docs/watch.md). Its data names no lock: the client
// connects again and starts from a state event.
const shutdownEvent = "event: shutdown\ndata: {\"detail\":\"this replica is shutting down; connect again\"}\n\n"

// writeShutdown ends a stream with shutdownEvent.
func writeShutdown(w http.ResponseWriter, r *http.Request, rc *http.ResponseController) {
	setOutcome(r, "shutting_down")
	writeFlush(w, rc, shutdownEvent)
}

// closeConnections marks every answer Connection: close once the drain has
// begun. Closing the connection after an answer, rather than closing idle
// connections (http.Server.SetKeepAlivesEnabled), never races with a
// request a client is sending on one.
func (d *Drain) closeConnections(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d.Draining() {
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(w, r)
	})
}
