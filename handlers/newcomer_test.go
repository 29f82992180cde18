package handlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	lockgate "github.com/lockgate/lockgate"
	"github.com/lockgate/lockgate/api"
	"github.com/lockgate/lockgate/handlers"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
)

var problemSchema = sync.OnceValues(func() (*openapi3.Schema, error) {
	doc, err := openapi3.NewLoader().LoadFromData(lockgate.OpenAPI)
	if err != nil {
		return nil, err
	}
	ref := doc.Components.Schemas["Problem"]
	if ref == nil || ref.Value == nil {
		return nil, errors.New("openapi.yaml has no Problem schema")
	}
	return ref.Value, nil
})

// checkProblemSchema fails t unless res's body validates against
// openapi.yaml's Problem schema: for answers on paths the contract has no
// operation for, where the operation's own responses cannot be checked.
func checkProblemSchema(t *testing.T, res response) {
	t.Helper()
	schema, err := problemSchema()
	if err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	var v any
	if err := json.Unmarshal(res.Body, &v); err != nil {
		t.Errorf("status %d: body is not JSON: %v", res.Status, err)
		return
	}
	if err := schema.VisitJSON(v); err != nil {
		t.Errorf("status %d: body does not match openapi.yaml's Problem: %v: %s", res.Status, err, res.Body)
	}
}

// The errors a newcomer meets first name what to do about them.
func TestOutOfRangeNumbersNameTheConfiguredBounds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		core *lockcore.Options
		want map[string]string // body → the bounds the detail must name
	}{
		{"default bounds", nil, map[string]string{
			`{"ttl_ms":0}`:        "ttl_ms: must be between 100 and 3600000",
			`{"ttl_ms":50}`:       "ttl_ms: must be between 100 and 3600000",
			`{"ttl_ms":3600001}`:  "ttl_ms: must be between 100 and 3600000",
			`{"ttl_ms":86400001}`: "ttl_ms: must be between 100 and 3600000",
			`{"wait_ms":-1}`:      "wait_ms: must be between 0 and 300000",
			`{"wait_ms":300001}`:  "wait_ms: must be between 0 and 300000",
		}},
		{"configured bounds", &lockcore.Options{MinTTL: 200 * time.Millisecond, MaxTTL: 10 * time.Second, MaxWait: 2 * time.Second}, map[string]string{
			`{"ttl_ms":0}`:        "ttl_ms: must be between 200 and 10000",
			`{"ttl_ms":199}`:      "ttl_ms: must be between 200 and 10000",
			`{"ttl_ms":10001}`:    "ttl_ms: must be between 200 and 10000",
			`{"ttl_ms":86400001}`: "ttl_ms: must be between 200 and 10000",
			`{"wait_ms":-5}`:      "wait_ms: must be between 0 and 2000",
			`{"wait_ms":2001}`:    "wait_ms: must be between 0 and 2000",
			`{"wait_ms":300001}`:  "wait_ms: must be between 0 and 2000",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGateway(t, memNodes(1, nil), tc.core, &handlers.Options{DefaultTTL: 5 * time.Second})
			l := g.acquire(t, "held", "", `{"ttl_ms":5000}`)
			for body, want := range tc.want {
				p := wantProblem(t, g.do(t, PUT, "/locks/r", body), http.StatusBadRequest, api.ProblemInvalid)
				field, _, _ := strings.Cut(want, ":")
				if p.Detail != want || p.Field != field {
					t.Errorf("PUT %s: detail %q field %q, want %q field %q", body, p.Detail, p.Field, want, field)
				}
				if !strings.HasPrefix(body, `{"ttl_ms"`) {
					continue
				}
				p = wantProblem(t, g.do(t, PATCH, "/locks/held", body, api.HeaderLeaseID, l.LeaseID), http.StatusBadRequest, api.ProblemInvalid)
				if p.Detail != want {
					t.Errorf("PATCH %s: detail %q, want %q", body, p.Detail, want)
				}
			}
		})
	}
}

