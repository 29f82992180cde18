package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/lockgate/lockgate/api"
)

// Client calls one lockgate gateway. It is safe for concurrent use and
// reuses one http.Client (and so its connections) for every call.
type Client struct {
	base  *url.URL
	hc    *http.Client
	token string
	now   func() time.Time
}

// Options configure a Client. A nil *Options means the defaults.
type Options struct {
	// HTTPClient sends every request. Default: a client of its own over a
	// clone of http.DefaultTransport. Its Timeout should be 0 (the default):
	// a waiting acquire legitimately takes as long as its wait; every call
	// is bounded by its context instead.
	HTTPClient *http.Client
	// BearerToken, if set, is sent as "Authorization: Bearer <token>" on
	// every /locks request. It is never logged nor put in an error.
	BearerToken string

	// The TLS settings below apply to an https:// gateway. They configure
	// the default transport, so they cannot be combined with HTTPClient
	// (configure that client's transport instead). Files are read once, by
	// New.

	// TLSConfig is the starting point of the TLS settings; nil means Go's
	// defaults (the system's certificate authorities, no client
	// certificate). It is cloned, never modified.
	TLSConfig *tls.Config
	// CAFile, if set, is a PEM file of the certificate authorities trusted
	// to sign the gateway's certificate, in place of the system's (a
	// private CA).
	CAFile string
	// CertFile and KeyFile, if set (both or neither), are the PEM client
	// certificate (chain) and its private key, presented to a gateway that
	// asks for one (a gateway started with -tls-client-ca: mutual TLS).
	CertFile, KeyFile string
}

// New returns a Client for the gateway at baseURL (e.g.
// "http://127.0.0.1:8080"). It fails if baseURL is not an absolute http or
// https URL, or if the TLS settings do not load (a file that cannot be
// read, holds no PEM certificate, or a key that is not the certificate's),
// or are given with HTTPClient.
func New(baseURL string, opts *Options) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: gateway URL %q: want http://host:port or https://host:port", baseURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	var o Options
	if opts != nil {
		o = *opts
	}
	withTLS := o.TLSConfig != nil || o.CAFile != "" || o.CertFile != "" || o.KeyFile != ""
	if o.HTTPClient != nil && withTLS {
		return nil, errors.New("client: TLSConfig, CAFile, CertFile and KeyFile configure the default transport: " +
			"with HTTPClient, set them on its transport instead")
	}
	if o.HTTPClient == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		if withTLS {
			if tr.TLSClientConfig, err = tlsConfig(&o); err != nil {
				return nil, err
			}
		}
		o.HTTPClient = &http.Client{Transport: tr}
	}
	return &Client{base: u, hc: o.HTTPClient, token: o.BearerToken, now: time.Now}, nil
}

