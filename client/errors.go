package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/lockgate/lockgate/api"
)

// Sentinel errors. Every error the gateway answers with is a *ProblemError
// that matches one of these with errors.Is; the watchdog's own reasons for
// closing Lock.Done (ErrLost, ErrMaxHold, ErrReleased) wrap the last answer.
var (
	// ErrTaken: another lease holds the lock (409 lock-taken), also when a
	// wait ran out. ProblemError.RetryAfter is the holder's remaining TTL.
	ErrTaken = errors.New("client: lock taken")
	// ErrHeldByOther: this lease no longer holds the lock; another one does
	// (409 held-by-another-lease on PATCH or DELETE).
	ErrHeldByOther = errors.New("client: lock held by another lease")
	// ErrNotHeld: nothing holds the lock (404 lock-not-held).
	ErrNotHeld = errors.New("client: lock not held")
	// ErrTokenMismatch: If-Match was not the holder's fencing token (412).
	ErrTokenMismatch = errors.New("client: fencing token mismatch")
	// ErrNoQuorum: too few lock nodes answered (503 no-quorum). Transient.
	ErrNoQuorum = errors.New("client: no quorum of lock nodes")
	// ErrUnavailable: the gateway is shutting down (503), has too many
	// waiters or finds the caller over its rate limit (429), or failed
	// (5xx). Transient.
	ErrUnavailable = errors.New("client: gateway unavailable")
	// ErrBadRequest: the gateway refused the request's form (400, 413,
	// 415); ProblemError.Field names the field at fault.
	ErrBadRequest = errors.New("client: bad request")
	// ErrUnauthorized: no known bearer token (401).
	ErrUnauthorized = errors.New("client: unauthorized")
	// ErrForbidden: the token may not use this method on this resource (403).
	ErrForbidden = errors.New("client: forbidden")

	// ErrLost: the watchdog could not renew the lock before the validity it
	// was last granted ran out (minus the safety margin), or the gateway said
	// the lease no longer holds it. Lock.Err wraps the last failure.
	ErrLost = errors.New("client: lock lost")
	// ErrMaxHold: the lock was held for LockOptions.MaxHold; the watchdog
	// stopped renewing it.
	ErrMaxHold = errors.New("client: maximum hold time reached")
	// ErrReleased: Release was called.
	ErrReleased = errors.New("client: lock released")
)

// ProblemError is an RFC 9457 problem answered by the gateway. It matches
// the sentinel of its problem type with errors.Is.
type ProblemError struct {
	// Status is the HTTP status code.
	Status int
	// Problem is the decoded body (Type is empty if the body was not a
	// problem document).
	Problem api.Problem
	// RetryAfter is the holder's remaining TTL for a 409 (retry_after_ms),
	// or the Retry-After header of a 429 or 503; 0 if none was given.
	RetryAfter time.Duration
	// Field names the request field at fault for a 400 (from "field").
	Field string
}

// Error gives the status, title, detail and retry-after; never a lease id
// or token, which the gateway does not put in problems.
func (e *ProblemError) Error() string {
	title := e.Problem.Title
	if title == "" {
		title = http.StatusText(e.Status)
	}
	msg := fmt.Sprintf("gateway answered %d %s", e.Status, title)
	if e.Problem.Detail != "" {
		msg += ": " + e.Problem.Detail
	} else if e.Field != "" {
		msg += ": field " + e.Field
	}
	if e.RetryAfter > 0 {
		msg += fmt.Sprintf(" (retry after %v)", e.RetryAfter)
	}
	return msg
}

// Is matches the sentinel of the problem's type (or, for a body without a
// known type, of its status).
func (e *ProblemError) Is(target error) bool {
	return target != nil && target == e.sentinel()
}

