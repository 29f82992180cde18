package handlers_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockgate/lockgate/api"
	"github.com/lockgate/lockgate/auth"
	"github.com/lockgate/lockgate/handlers"
	"github.com/lockgate/lockgate/metrics"
)

func TestOperation(t *testing.T) {
	tests := []struct{ method, path, want string }{
		{PUT, "/locks/a", "acquire"},
		{PUT, "/locks/a/", "other"},
		{PATCH, "/locks/a", "extend"},
		{DELETE, "/locks/a", "release"},
		{GET, "/locks/a", "inspect"},
		{POST, "/locks/a", "other"},
		{GET, "/locks/", "other"},
		{GET, "/locks", "list"},
		{PUT, "/locks", "other"},
		{GET, "/locks/a/b", "other"},
		{GET, "/healthz", "healthz"},
		{GET, "/livez", "livez"},
		{GET, "/readyz", "readyz"},
		{GET, "/openapi.yaml", "openapi"},
		{GET, "/metrics", "metrics"},
		{PUT, "/metrics", "other"},
		{GET, "/ui", "ui"},
		{GET, "/ui/app.js", "ui"},
		{POST, "/ui/", "other"},
		{GET, "/uix", "other"},
		{GET, "/nope", "other"},
	}
	for _, tt := range tests {
		if got := handlers.Operation(tt.method, tt.path); got != tt.want {
			t.Errorf("Operation(%s, %s) = %q, want %q", tt.method, tt.path, got, tt.want)
		}
	}
}

type observed struct {
	op, outcome string
	status      int
}

type recorder struct {
	mu   sync.Mutex
	seen []observed
}

func (r *recorder) onRequest(op, outcome string, status int, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, observed{op, outcome, status})
}

func (r *recorder) last(t *testing.T) observed {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.seen) == 0 {
		t.Fatal("OnRequest was not called")
	}
	return r.seen[len(r.seen)-1]
}

// OnRequest sees every request once, with the outcome the access log
// records, including requests refused before routing.
func TestOnRequestReportsOperationAndOutcome(t *testing.T) {
	rec := &recorder{}
	g := newGateway(t, memNodes(3, nil), nil, &handlers.Options{OnRequest: rec.onRequest})
	tests := []struct {
		name, method, target, body string
		hdr                        []string
		want                       observed
	}{
		{"a new holder", PUT, "/locks/obs", "", []string{api.HeaderLeaseID, leaseA}, observed{"acquire", "acquired", 201}},
		{"the same lease again", PUT, "/locks/obs", "", []string{api.HeaderLeaseID, leaseA}, observed{"acquire", "reentered", 200}},
		{"another lease at once", PUT, "/locks/obs", "", nil, observed{"acquire", "taken", 409}},
		{"another lease after a wait", PUT, "/locks/obs", `{"wait_ms":50}`, nil, observed{"acquire", "timed_out", 409}},
		{"a body the contract refuses", PUT, "/locks/obs", `{"ttl_ms":"x"}`, nil, observed{"acquire", "bad_request", 400}},
		{"an extend", PATCH, "/locks/obs", "", []string{api.HeaderLeaseID, leaseA}, observed{"extend", "extended", 200}},
		{"an inspect", GET, "/locks/obs", "", nil, observed{"inspect", "held", 200}},
		{"a release", DELETE, "/locks/obs", "", []string{api.HeaderLeaseID, leaseA}, observed{"release", "released", 204}},
		{"a release of nothing", DELETE, "/locks/obs", "", []string{api.HeaderLeaseID, leaseA}, observed{"release", "not_held", 404}},
		{"a listing", GET, "/locks", "", nil, observed{"list", "listed", 200}},
		{"liveness", GET, "/healthz", "", nil, observed{"healthz", "", 200}},
		{"liveness by its Kubernetes name", GET, "/livez", "", nil, observed{"livez", "", 200}},
		{"readiness", GET, "/readyz", "", nil, observed{"readyz", "", 200}},
		{"an unknown route", GET, "/nope", "", nil, observed{"other", "not_found", 404}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := g.do(t, tt.method, tt.target, tt.body, tt.hdr...)
			if got := rec.last(t); got != tt.want || res.Status != tt.want.status {
				t.Errorf("OnRequest saw %+v (answer %d), want %+v", got, res.Status, tt.want)
			}
		})
	}
	if n := len(rec.seen); n != len(tests) {
		t.Errorf("OnRequest was called %d times for %d requests", n, len(tests))
	}
}

