package handlers

import (
	"errors"
	"io"
	"net/http"
	"os"
	"time"
)

// BodyDeadline bounds how long a request's body may take to arrive: d from
// the moment the handler starts. A body that is silent, trickles in, or is
// shorter than its Content-Length fails to read once d has passed; the
// contract middleware then answers 400 (field "body") and the server closes
// the connection, since the rest of the body can never be skipped.
//
// A waiting acquire (wait_ms of minutes) is not cut: net/http lifts the
// connection's read deadline when the body has been read to its end (it
// then starts the background read that notices a client that leaves). A
// request without a body (Content-Length 0) gets no deadline. Where the
// connection does not support read deadlines (http.ErrNotSupported), the
// request is served unbounded.
//
// BodyDeadline must wrap the handler given to the http.Server directly, so
// that http.NewResponseController reaches the connection.
func BodyDeadline(d time.Duration) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if d > 0 && r.Body != nil && r.Body != http.NoBody {
				if err := setReadDeadline(w, time.Now().Add(d)); err == nil {
					r.Body = &deadlineBody{ReadCloser: r.Body, limit: d}
				}
			}
			next.ServeHTTP(w, r)
		})
	}
}

// setReadDeadline is http.NewResponseController(w).SetReadDeadline(t),
// without making a controller when w has the method itself (net/http's
// writer does).
func setReadDeadline(w http.ResponseWriter, t time.Time) error {
	if d, ok := w.(interface{ SetReadDeadline(time.Time) error }); ok {
		return d.SetReadDeadline(t)
	}
	return http.NewResponseController(w).SetReadDeadline(t)
}

// deadlineBody tells a read cut by BodyDeadline from other read errors.
type deadlineBody struct {
	io.ReadCloser
	limit time.Duration
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		err = &slowBodyError{limit: b.limit, err: err}
	}
	return n, err
}

// slowBodyError is a body read cut by BodyDeadline.
type slowBodyError struct {
	limit time.Duration
	err   error
}

func (e *slowBodyError) Error() string {
	return "the body did not arrive within " + e.limit.String()
}

func (e *slowBodyError) Unwrap() error { return e.err }
