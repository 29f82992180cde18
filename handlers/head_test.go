package handlers_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/auth"
	"github.com/lockgate/lockgate/handlers"
	"github.com/lockgate/lockgate/lockcore"
)

// Every HEAD operation openapi.yaml declares answers each of its statuses
// as declared: GET's status and headers (checkContract validates them
// against the HEAD operation, so its statuses count as exercised).
func TestEveryDeclaredHeadStatus(t *testing.T) {
	t.Parallel()
	const reader, writer = "head-reader-0123456789abcdef", "head-writer-0123456789abcdef"
	p, err := auth.Parse(strings.NewReader(reader + " GET app: reader\n" + writer + " PUT app: writer\n"))
	if err != nil {
		t.Fatal(err)
	}
	g := newGateway(t, memNodes(3, nil), nil, &handlers.Options{
		Middleware: []func(http.Handler) http.Handler{p.Middleware}, Grants: p.Grants, Metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write([]byte("# metrics\n"))
		}),
	})
	if _, err := g.locker.Acquire(context.Background(), lockcore.AcquireRequest{Resource: "app:1", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	limited := newGateway(t, memNodes(3, nil), nil, &handlers.Options{RateLimit: 0.001, RateBurst: 1})
	down := newGateway(t, append(memNodes(1, nil), downLister{downNode("down-1")}, downLister{downNode("down-2")}), nil, nil)

	for _, tc := range []struct {
		g      *gateway
		target string
		token  string
		status int
	}{
		{g, "/locks/app:1", reader, 200}, {g, "/locks/app:%20x", reader, 400}, {g, "/locks/app:1", "", 401},
		{g, "/locks/other", reader, 403}, {g, "/locks/app:2", reader, 404},
		{g, "/locks?prefix=app:", reader, 200}, {g, "/locks?limit=0", reader, 400}, {g, "/locks", "", 401},
		{g, "/locks", writer, 403},
		{g, "/healthz", "", 200}, {g, "/livez", "", 200}, {g, "/readyz", "", 200}, {g, "/metrics", "", 200}, {g, "/openapi.yaml", "", 200},
		{limited, "/locks/x", "", 404}, {limited, "/locks/x", "", 429}, {limited, "/locks", "", 429},
		{down, "/locks/x", "", 503}, {down, "/locks", "", 503}, {down, "/readyz", "", 503},
	} {
		var hdr []string
		if tc.token != "" {
			hdr = bearerOf(tc.token)
		}
		if res := tc.g.do(t, http.MethodHead, tc.target, "", hdr...); res.Status != tc.status {
			t.Errorf("HEAD %s: %d, want %d", tc.target, res.Status, tc.status)
		}
	}
}