func TestMetricsRoute(t *testing.T) {
	m := metrics.New()
	g := newGateway(t, memNodes(1, nil), nil, &handlers.Options{OnRequest: m.Request, Metrics: m.Handler()})
	g.do(t, PUT, "/locks/m", "")
	res := g.do(t, GET, "/metrics", "")
	if res.Status != http.StatusOK {
		t.Fatalf("GET /metrics: %s", res)
	}
	if want := `lockgate_requests_total{op="acquire",outcome="acquired"} 1`; !strings.Contains(string(res.Body), want) {
		t.Errorf("GET /metrics lacks %s:\n%s", want, res.Body)
	}

}

// With the auth middleware in Options.Middleware, every lock operation
// answers the contract's 401 and 403, and health, readiness and metrics stay
// open.
func TestAccessControlAnswers(t *testing.T) {
	const (
		reader = "reader-token-0123456789abcdef"
		writer = "writer-token-0123456789abcdef"
	)
	tokens, err := auth.Parse(strings.NewReader(reader + " GET *\n" + writer + " * app:\n"))
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	rec := &recorder{}
	g := newGateway(t, memNodes(3, nil), nil, &handlers.Options{
		Middleware: []func(http.Handler) http.Handler{tokens.Middleware},
		OnRequest:  rec.onRequest, Metrics: m.Handler(),
	})
	bearer := func(tok string) []string { return []string{"Authorization", "Bearer " + tok} }
	lease := []string{api.HeaderLeaseID, leaseA}
	tests := []struct {
		name, method, target string
		hdr                  []string
		status               int
		outcome              string
	}{
		{"acquire without a token", PUT, "/locks/app:1", nil, 401, "unauthorized"},
		{"extend without a token", PATCH, "/locks/app:1", lease, 401, "unauthorized"},
		{"release without a token", DELETE, "/locks/app:1", lease, 401, "unauthorized"},
		{"inspect without a token", GET, "/locks/app:1", nil, 401, "unauthorized"},
		{"acquire with an unknown token", PUT, "/locks/app:1", bearer("unknown-token-0123456789abcdef"), 401, "unauthorized"},
		{"acquire outside the prefixes", PUT, "/locks/other:1", bearer(writer), 403, "forbidden"},
		{"acquire with a read-only token", PUT, "/locks/app:1", bearer(reader), 403, "forbidden"},
		{"extend with a read-only token", PATCH, "/locks/app:1", append(bearer(reader), lease...), 403, "forbidden"},
		{"release with a read-only token", DELETE, "/locks/app:1", append(bearer(reader), lease...), 403, "forbidden"},
		{"inspect outside the prefixes", GET, "/locks/other:1", bearer(writer), 403, "forbidden"},
		{"acquire within the prefixes", PUT, "/locks/app:1", append(bearer(writer), lease...), 201, "acquired"},
		{"inspect with a read-only token", GET, "/locks/app:1", bearer(reader), 200, "held"},
		{"release within the prefixes", DELETE, "/locks/app:1", append(bearer(writer), lease...), 204, "released"},
		{"health without a token", GET, "/healthz", nil, 200, ""},
		{"readiness without a token", GET, "/readyz", nil, 200, ""},
		{"metrics without a token", GET, "/metrics", nil, 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := g.do(t, tt.method, tt.target, "", tt.hdr...)
			if res.Status != tt.status {
				t.Fatalf("%s", res)
			}
			for _, tok := range []string{reader, writer} {
				if strings.Contains(string(res.Body), tok) || strings.Contains(res.Header.Get("WWW-Authenticate"), tok) {
					t.Errorf("the answer shows a token: %s", res)
				}
			}
			if got := rec.last(t); got.outcome != tt.outcome {
				t.Errorf("OnRequest outcome %q, want %q", got.outcome, tt.outcome)
			}
		})
	}
}