// tlsConfig builds the TLS settings of o's default transport.
func tlsConfig(o *Options) (*tls.Config, error) {
	tc := &tls.Config{}
	if o.TLSConfig != nil {
		tc = o.TLSConfig.Clone()
	}
	if o.CAFile != "" {
		b, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("client: CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("client: CA file %s holds no PEM certificate", o.CAFile)
		}
		tc.RootCAs = pool
	}
	switch {
	case (o.CertFile == "") != (o.KeyFile == ""):
		return nil, errors.New("client: a client certificate needs both CertFile and KeyFile")
	case o.CertFile != "":
		pair, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("client: client certificate %s and key %s: %w", o.CertFile, o.KeyFile, err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}

// AcquireOptions tune one acquisition. A nil *AcquireOptions means the
// gateway's default TTL, no wait and no owner label.
type AcquireOptions struct {
	// TTL of the lock; 0 means the gateway's default (30s unless configured
	// otherwise). Sent in whole milliseconds.
	TTL time.Duration
	// Wait is how long the gateway may wait for a held lock before
	// answering ErrTaken; 0 means not at all.
	Wait time.Duration
	// Owner is a label shown by Get (at most 256 printable characters).
	Owner string
	// LeaseID is the lease's secret. Empty: the client mints one (192
	// random bits), so that a request whose answer was lost can be retried
	// with the same id and get the same lock back instead of a second one.
	LeaseID string
}

// Lease is a lock the gateway granted: the answer to an acquire or an
// extend, with the local time the request was sent.
type Lease struct {
	api.Lease
	// Sent is when the request that got this answer was sent, on the local
	// monotonic clock.
	Sent time.Time
}

// ValidUntil is the local time until which the lock is known to be held:
// the gateway counts ValidityMs from its receipt of the request, which was
// after Sent, so Sent+ValidityMs is never later than the real end.
func (l *Lease) ValidUntil() time.Time {
	return l.Sent.Add(time.Duration(l.ValidityMs) * time.Millisecond)
}

// Acquire asks once for the lock on resource (PUT /locks/{resource}),
// waiting up to o.Wait for a holder to let go. It does not retry; see Lock
// for retries and renewal. Errors: *ProblemError (ErrTaken with RetryAfter,
// ErrBadRequest with Field, ErrNoQuorum, ErrUnavailable, ErrUnauthorized,
// ErrForbidden), *TLSError, *NoAnswerError, or the context's error.
func (c *Client) Acquire(ctx context.Context, resource string, o *AcquireOptions) (*Lease, error) {
	var ao AcquireOptions
	if o != nil {
		ao = *o
	}
	if ao.LeaseID == "" {
		ao.LeaseID = NewLeaseID()
	}
	return c.acquire(ctx, resource, ao)
}

func (c *Client) acquire(ctx context.Context, resource string, o AcquireOptions) (*Lease, error) {
	var body api.AcquireRequest
	if o.TTL > 0 {
		body.TTLms = ptr(max(o.TTL.Milliseconds(), 1))
	}
	if o.Wait > 0 {
		body.WaitMs = ptr(max(o.Wait.Milliseconds(), 1))
	}
	if o.Owner != "" {
		body.Owner = &o.Owner
	}
	return c.lease(ctx, "acquire", http.MethodPut, resource, o.LeaseID, 0, body)
}

// ExtendOptions tune one extension. A nil *ExtendOptions extends by the TTL
// the lock was taken with and checks no token.
type ExtendOptions struct {
	// TTL is the new TTL; 0 means the one the lock was taken with.
	TTL time.Duration
	// IfToken, if not 0, makes the gateway refuse (ErrTokenMismatch) unless
	// the holder's fencing token is this one.
	IfToken int64
}

// Extend renews the lock leaseID holds on resource (PATCH), once. Errors:
// *ProblemError (ErrNotHeld, ErrHeldByOther, ErrTokenMismatch,
// ErrBadRequest, ErrNoQuorum, ErrUnavailable, ErrUnauthorized,
// ErrForbidden), *TLSError, *NoAnswerError, or the context's error.
func (c *Client) Extend(ctx context.Context, resource, leaseID string, o *ExtendOptions) (*Lease, error) {
	var eo ExtendOptions
	if o != nil {
		eo = *o
	}
	var body api.ExtendRequest
	if eo.TTL > 0 {
		body.TTLms = ptr(max(eo.TTL.Milliseconds(), 1))
	}
	return c.lease(ctx, "extend", http.MethodPatch, resource, leaseID, eo.IfToken, body)
}

// Release lets go of the lock leaseID holds on resource (DELETE), once.
// ifToken, if not 0, is checked as by Extend. Errors: as Extend's.
func (c *Client) Release(ctx context.Context, resource, leaseID string, ifToken int64) error {
	resp, _, err := c.do(ctx, "release", http.MethodDelete, resource, leaseID, ifToken, nil)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("lockgate: release: unexpected status %d", resp.StatusCode)
	}
	return nil
}

// Get returns who holds the lock on resource (GET), never the lease id.
// Errors: *ProblemError (ErrNotHeld when nothing holds it, ErrNoQuorum,
// ErrBadRequest, ErrUnauthorized, ErrForbidden), *TLSError, *NoAnswerError, or the
// context's error.
func (c *Client) Get(ctx context.Context, resource string) (*api.LockInfo, error) {
	_, body, err := c.do(ctx, "get", http.MethodGet, resource, "", 0, nil)
	if err != nil {
		return nil, err
	}
	var info api.LockInfo
	if err := json.Unmarshal(body, &info); err != nil {
		return nil, fmt.Errorf("lockgate: get: bad answer: %w", err)
	}
	return &info, nil
}

func (c *Client) lease(ctx context.Context, op, method, resource, leaseID string, ifToken int64, body any) (*Lease, error) {
	sent := c.now()
	_, raw, err := c.do(ctx, op, method, resource, leaseID, ifToken, body)
	if err != nil {
		return nil, err
	}
	l := &Lease{Sent: sent}
	if err := json.Unmarshal(raw, &l.Lease); err != nil {
		return nil, fmt.Errorf("lockgate: %s: bad answer: %w", op, err)
	}
	if l.LeaseID == "" || l.FencingToken <= 0 || l.ValidityMs <= 0 {
		return nil, fmt.Errorf("lockgate: %s: bad answer: lease without id, token or validity", op)
	}
	return l, nil
}

// maxBody bounds what is read of an answer.
const maxBody = 1 << 20

// do sends one request and returns the answer's body on 2xx, a
// *ProblemError on an error status, a *TLSError or a *NoAnswerError.
func (c *Client) do(ctx context.Context, op, method, resource, leaseID string, ifToken int64, body any) (*http.Response, []byte, error) {
	return c.doPath(ctx, op, method, "/locks/"+resource, "/locks/"+url.PathEscape(resource), leaseID, ifToken, body)
}

// doPath is do for a path below the base URL, given plain and escaped.
func (c *Client) doPath(ctx context.Context, op, method, path, escaped, leaseID string, ifToken int64, body any) (*http.Response, []byte, error) {
	u := *c.base
	u.Path, u.RawPath = c.base.Path+path, c.base.EscapedPath()+escaped
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, nil, err
		}
		if !bytes.Equal(b, []byte("{}")) {
			rd = bytes.NewReader(b)
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, nil, fmt.Errorf("lockgate: %s: %w", op, err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", api.MediaJSON)
	}
	req.Header.Set("Accept", api.MediaJSON+", "+api.MediaProblem)
	if leaseID != "" {
		req.Header.Set(api.HeaderLeaseID, leaseID)
	}
	if ifToken != 0 {
		req.Header.Set(api.HeaderIfMatch, `"`+strconv.FormatInt(ifToken, 10)+`"`)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	injectTrace(ctx, req)
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, errors.Join(fmt.Errorf("lockgate: %s: %w", op, ctx.Err()), ctx.Err())
		}
		if te := tlsFailure(op, err); te != nil {
			return nil, nil, te
		}
		// url.Error's text names the URL, which holds no secret (the lease
		// id and bearer token travel in headers).
		return nil, nil, &NoAnswerError{Op: op, Err: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, errors.Join(fmt.Errorf("lockgate: %s: %w", op, ctx.Err()), ctx.Err())
		}
		if te := tlsFailure(op, err); te != nil {
			return nil, nil, te
		}
		return nil, nil, &NoAnswerError{Op: op, Err: err}
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, raw, nil
	}
	if resp.StatusCode == http.StatusBadRequest && c.base.Scheme == "http" && bytes.Contains(raw, plainToTLS) {
		return nil, nil, &TLSError{Op: op, Reason: "the gateway serves HTTPS: use https:// in its URL",
			Err: errors.New(string(bytes.TrimSpace(raw)))}
	}
	return nil, nil, problemOf(resp, raw)
}