func TestAResourceNameWithASlashIsRefusedNamingTheRule(t *testing.T) {
	t.Parallel()
	g := defaultGateway(t)
	l := g.acquire(t, "a", "", "")
	for _, method := range []string{GET, PUT, PATCH, DELETE, POST, "HEAD"} {
		for _, target := range []string{"/locks/a/b", "/locks/a/b/c", "/locks//a", "/locks/a//", "/locks/a/"} {
			res := g.do(t, method, target, "", api.HeaderLeaseID, l.LeaseID)
			if method == "HEAD" {
				if res.Status != http.StatusBadRequest {
					t.Errorf("HEAD %s: %d, want 400", target, res.Status)
				}
				continue
			}
			p := wantProblem(t, res, http.StatusBadRequest, api.ProblemInvalid)
			if p.Field != "resource" || !strings.Contains(p.Detail, "1 to 200 characters of A-Z a-z 0-9 . _ - :") {
				t.Errorf("%s %s: field %q detail %q, want the resource rule", method, target, p.Field, p.Detail)
			}
		}
	}
	// A trailing slash once reached the handlers without the contract's
	// checks (found by FuzzResourcePath): a body over the limit, or not
	// JSON, took the lock.
	for _, ct := range []string{api.MediaJSON, "text/plain"} {
		body := `{"owner":"x"}` + strings.Repeat(" ", 20<<10)
		p := wantProblem(t, g.do(t, PUT, "/locks/b/", body, "Content-Type", ct), http.StatusBadRequest, api.ProblemInvalid)
		if p.Field != "resource" {
			t.Errorf("PUT /locks/b/ (%s): field %q, want resource", ct, p.Field)
		}
	}
	wantProblem(t, g.do(t, GET, "/locks/b", ""), http.StatusNotFound, api.ProblemNotHeld)
	// Not below a lock: still 404.
	for _, target := range []string{"/locks/", "/lock/a/b", "/nope/locks/a/b"} {
		wantProblem(t, g.do(t, GET, target, ""), http.StatusNotFound, api.ProblemNotFound)
	}
	// The lock named "a" was not touched by any of it.
	wantLease(t, g.do(t, PATCH, "/locks/a", "", api.HeaderLeaseID, l.LeaseID), http.StatusOK, "a")
}

func TestTrailingDataIsA400NamingTheBody(t *testing.T) {
	t.Parallel()
	g := defaultGateway(t)
	l := g.acquire(t, "held", "", "")
	for _, body := range []string{`{} {}`, `{"ttl_ms":1000} x`, `{"ttl_ms":1000}]`, `{}}`, `{} null`} {
		for _, req := range []struct{ method, target string }{{PUT, "/locks/r"}, {PATCH, "/locks/held"}} {
			res := g.do(t, req.method, req.target, body, api.HeaderLeaseID, l.LeaseID)
			p := wantProblem(t, res, http.StatusBadRequest, api.ProblemInvalid)
			if p.Field != "body" || !strings.HasPrefix(p.Detail, "body: ") {
				t.Errorf("%s %q: field %q detail %q, want field body", req.method, body, p.Field, p.Detail)
			}
		}
	}
	if res := g.do(t, GET, "/locks/r", ""); res.Status != http.StatusNotFound {
		t.Errorf("a refused PUT took the lock: %s", res)
	}
}

func TestNoQuorumWordingCountsNodesInGoodEnglish(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		nodes []lockcore.Node
		want  string
	}{
		{[]lockcore.Node{downNode("d1")}, "0 of the 1 lock node needed answered; try again"},
		{[]lockcore.Node{memnode.New(nil), downNode("d1"), downNode("d2")}, "1 of the 2 lock nodes needed answered; try again"},
	} {
		g := newGateway(t, tc.nodes, nil, nil)
		p := wantProblem(t, g.do(t, GET, "/readyz", ""), http.StatusServiceUnavailable, api.ProblemNoQuorum)
		if p.Detail != tc.want {
			t.Errorf("%d nodes: detail %q, want %q", len(tc.nodes), p.Detail, tc.want)
		}
		err := g.locker.Ready(context.Background())
		wantErr := map[int]string{1: "lockcore: check: 0 of the 1 node needed answered", 3: "lockcore: check: 1 of the 2 nodes needed answered"}[len(tc.nodes)]
		if err == nil || !strings.HasPrefix(err.Error(), wantErr+": ") {
			t.Errorf("%d nodes: error %v, want it to start %q", len(tc.nodes), err, wantErr)
		}
	}
}
