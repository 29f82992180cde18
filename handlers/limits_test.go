package handlers_test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/api"
	"github.com/lockgate/lockgate/auth"
	"github.com/lockgate/lockgate/handlers"
	"github.com/lockgate/lockgate/lockcore"
)

// Beyond its rate, a caller gets 429 with Retry-After on every lock
// operation; another caller and the health routes are not held back.
func TestRateLimitPerCaller(t *testing.T) {
	t.Parallel()
	p, err := auth.Parse(strings.NewReader(appWriter + " * * writer\n" + appReader + " GET * reader\n"))
	if err != nil {
		t.Fatal(err)
	}
	g := newGateway(t, memNodes(3, nil), nil, &handlers.Options{
		Middleware: []func(http.Handler) http.Handler{p.Middleware}, Caller: p.Name, Grants: p.Grants,
		RateLimit: 0.001, RateBurst: 1, // one request, then none for 1000s
	})
	lease := []string{api.HeaderLeaseID, leaseA}
	for _, tc := range []struct {
		method, target string
		hdr            []string
	}{
		{PUT, "/locks/r1", nil},
		{PATCH, "/locks/r1", lease},
		{DELETE, "/locks/r1", lease},
		{GET, "/locks/r1", nil},
		{GET, "/locks", nil},
	} {
		// A fresh caller per operation: the writer's first request
		// spends its burst.
		g := newGateway(t, memNodes(3, nil), nil, &handlers.Options{
			Middleware: []func(http.Handler) http.Handler{p.Middleware}, Caller: p.Name, Grants: p.Grants,
			RateLimit: 0.001, RateBurst: 1,
		})
		first := g.do(t, GET, "/locks/warm-up", "", bearerOf(appWriter)...)
		if first.Status == http.StatusTooManyRequests {
			t.Fatalf("the first request was limited: %s", first)
		}
		res := g.do(t, tc.method, tc.target, "", append(bearerOf(appWriter), tc.hdr...)...)
		wantProblem(t, res, http.StatusTooManyRequests, api.ProblemRateLimited)
		if ra, err := strconv.Atoi(res.Header.Get(api.HeaderRetryAfter)); err != nil || ra < 900 || ra > 1000 {
			t.Errorf("%s %s: Retry-After %q, want about 1000", tc.method, tc.target, res.Header.Get(api.HeaderRetryAfter))
		}
		if p := res.problem(t); p.RetryAfterMs == nil || *p.RetryAfterMs < 900000 {
			t.Errorf("retry_after_ms %v", p.RetryAfterMs)
		}
	}
	// Another caller is not held back by the writer's use; nor is /healthz.
	g.do(t, GET, "/locks/x", "", bearerOf(appWriter)...)
	if res := g.do(t, GET, "/locks/x", "", bearerOf(appReader)...); res.Status == http.StatusTooManyRequests {
		t.Errorf("the reader was limited by the writer's requests: %s", res)
	}
	for range 3 {
		if res := g.do(t, GET, "/healthz", ""); res.Status != http.StatusOK {
			t.Errorf("/healthz: %s", res)
		}
	}
	// Unknown tokens still get 401, not 429.
	for range 3 {
		wantProblem(t, g.do(t, GET, "/locks/x", "", bearerOf("unknown-token-0123456789abcdef")...), http.StatusUnauthorized, api.ProblemUnauthorized)
	}
}

// HEAD answers on every GET route with the GET's status and headers and no
// body, through access control like the GET.
func TestHeadOnEveryGetRoute(t *testing.T) {
	t.Parallel()
	p, err := auth.Parse(strings.NewReader(appReader + " GET app: reader\n"))
	if err != nil {
		t.Fatal(err)
	}
	g := newGateway(t, memNodes(3, nil), nil, &handlers.Options{
		Middleware: []func(http.Handler) http.Handler{p.Middleware}, Grants: p.Grants, Metrics: http.NotFoundHandler(),
	})
	if _, err := g.locker.Acquire(context.Background(), lockcore.AcquireRequest{Resource: "app:1", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	srv := g.serve(t, nil)
	for _, tc := range []struct {
		target string
		status int
		auth   bool
	}{
		{"/healthz", 200, false}, {"/readyz", 200, false}, {"/openapi.yaml", 200, false},
		{"/locks/app:1", 200, true}, {"/locks", 200, true}, {"/locks/app:2", 404, true},
		{"/locks/other", 403, true}, {"/locks/app:1", 401, false}, {"/locks?limit=0", 400, true},
	} {
		head, err := http.NewRequest(http.MethodHead, srv.URL+tc.target, nil)
		if err != nil {
			t.Fatal(err)
		}
		getReq, _ := http.NewRequest(http.MethodGet, srv.URL+tc.target, nil)
		if tc.auth {
			head.Header.Set("Authorization", "Bearer "+appReader)
			getReq.Header.Set("Authorization", "Bearer "+appReader)
		}
		hres, err := srv.Client().Do(head)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(hres.Body)
		hres.Body.Close()
		gres, err := srv.Client().Do(getReq)
		if err != nil {
			t.Fatal(err)
		}
		gres.Body.Close()
		if hres.StatusCode != tc.status || gres.StatusCode != tc.status || len(body) != 0 ||
			hres.Header.Get("Content-Type") != gres.Header.Get("Content-Type") || hres.Header.Get("ETag") != gres.Header.Get("ETag") {
			t.Errorf("HEAD %s: %d %q (%d body bytes); GET: %d %q", tc.target, hres.StatusCode, hres.Header.Get("Content-Type"),
				len(body), gres.StatusCode, gres.Header.Get("Content-Type"))
		}
	}
}
