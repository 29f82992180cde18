// Package handlers adapts lockcore to HTTP: the chi router, middleware and
// thin handlers of the lockgate API described in openapi.yaml. It knows
// nothing of Redis; the lock service is the small Locker interface below.
package handlers

import (
	"context"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-playground/validator/v10"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	lockgate "github.com/lockgate/lockgate"
	"github.com/lockgate/lockgate/api"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/semaphore"
)

// Locker is what the handlers need of the lock service (*lockcore.Redlock).
type Locker interface {
	Acquire(ctx context.Context, req lockcore.AcquireRequest) (*lockcore.Lease, error)
	Extend(ctx context.Context, req lockcore.ExtendRequest) (*lockcore.Lease, error)
	Release(ctx context.Context, req lockcore.ReleaseRequest) error
	Inspect(ctx context.Context, resource string) (*lockcore.LockInfo, error)
	Ready(ctx context.Context) error
}

// Options tune the HTTP layer. A nil *Options means the defaults.
type Options struct {
	// Logger receives one access log line per request. Default: no logs.
	Logger *zerolog.Logger
	// BodyLimit bounds request bodies; larger ones get 413. Default 16 KiB.
	BodyLimit int64
	// DefaultTTL is the TTL of a PUT without ttl_ms. Default 30s.
	DefaultTTL time.Duration
	// ReadyTimeout bounds the node PINGs of /readyz. Default 1s.
	ReadyTimeout time.Duration
	// Middleware runs after logging and recovery and before validation and
	// the routes (e.g. authentication, metrics). Optional.
	Middleware []func(http.Handler) http.Handler
	// OnRequest, if set, is called once per request after the answer is
	// written, with the operation (see Operation), the outcome the access
	// log records ("acquired", "taken", "timed_out", "bad_request", ...;
	// "unauthorized" or "forbidden" for a 401 or 403 written by a
	// Middleware; "" when none was recorded, as for /livez), the status,
	// and the time taken. It must not block.
	OnRequest func(op, outcome string, status int, d time.Duration)
	// Metrics, if set, is served at GET /metrics (e.g. promhttp). It sits
	// behind the same logging and Middleware as every route.
	Metrics http.Handler
	// AllowForce lets DELETE /locks/{resource}?force=true break locks. Set
	// it only when a Middleware lets through only callers allowed to (the
	// auth file's force operation); false answers every force with 403.
	AllowForce bool
	// Grants, if set, returns the resource-name prefixes a GET /locks
	// caller may list, or all for every resource (auth's Grants). A listing
	// stays within them: a prefix under a grant is listed, a prefix that
	// covers grants is narrowed to them, any other gets 403; its cursors
	// are sealed and hold no name outside them. Default: every resource.
	Grants func(r *http.Request) (prefixes []string, all bool)
	// Caller, if set, names the caller in the audit log (e.g. the bearer
	// token's name, never the token); "" falls back to the client
	// certificate's subject, then "anonymous".
	Caller func(r *http.Request) string
	// RateLimit, if above 0, allows each caller (see Caller; the client
	// certificate's subject; else the client's IP address) that many
	// requests per second on /locks, /locks/..., /semaphores/...,
	// /rwlocks/... and /locksets/..., in
	// bursts of up to RateBurst (default 1); beyond, 429 with Retry-After.
	// Applied after Middleware, so unknown tokens still get 401.
	RateLimit float64
	RateBurst int
	// WaitersPerCaller, if above 0, is each caller's share of waiting
	// acquisitions (keyed as RateLimit is): past it, a PUT with wait_ms
	// gets 429 too-many-waiters with "limit":"caller", while other callers
	// still wait. It counts every acquisition with wait_ms in flight, each
	// an open connection, whether or not it has started waiting. The lock
	// service's own bound on waiters, all callers together
	// (lockcore.Options.MaxWaiters), answers 429 with "limit":"replica".
	WaitersPerCaller int
	// UI, if set, is the read-only web page (ui.Files), served at GET
	// /ui/ (index.html) and /ui/{file} without a token: its files hold no
	// lock state. The page reads /locks and /metrics, guarded as always.
	// GET /ui redirects to /ui/. Default: no page (/ui answers 404).
	UI fs.FS
	// Semaphores, if set, serves /semaphores/... (e.g. to export its InUse
	// as a metric). Default: semaphores over the Locker, made by New.
	Semaphores *semaphore.Semaphores
	// Watch, if set, serves the long poll and the event stream of GET
	// /locks/{resource} (see LockWatch). Default: a watch.Hub over the
	// Locker when it can be watched (a *lockcore.Redlock), with its
	// defaults; otherwise those requests answer as a plain GET.
	Watch LockWatch
	// StreamHeartbeat is how often an event stream without events gets a
	// comment line, so that proxies keep it open and a client that left
	// is found. Default 15s.
	StreamHeartbeat time.Duration
	// Tracer, if set, gets one server span per request (see traced), the
	// child of the request's W3C traceparent; the lock service adds its
	// own spans under it. Default: no tracing.
	Tracer trace.TracerProvider
	// Drain, if set, is the gateway's shutdown: once it begins /readyz
	// answers 503 shutting-down, and EndStreams ends every event stream
	// with a shutdown event. Default: never draining.
	Drain *Drain
	// StreamIdle ends an event stream that had no event for that long;
	// the client connects again and starts from the current state.
	// Default 5m.
	StreamIdle time.Duration
}

