package handlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockgate/lockgate/api"
	"github.com/lockgate/lockgate/auth"
	"github.com/lockgate/lockgate/handlers"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
)

// setGateway is defaultGateway with a node timeout that a loaded machine
// (-race, tests in parallel) does not miss: these tests take several
// locks per request.
func setGateway(t *testing.T) *gateway {
	return newGateway(t, memNodes(3, nil), &lockcore.Options{NodeTimeout: 200 * time.Millisecond, MinTTL: 400 * time.Millisecond}, nil)
}

func (r response) lockSet(t *testing.T, status int) api.LockSet {
	t.Helper()
	if r.Status != status {
		t.Fatalf("got %s, want %d", r, status)
	}
	var s api.LockSet
	if err := json.Unmarshal(r.Body, &s); err != nil {
		t.Fatalf("body is not a lock set: %v: %s", err, r.Body)
	}
	if r.Header.Get(api.HeaderLeaseID) != s.LeaseID || s.LeaseID == "" || r.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("headers %v disagree with the body %+v", r.Header, s)
	}
	return s
}

func (r response) lockSetInfo(t *testing.T) api.LockSetInfo {
	t.Helper()
	if r.Status != http.StatusOK {
		t.Fatalf("GET: %s, want 200", r)
	}
	var info api.LockSetInfo
	if err := json.Unmarshal(r.Body, &info); err != nil {
		t.Fatalf("body is not a lock set's state: %v: %s", err, r.Body)
	}
	return info
}

// A set over HTTP: taken whole with a token per member (in the canonical
// order, whatever order the path lists), re-entered, refused whole with
// the member at fault named, extended, inspected and released whole. Its
// members are the locks /locks/{member}.
func TestLockSets(t *testing.T) {
	t.Parallel()
	g := setGateway(t)
	s := g.do(t, PUT, "/locksets/c,a,b", `{"ttl_ms":30000,"owner":"batch"}`).lockSet(t, http.StatusCreated)
	if s.Resources != "a,b,c" || len(s.Members) != 3 || s.Members[0].Resource != "a" || s.Members[2].Resource != "c" ||
		s.ValidityMs <= 0 || s.ValidityMs > 30000 || s.TTLms != 30000 {
		t.Fatalf("set: %+v", s)
	}
	lease := []string{api.HeaderLeaseID, s.LeaseID}
	if loc := g.do(t, PUT, "/locksets/b,c,a", "", lease...).Header.Get("Location"); loc != "" {
		t.Errorf("a re-entry answered Location %q", loc)
	}
	again := g.do(t, PUT, "/locksets/b,c,a", `{"ttl_ms":30000}`, lease...).lockSet(t, http.StatusOK)
	for i := range s.Members {
		if again.Members[i] != s.Members[i] {
			t.Fatalf("re-entry: %+v, want %+v", again.Members, s.Members)
		}
	}
	// Each member is the lock of its name.
	wantProblem(t, g.do(t, PUT, "/locks/b", ""), http.StatusConflict, api.ProblemTaken)
	var b api.LockInfo
	if err := json.Unmarshal(g.do(t, GET, "/locks/b", "").Body, &b); err != nil || b.FencingToken != s.Members[1].FencingToken || b.Owner != "batch" {
		t.Fatalf("GET /locks/b: %+v, %v", b, err)
	}
	// A set that overlaps is refused whole, naming the member, and leaves
	// its free members free.
	p := wantProblem(t, g.do(t, PUT, "/locksets/x,c,y", ""), http.StatusConflict, api.ProblemTaken)
	if !strings.Contains(p.Detail, "c") || p.RetryAfterMs == nil || *p.RetryAfterMs <= 0 {
		t.Fatalf("refusal: %+v", p)
	}
	wantProblem(t, g.do(t, GET, "/locksets/x,y", ""), http.StatusNotFound, api.ProblemNotHeld)
	if res := g.do(t, http.MethodHead, "/locksets/x,y", ""); res.Status != http.StatusNotFound {
		t.Fatalf("HEAD of a free set: %s", res)
	}
	res := g.do(t, GET, "/locksets/c,b,a,z", "")
	if strings.Contains(string(res.Body), s.LeaseID) {
		t.Fatalf("GET shows the lease id: %s", res)
	}
	info := res.lockSetInfo(t)
	if info.Resources != "a,b,c,z" || !info.Members[0].Held || info.Members[0].FencingToken != s.Members[0].FencingToken ||
		info.Members[3].Held || info.Members[3].Owner != nil || *info.Members[1].Owner != "batch" {
		t.Fatalf("GET: %+v", info)
	}
	if res := g.do(t, http.MethodHead, "/locksets/a,b", ""); res.Status != http.StatusOK {
		t.Fatalf("HEAD: %s", res)
	}
	ext := g.do(t, PATCH, "/locksets/a,b,c", `{"ttl_ms":60000}`, lease...).lockSet(t, http.StatusOK)
	if ext.TTLms != 60000 || ext.ValidityMs <= 30000 || ext.Members[1].FencingToken != s.Members[1].FencingToken {
		t.Fatalf("extend: %+v", ext)
	}
	wantProblem(t, g.do(t, PATCH, "/locksets/a,b,c", "", api.HeaderLeaseID, leaseA), http.StatusNotFound, api.ProblemNotHeld)
	if res := g.do(t, DELETE, "/locksets/c,b,a", "", lease...); res.Status != http.StatusNoContent {
		t.Fatalf("release: %s", res)
	}
	wantProblem(t, g.do(t, DELETE, "/locksets/a,b,c", "", lease...), http.StatusNotFound, api.ProblemNotHeld)
	if l := wantLease(t, g.do(t, PUT, "/locks/b", ""), http.StatusCreated, "b"); l.FencingToken <= s.Members[1].FencingToken {
		t.Fatalf("the next holder of b: token %d, not above the set's %d", l.FencingToken, s.Members[1].FencingToken)
	}
}

