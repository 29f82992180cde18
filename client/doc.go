// Package client is a Go client of lockgate's HTTP API, with a watchdog that
// keeps a lock alive and says when it can no longer be counted on.
//
// The low-level calls, Client.Acquire, Extend, Release and Get, send one
// request each over one reused http.Client and return the gateway's answer:
// a *Lease, or an error that matches one of the package's sentinels with
// errors.Is (ErrTaken, ErrNotHeld, ErrHeldByOther, ErrTokenMismatch,
// ErrNoQuorum, ErrUnavailable, ErrBadRequest, ErrUnauthorized,
// ErrForbidden), a *TLSError when the TLS handshake failed, or a
// *NoAnswerError when no answer came. Options.CAFile, CertFile and KeyFile
// reach an HTTPS gateway with a private CA or mutual TLS. The request and
// answer bodies are the types of package
// api, which the gateway's handlers use too, so the two cannot drift.
//
// Client.Lock acquires and returns a *Lock whose watchdog renews it about
// every TTL/3. What is guaranteed:
//
//   - Done closes before the validity the gateway last granted runs out,
//     never after: that validity is counted from the local monotonic time
//     the granting request was sent (earlier than the gateway's own count),
//     and Done closes LockOptions.Margin before its end unless a renewal has
//     succeeded by then. Transient failures (no quorum, no answer) are
//     retried with back-off within that time. An answer saying the lease no
//     longer holds the lock closes Done at once. Err says why; Context is
//     cancelled at the same moment.
//   - Release stops the watchdog first and waits for a renewal in flight to
//     be answered, so no renewal reaches the gateway after Release returns,
//     and a released lock is never extended again.
//   - Acquisition retries a lost answer with the same lease id: the gateway
//     answers a lease that already holds the lock with the same lock, so a
//     retry never takes a second one.
//
// What is not: "never after" assumes the client process is not stalled for
// longer than the margin, since a timer fires only when the process runs.
// And Done is advice to a process that may itself be paused past
// any deadline (GC, swap, SIGSTOP). The protection against a holder that
// acts too late is the fencing token, checked by the storage it writes to:
// SetFencingHeaders puts it on a request for the fencing package's
// middleware.
//
// The module is not published, so go get cannot resolve it. Another module
// depends on a clone of the repository through a replace directive; in that
// module, with the clone at ../lockgate:
//
//	go mod edit -require=github.com/lockgate/lockgate@v0.0.0 -replace=github.com/lockgate/lockgate=../lockgate
//	go mod tidy
//
// which adds to its go.mod:
//
//	require github.com/lockgate/lockgate v0.0.0
//	replace github.com/lockgate/lockgate => ../lockgate
//
// Then go mod vendor keeps a copy of the packages it uses in vendor/, and
// its builds need the clone no more.
//
// Every request carries the W3C traceparent of its context's span, if it
// has one (OpenTelemetry), so that a tracing gateway's spans join the
// caller's trace. Nothing else about the call is sent to the tracer.
package client