type server struct {
	locker   Locker
	opt      Options
	validate *validator.Validate
	cursors  *cursorSeal
	waiters  *waiterShares // nil: no share per caller
	sems     *semaphore.Semaphores
	rw       RWLocker  // nil: no /rwlocks
	sets     SetLocker // nil: no /locksets
	watch    LockWatch // nil: no long poll, no stream
}

// New returns the lockgate HTTP API in front of locker. Every request is
// validated against openapi.yaml before it reaches a handler; every error is
// an RFC 9457 problem. New fails only if the embedded OpenAPI document is
// invalid.
func New(locker Locker, opts *Options) (http.Handler, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		nop := zerolog.Nop()
		o.Logger = &nop
	}
	if o.BodyLimit <= 0 {
		o.BodyLimit = 16 << 10
	}
	if o.DefaultTTL <= 0 {
		o.DefaultTTL = api.DefaultTTLms * time.Millisecond
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = time.Second
	}
	if o.StreamHeartbeat <= 0 {
		o.StreamHeartbeat = defaultHeartbeat
	}
	if o.StreamIdle <= 0 {
		o.StreamIdle = defaultStreamIdle
	}
	contract, err := newContract(lockgate.OpenAPI)
	if err != nil {
		return nil, err
	}
	contract.bounds = boundsOf(locker)
	s := &server{locker: locker, opt: o, validate: newValidator(), cursors: newCursorSeal()}
	s.sems = o.Semaphores
	if s.sems == nil {
		s.sems = semaphore.New(locker)
	}
	s.watch = watchOf(&o, locker)
	s.rw, _ = locker.(RWLocker)
	s.sets, _ = locker.(SetLocker)
	if o.WaitersPerCaller > 0 {
		s.waiters = &waiterShares{share: o.WaitersPerCaller, callers: map[string]int{}}
	}

	r := chi.NewRouter()
	nodes, _ := locker.(nodeReporter)
	r.Use(accessLog(*o.Logger, nodes), s.audit, recoverer)
	if o.Drain != nil {
		r.Use(o.Drain.closeConnections)
	}
	if o.Tracer != nil {
		r.Use(traced(o.Tracer))
	}
	r.Use(headAsGet)
	if o.OnRequest != nil {
		r.Use(observe(o.OnRequest))
	}
	r.Use(o.Middleware...)
	if o.RateLimit > 0 {
		r.Use(s.rateLimit(o.RateLimit, o.RateBurst))
	}
	r.Use(contract.enforce(o.BodyLimit))
	r.NotFound(notFound)
	router := r
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		// RFC 9110 §15.5.6: a 405 lists the methods the resource supports.
		var allow []string
		for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodPatch, http.MethodDelete} {
			if router.Match(chi.NewRouteContext(), m, r.URL.Path) {
				allow = append(allow, m)
			}
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		problem(w, r, http.StatusMethodNotAllowed, apiMethodNotAllowed, r.Method+" is not allowed on "+r.URL.Path)
	})

	r.Get("/healthz", s.healthz)
	r.Get("/livez", s.healthz)
	r.Get("/readyz", s.readyz)
	r.Get("/openapi.yaml", serveSpec)
	if o.Metrics != nil {
		r.Method(http.MethodGet, "/metrics", o.Metrics)
	}
	if o.UI != nil {
		ui := serveUI(o.UI)
		r.Get("/ui", ui)
		r.Get("/ui/*", ui)
	}
	r.Get("/locks", s.list)
	// Exact paths only: chi's Route would also serve "/locks/x/", a path
	// the contract does not know and so would not check (body limit,
	// media type, headers). That path is a name with a slash: notFound's
	// 400.
	r.Put("/locks/{resource}", s.acquire)
	r.Patch("/locks/{resource}", s.extend)
	r.Delete("/locks/{resource}", s.release)
	r.Get("/locks/{resource}", s.inspect)
	s.semaphoreRoutes(r)
	s.rwRoutes(r)
	s.setRoutes(r)
	return r, nil
}

func serveSpec(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(lockgate.OpenAPI)
}