// A PATCH that finds a member broken answers 404 naming it, and releases
// the set's other members.
func TestALostLockSetIsReleasedWhole(t *testing.T) {
	t.Parallel()
	g := setGateway(t)
	rl := g.locker
	s := g.do(t, PUT, "/locksets/p,q", "").lockSet(t, http.StatusCreated)
	if _, err := rl.ForceRelease(context.Background(), "q"); err != nil {
		t.Fatal(err)
	}
	p := wantProblem(t, g.do(t, PATCH, "/locksets/p,q", "", api.HeaderLeaseID, s.LeaseID), http.StatusNotFound, api.ProblemNotHeld)
	if !strings.Contains(p.Detail, "q") {
		t.Fatalf("detail %q names no member", p.Detail)
	}
	wantProblem(t, g.do(t, GET, "/locksets/p,q", ""), http.StatusNotFound, api.ProblemNotHeld)
}

// A set that waits over HTTP is granted once the member in its way is
// released.
func TestLockSetWaits(t *testing.T) {
	t.Parallel()
	g := setGateway(t)
	srv := g.serve(t, nil)
	l := wantLease(t, g.do(t, PUT, "/locks/w2", ""), http.StatusCreated, "w2")
	waiter := sendAsync(context.Background(), srv, PUT, "/locksets/w1,w2,w3", `{"ttl_ms":30000,"wait_ms":60000}`)
	deadline := time.Now().Add(30 * time.Second)
	for g.do(t, GET, "/locks/w1", "").Status != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("the set never took w1")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if res := g.do(t, DELETE, "/locks/w2", "", api.HeaderLeaseID, l.LeaseID); res.Status != http.StatusNoContent {
		t.Fatal(res)
	}
	ans := await(t, waiter, 30*time.Second, "the set")
	if ans.err != nil {
		t.Fatal(ans.err)
	}
	checkContract(t, PUT, "/locksets/w1,w2,w3", ans.res)
	if s := ans.res.lockSet(t, http.StatusCreated); s.Members[1].FencingToken <= l.FencingToken {
		t.Fatalf("w2's token %d is not above the earlier holder's %d", s.Members[1].FencingToken, l.FencingToken)
	}
}

