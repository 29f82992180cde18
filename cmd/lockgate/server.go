package main

import (
	"net/http"
	"time"

	"github.com/lockgate/lockgate/handlers"
)

// Server bounds that are not settings.
const (
	// idleTimeout closes a keep-alive connection that sends no new request.
	idleTimeout = 2 * time.Minute
	// writeSlack is what a response may take beyond reading its body and
	// the longest wait: the last attempt after a wait, the node calls, and
	// writing a small answer.
	writeSlack = 30 * time.Second
	// shutdownBudget is how long the gateway takes at most from SIGTERM to
	// its exit: -shutdown-delay, then ending waits and streams and
	// finishing requests in flight. It stays under Kubernetes' default
	// terminationGracePeriodSeconds (30), after which the kubelet kills.
	shutdownBudget = 25 * time.Second
	// maxShutdownDelay leaves at least 5 s of shutdownBudget for the
	// requests in flight.
	maxShutdownDelay = 20 * time.Second
)

// newServer returns the gateway's HTTP server around handler, with every
// read bounded so that a client cannot hold a connection (and its goroutine
// and buffers) by sending slowly or not at all:
//
//   - headers: cfg.ReadHeaderTimeout to arrive (the connection is then
//     closed without an answer) and cfg.MaxHeaderBytes in size (net/http
//     answers a plain-text 431 and closes the connection);
//   - body: cfg.ReadBodyTimeout from the start of the request
//     (handlers.BodyDeadline): a silent or trickling body, or one shorter
//     than its Content-Length, gets a 400 problem naming the body, then the
//     connection is closed;
//   - idle keep-alive connections: idleTimeout.
//
// The body deadline ends once the body is read, so a PUT waiting up to
// cfg.MaxWait still gets its answer; the write deadline, counted from the
// end of the headers, allows the body, the longest wait and writeSlack.
func newServer(cfg *config, handler http.Handler) *http.Server {
	return &http.Server{
		Handler:           handlers.BodyDeadline(cfg.ReadBodyTimeout)(handler),
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		// No ReadTimeout: the body is bounded per request instead, from
		// the handler's start, so that a cut body is told apart (400
		// naming the bound) and requests without a body are not bounded.
		WriteTimeout:   cfg.ReadBodyTimeout + cfg.MaxWait + writeSlack,
		IdleTimeout:    idleTimeout,
		MaxHeaderBytes: cfg.MaxHeaderBytes,
	}
}