// plainToTLS is what Go's HTTPS server answers to plain HTTP.
var plainToTLS = []byte("Client sent an HTTP request to an HTTPS server")

func problemOf(resp *http.Response, raw []byte) *ProblemError {
	pe := &ProblemError{Status: resp.StatusCode}
	if json.Unmarshal(raw, &pe.Problem) != nil {
		pe.Problem = api.Problem{Status: resp.StatusCode, Title: http.StatusText(resp.StatusCode)}
	}
	pe.Field = pe.Problem.Field
	switch {
	case pe.Problem.RetryAfterMs != nil:
		pe.RetryAfter = time.Duration(*pe.Problem.RetryAfterMs) * time.Millisecond
	case resp.Header.Get(api.HeaderRetryAfter) != "":
		if s, err := strconv.Atoi(resp.Header.Get(api.HeaderRetryAfter)); err == nil && s >= 0 {
			pe.RetryAfter = time.Duration(s) * time.Second
		}
	}
	return pe
}

// NewLeaseID returns a fresh lease id: 192 bits from crypto/rand, base64url
// (32 characters, within the contract's 16 to 128 of A-Z a-z 0-9 - _).
func NewLeaseID() string {
	var b [24]byte
	_, _ = rand.Read(b[:]) // never fails on supported platforms (Go ≥1.24)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func ptr[T any](v T) *T { return &v }

// injectTrace sends the W3C traceparent (and tracestate) of ctx's span,
// if it has one, so that the gateway's spans join the caller's trace. It
// uses the TraceContext propagator itself rather than the global one,
// which is a no-op until an application sets it.
func injectTrace(ctx context.Context, req *http.Request) {
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
}