func TestLockSetsRefuseBadInput(t *testing.T) {
	t.Parallel()
	g := setGateway(t)
	lease := []string{api.HeaderLeaseID, leaseA}
	many := make([]string, 65)
	for i := range many {
		many[i] = "m" + string(rune('A'+i%26)) + string(rune('a'+i/26))
	}
	for _, tc := range []struct {
		name, method, target, body string
		hdr                        []string
		status                     int
		typ, field                 string
	}{
		{"a member named twice", PUT, "/locksets/a,b,a", "", nil, 400, api.ProblemInvalid, "resources"},
		{"65 members", PUT, "/locksets/" + strings.Join(many, ","), "", nil, 400, api.ProblemInvalid, "resources"},
		{"an empty member", PUT, "/locksets/a,,b", "", nil, 400, api.ProblemInvalid, ""},
		{"a bad member", PUT, "/locksets/a,b%20c", "", nil, 400, api.ProblemInvalid, ""},
		{"a TTL below the server's", PUT, "/locksets/a,b", `{"ttl_ms":1}`, nil, 400, api.ProblemInvalid, "ttl_ms"},
		{"an unknown field", PUT, "/locksets/a,b", `{"members":["a"]}`, nil, 400, api.ProblemInvalid, ""},
		{"a body too large", PUT, "/locksets/a,b", `{"owner":"` + strings.Repeat("o", 20000) + `"}`, nil, 413, api.ProblemTooLarge, ""},
		{"not JSON", PUT, "/locksets/a,b", `ttl=1`, []string{"Content-Type", "text/plain"}, 415, api.ProblemMediaType, ""},
		{"no lease on extend", PATCH, "/locksets/a,b", "", nil, 400, api.ProblemInvalid, ""},
		{"no lease on release", DELETE, "/locksets/a,b", "", nil, 400, api.ProblemInvalid, ""},
		{"a member named twice on release", DELETE, "/locksets/a,a", "", lease, 400, api.ProblemInvalid, "resources"},
		{"a bad member to inspect", GET, "/locksets/a,b%20c", "", nil, 400, api.ProblemInvalid, ""},
		{"a member named twice to inspect", GET, "/locksets/b,b", "", nil, 400, api.ProblemInvalid, "resources"},
		{"a TTL below the server's on extend", PATCH, "/locksets/a,b", `{"ttl_ms":1}`, lease, 400, api.ProblemInvalid, "ttl_ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := wantProblem(t, g.do(t, tc.method, tc.target, tc.body, tc.hdr...), tc.status, tc.typ)
			if tc.field != "" && p.Field != tc.field {
				t.Errorf("field %q, want %q: %+v", p.Field, tc.field, p)
			}
		})
	}
	// A member that breaks the name rule is told so, not the pattern.
	p := wantProblem(t, g.do(t, PUT, "/locksets/a,,b", ""), http.StatusBadRequest, api.ProblemInvalid)
	if want := "resources: each member must be 1 to 200 characters of A-Z a-z 0-9 . _ - : (it is empty)"; p.Detail != want || p.Field != "resources" {
		t.Errorf("detail %q, want %q", p.Detail, want)
	}
}