func (e *ProblemError) sentinel() error {
	switch e.Problem.Type {
	case api.ProblemTaken:
		return ErrTaken
	case api.ProblemHeldByOther:
		return ErrHeldByOther
	case api.ProblemNotHeld:
		return ErrNotHeld
	case api.ProblemTokenMismatch:
		return ErrTokenMismatch
	case api.ProblemNoQuorum:
		return ErrNoQuorum
	case api.ProblemShuttingDown, api.ProblemTooManyWaiters, api.ProblemInternal:
		return ErrUnavailable
	case api.ProblemInvalid, api.ProblemTooLarge, api.ProblemMediaType:
		return ErrBadRequest
	case api.ProblemUnauthorized:
		return ErrUnauthorized
	case api.ProblemForbidden:
		return ErrForbidden
	case api.ProblemSemaphoreFull:
		return ErrSemaphoreFull
	case api.ProblemPermitsMismatch:
		return ErrPermitsMismatch
	case api.ProblemModeHeld:
		return ErrModeHeld
	case api.ProblemNotSupported:
		return ErrNotSupported
	}
	switch {
	case e.Status == http.StatusUnauthorized:
		return ErrUnauthorized
	case e.Status == http.StatusForbidden:
		return ErrForbidden
	case e.Status == http.StatusTooManyRequests || e.Status >= 500:
		return ErrUnavailable
	case e.Status >= 400:
		return ErrBadRequest
	}
	return nil
}

// Transient reports whether err is worth retrying with the same lease id:
// no quorum, an unavailable gateway, or no answer at all (a connection
// error). A definite refusal (taken, not held, bad request...) is not, nor is
// the end of a context.
func Transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pe *ProblemError
	if errors.As(err, &pe) {
		return errors.Is(pe, ErrNoQuorum) || errors.Is(pe, ErrUnavailable)
	}
	var ne *NoAnswerError
	return errors.As(err, &ne)
}

// NoAnswerError is a request that got no HTTP answer (connection refused or
// reset, a timeout before the answer). The gateway may or may not have acted
// on it.
type NoAnswerError struct {
	Op  string // "acquire", "extend", "release", "get"
	Err error
}

// Error names the call and the transport error (which names the URL, not
// the lease id or bearer token: those travel in headers).
func (e *NoAnswerError) Error() string {
	return "no answer from the gateway to " + e.Op + ": " + e.Err.Error()
}

// Unwrap returns the transport error.
func (e *NoAnswerError) Unwrap() error { return e.Err }

// TLSError is a request that failed at TLS, before the gateway's API saw
// it: this client does not trust the gateway's certificate (signed by an
// authority it does not know: Options.CAFile; issued for another name;
// expired), the gateway refused this client's certificate (mutual TLS:
// Options.CertFile and KeyFile), or one side speaks TLS and the other does
// not (https:// to a plain gateway, http:// to an HTTPS one). It is not
// Transient: a retry fails the same way until a certificate or a setting
// changes.
type TLSError struct {
	Op     string // "acquire", "extend", "release", "get"
	Reason string // what went wrong, in words, with what to check
	Err    error  // the TLS or HTTP error
}

// Error names the call, the reason and the TLS error.
func (e *TLSError) Error() string {
	return "TLS with the gateway failed (" + e.Op + "): " + e.Reason + ": " + e.Err.Error()
}

// Unwrap returns the TLS error.
func (e *TLSError) Unwrap() error { return e.Err }

// tlsFailure returns the *TLSError for a transport error that is a TLS
// failure, or nil.
func tlsFailure(op string, err error) *TLSError {
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		verify   *tls.CertificateVerificationError
		record   tls.RecordHeaderError
		opErr    *net.OpError
	)
	reason := ""
	switch {
	case errors.As(err, &unknown):
		reason = "the gateway's certificate is signed by an authority this client does not trust " +
			"(give the CA's certificate: --cacert, Options.CAFile)"
	case errors.As(err, &hostname):
		reason = "the gateway's certificate is not for the host name in the gateway URL"
	case errors.As(err, &invalid):
		reason = "the gateway's certificate is not valid (expired, not yet valid, or not for a server)"
	case errors.As(err, &verify):
		reason = "the gateway's certificate was refused"
	case errors.As(err, &opErr) && opErr.Op == "remote error":
		// A TLS alert from the gateway: in practice, a client certificate
		// missing or not signed by an authority of its -tls-client-ca.
		reason = "the gateway refused the TLS connection; if it requires client certificates, " +
			"give one it trusts (--cert and --key, Options.CertFile and KeyFile)"
	case errors.As(err, &record) || strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		reason = "the gateway does not speak TLS: use http:// in its URL"
	default:
		return nil
	}
	return &TLSError{Op: op, Reason: reason, Err: err}
}