// Access control checks every member: a token allowed some members only
// gets 403, and nothing is taken.
func TestLockSetAccessControlRateLimitAndNoQuorum(t *testing.T) {
	t.Parallel()
	lease := []string{api.HeaderLeaseID, leaseA}
	ops := []struct {
		method, target, body string
		hdr                  []string
	}{
		{PUT, "/locksets/app:a,app:b", "", nil},
		{PATCH, "/locksets/app:a,app:b", "", lease},
		{DELETE, "/locksets/app:a,app:b", "", lease},
		{GET, "/locksets/app:a,app:b", "", nil},
	}
	g := authGateway(t, nil)
	for _, op := range ops {
		wantProblem(t, g.do(t, op.method, op.target, op.body, op.hdr...), http.StatusUnauthorized, api.ProblemUnauthorized)
		mixed := strings.Replace(op.target, "app:b", "other:b", 1)
		wantProblem(t, g.do(t, op.method, mixed, op.body, append(bearerOf(appWriter), op.hdr...)...), http.StatusForbidden, api.ProblemForbidden)
	}
	wantProblem(t, g.do(t, GET, "/locks/app:a", "", bearerOf(appWriter)...), http.StatusNotFound, api.ProblemNotHeld)
	if res := g.do(t, PUT, "/locksets/app:a,app:b", "", bearerOf(appWriter)...); res.Status != http.StatusCreated {
		t.Fatalf("a token whose prefix covers every member: %s", res)
	}
	p, err := auth.Parse(strings.NewReader(appWriter + " * * writer\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range ops {
		g := newGateway(t, memNodes(3, nil), nil, &handlers.Options{
			Middleware: []func(http.Handler) http.Handler{p.Middleware}, Caller: p.Name,
			RateLimit: 0.001, RateBurst: 1,
		})
		if first := g.do(t, GET, "/locksets/warm-up", "", bearerOf(appWriter)...); first.Status == http.StatusTooManyRequests {
			t.Fatalf("the first request was limited: %s", first)
		}
		wantProblem(t, g.do(t, op.method, op.target, op.body, append(bearerOf(appWriter), op.hdr...)...), http.StatusTooManyRequests, api.ProblemRateLimited)
	}
	down := newGateway(t, []lockcore.Node{memnode.New(nil), downNode("down-1"), downNode("down-2")}, nil, nil)
	for _, op := range ops {
		wantProblem(t, down.do(t, op.method, op.target, op.body, op.hdr...), http.StatusServiceUnavailable, api.ProblemNoQuorum)
	}
}

func TestLockSetOperations(t *testing.T) {
	for _, tc := range []struct{ method, path, want string }{
		{PUT, "/locksets/a,b", "set_acquire"},
		{PATCH, "/locksets/a,b", "set_extend"},
		{DELETE, "/locksets/a,b", "set_release"},
		{GET, "/locksets/a", "set_inspect"},
		{GET, "/locksets/a/b", "other"},
		{GET, "/locksets/", "other"},
	} {
		if got := handlers.Operation(tc.method, tc.path); got != tc.want {
			t.Errorf("Operation(%s, %s) = %q, want %q", tc.method, tc.path, got, tc.want)
		}
	}
}

// Every state-changing lock set request logs an audit line with its
// operation and members, never the lease id.
func TestLockSetAuditLines(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	log := zerolog.New(&logs)
	g := authGateway(t, &log)
	auth := bearerOf(appWriter)
	s := g.do(t, PUT, "/locksets/app:b,app:a", "", auth...).lockSet(t, http.StatusCreated)
	lease := append(auth, api.HeaderLeaseID, s.LeaseID)
	g.do(t, PATCH, "/locksets/app:b,app:a", "", lease...).lockSet(t, http.StatusOK)
	g.do(t, GET, "/locksets/app:b,app:a", "", auth...).lockSetInfo(t)
	if res := g.do(t, DELETE, "/locksets/app:b,app:a", "", lease...); res.Status != http.StatusNoContent {
		t.Fatal(res)
	}
	if strings.Contains(logs.String(), s.LeaseID) {
		t.Fatal("a log line holds the lease id")
	}
	var ops []string
	for line := range strings.Lines(logs.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		if m["audit"] == true {
			ops = append(ops, m["op"].(string))
			if m["resource"] != "app:b,app:a" || m["caller"] != "writer" {
				t.Errorf("audit line %s", line)
			}
		}
	}
	if want := []string{"set_acquire", "set_extend", "set_release"}; !slices.Equal(ops, want) {
		t.Fatalf("audit ops %v, want %v\n%s", ops, want, logs.String())
	}
}
