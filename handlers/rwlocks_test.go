package handlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockgate/lockgate/api"
	"github.com/lockgate/lockgate/auth"
	"github.com/lockgate/lockgate/handlers"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
	"github.com/lockgate/lockgate/lockcore/nodetest"
)

func (r response) rwLease(t *testing.T, status int) api.RWLease {
	t.Helper()
	if r.Status != status {
		t.Fatalf("got %s, want %d", r, status)
	}
	var l api.RWLease
	if err := json.Unmarshal(r.Body, &l); err != nil {
		t.Fatalf("body is not a readers-writer lease: %v: %s", err, r.Body)
	}
	if r.Header.Get(api.HeaderLeaseID) != l.LeaseID || l.LeaseID == "" ||
		r.Header.Get(api.HeaderFencingToken) != strconv.FormatInt(l.FencingToken, 10) {
		t.Fatalf("headers %v disagree with the body %+v", r.Header, l)
	}
	return l
}

func (r response) rwInfo(t *testing.T) api.RWLockInfo {
	t.Helper()
	if r.Status != http.StatusOK {
		t.Fatalf("GET: %s, want 200", r)
	}
	var info api.RWLockInfo
	if err := json.Unmarshal(r.Body, &info); err != nil {
		t.Fatalf("body is not a readers-writer lock: %v: %s", err, r.Body)
	}
	return info
}

const shared = `{"mode":"shared","ttl_ms":30000,"owner":"reader"}`

func TestRWLocks(t *testing.T) {
	t.Parallel()
	g := defaultGateway(t)
	a := g.do(t, PUT, "/rwlocks/doc", shared).rwLease(t, http.StatusCreated)
	b := g.do(t, PUT, "/rwlocks/doc", shared).rwLease(t, http.StatusCreated)
	if a.Mode != api.ModeShared || b.FencingToken <= a.FencingToken || a.Resource != "doc" {
		t.Fatalf("two readers: %+v %+v", a, b)
	}
	lease := func(l api.RWLease) []string { return []string{api.HeaderLeaseID, l.LeaseID} }
	again := g.do(t, PUT, "/rwlocks/doc", shared, lease(a)...).rwLease(t, http.StatusOK)
	if again.FencingToken != a.FencingToken {
		t.Fatalf("re-entry: %+v, want token %d", again, a.FencingToken)
	}
	taken := g.do(t, PUT, "/rwlocks/doc", `{"ttl_ms":30000}`)
	if p := wantProblem(t, taken, http.StatusConflict, api.ProblemTaken); p.RetryAfterMs == nil || *p.RetryAfterMs <= 0 {
		t.Errorf("lock-taken without retry_after_ms: %s", taken)
	}
	up := wantProblem(t, g.do(t, PUT, "/rwlocks/doc", `{"mode":"exclusive"}`, lease(a)...), http.StatusConflict, api.ProblemModeHeld)
	if !strings.Contains(up.Detail, "upgrade") {
		t.Errorf("mode-held: %+v", up)
	}
	res := g.do(t, GET, "/rwlocks/doc", "")
	if strings.Contains(string(res.Body), a.LeaseID) || strings.Contains(string(res.Body), b.LeaseID) {
		t.Fatalf("GET shows a lease id: %s", res)
	}
	info := res.rwInfo(t)
	if info.Mode != api.ModeShared || len(info.Holders) != 2 || info.Holders[0].FencingToken != a.FencingToken ||
		info.Holders[1].Owner != "reader" || info.WriterWaiting {
		t.Fatalf("GET: %+v", info)
	}
	if res := g.do(t, http.MethodHead, "/rwlocks/doc", ""); res.Status != http.StatusOK {
		t.Fatalf("HEAD: %s", res)
	}
	ext := g.do(t, PATCH, "/rwlocks/doc", `{"ttl_ms":60000}`, lease(a)...).rwLease(t, http.StatusOK)
	if ext.FencingToken != a.FencingToken || ext.TTLms != 60000 {
		t.Fatalf("extend: %+v", ext)
	}
	wantProblem(t, g.do(t, PATCH, "/rwlocks/doc", "", api.HeaderLeaseID, leaseA), http.StatusNotFound, api.ProblemNotHeld)
	for _, l := range []api.RWLease{a, b} {
		if res := g.do(t, DELETE, "/rwlocks/doc", "", lease(l)...); res.Status != http.StatusNoContent {
			t.Fatalf("release: %s", res)
		}
	}
	wantProblem(t, g.do(t, DELETE, "/rwlocks/doc", "", lease(a)...), http.StatusNotFound, api.ProblemNotHeld)
	wantProblem(t, g.do(t, GET, "/rwlocks/doc", ""), http.StatusNotFound, api.ProblemNotHeld)
	if res := g.do(t, http.MethodHead, "/rwlocks/doc", ""); res.Status != http.StatusNotFound {
		t.Fatalf("HEAD of a free lock: %s", res)
	}
	w := g.do(t, PUT, "/rwlocks/doc", "").rwLease(t, http.StatusCreated)
	if w.Mode != api.ModeExclusive || w.FencingToken <= b.FencingToken {
		t.Fatalf("writer: %+v, want exclusive with a token above the readers' %d", w, b.FencingToken)
	}
	if loc := g.do(t, PUT, "/rwlocks/doc", "", lease(w)...).Header.Get("Location"); loc != "/rwlocks/doc" {
		t.Errorf("Location %q", loc)
	}
	if info := g.do(t, GET, "/rwlocks/doc", "").rwInfo(t); info.Mode != api.ModeExclusive || len(info.Holders) != 1 {
		t.Fatalf("GET with a writer: %+v", info)
	}
	wantProblem(t, g.do(t, PUT, "/rwlocks/doc", shared), http.StatusConflict, api.ProblemTaken)
	// The readers-writer lock doc is not the lock doc.
	wantLease(t, g.do(t, PUT, "/locks/doc", ""), http.StatusCreated, "doc")
}

// A writer that waits over HTTP keeps new readers out (writer_waiting)
// and is granted once the reader holding leaves.
func TestRWLockWaitingWriter(t *testing.T) {
	t.Parallel()
	g := defaultGateway(t)
	srv := g.serve(t, nil)
	r := g.do(t, PUT, "/rwlocks/feed", shared).rwLease(t, http.StatusCreated)
	waiter := sendAsync(context.Background(), srv, PUT, "/rwlocks/feed", `{"mode":"exclusive","ttl_ms":30000,"wait_ms":60000}`)
	deadline := time.Now().Add(30 * time.Second)
	for !g.do(t, GET, "/rwlocks/feed", "").rwInfo(t).WriterWaiting {
		if time.Now().After(deadline) {
			t.Fatal("the writer never showed as waiting")
		}
		time.Sleep(5 * time.Millisecond)
	}
	wantProblem(t, g.do(t, PUT, "/rwlocks/feed", shared), http.StatusConflict, api.ProblemTaken)
	if res := g.do(t, DELETE, "/rwlocks/feed", "", api.HeaderLeaseID, r.LeaseID); res.Status != http.StatusNoContent {
		t.Fatal(res)
	}
	ans := await(t, waiter, 30*time.Second, "the writer")
	if ans.err != nil {
		t.Fatal(ans.err)
	}
	checkContract(t, PUT, "/rwlocks/feed", ans.res)
	if w := ans.res.rwLease(t, http.StatusCreated); w.FencingToken <= r.FencingToken || w.Mode != api.ModeExclusive {
		t.Fatalf("the writer got %+v after the reader's token %d", w, r.FencingToken)
	}
}

func TestRWLocksRefuseBadInput(t *testing.T) {
	t.Parallel()
	g := defaultGateway(t)
	lease := []string{api.HeaderLeaseID, leaseA}
	for _, tc := range []struct {
		name, method, target, body string
		hdr                        []string
		status                     int
		typ, field                 string
	}{
		{"an unknown mode", PUT, "/rwlocks/x", `{"mode":"upgradable"}`, nil, 400, api.ProblemInvalid, "mode"},
		{"a TTL below the server's", PUT, "/rwlocks/x", `{"ttl_ms":1}`, nil, 400, api.ProblemInvalid, "ttl_ms"},
		{"a bad name", PUT, "/rwlocks/a%20b", `{"mode":"shared"}`, nil, 400, api.ProblemInvalid, ""},
		{"an unknown field", PUT, "/rwlocks/x", `{"upgrade":true}`, nil, 400, api.ProblemInvalid, ""},
		{"a body too large", PUT, "/rwlocks/x", `{"owner":"` + strings.Repeat("o", 20000) + `"}`, nil, 413, api.ProblemTooLarge, ""},
		{"not JSON", PUT, "/rwlocks/x", `mode=shared`, []string{"Content-Type", "text/plain"}, 415, api.ProblemMediaType, ""},
		{"no lease on extend", PATCH, "/rwlocks/x", "", nil, 400, api.ProblemInvalid, ""},
		{"no lease on release", DELETE, "/rwlocks/x", "", nil, 400, api.ProblemInvalid, ""},
		{"a bad lease", DELETE, "/rwlocks/x", "", []string{api.HeaderLeaseID, "short"}, 400, api.ProblemInvalid, ""},
		{"a bad name to inspect", GET, "/rwlocks/a%20b", "", nil, 400, api.ProblemInvalid, ""},
		{"a TTL below the server's on extend", PATCH, "/rwlocks/x", `{"ttl_ms":1}`, lease, 400, api.ProblemInvalid, "ttl_ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := wantProblem(t, g.do(t, tc.method, tc.target, tc.body, tc.hdr...), tc.status, tc.typ)
			if tc.field != "" && p.Field != tc.field {
				t.Errorf("field %q, want %q: %+v", p.Field, tc.field, p)
			}
		})
	}
}

// rwDown is a node whose readers-writer calls fail as a down node's do.
type rwDown struct{ lockcore.Node }

func (rwDown) RWAcquire(context.Context, lockcore.NodeRWAcquire) (lockcore.NodeReply, error) {
	return lockcore.NodeReply{}, errDown
}

func (rwDown) RWExtend(context.Context, string, string, time.Duration) (lockcore.NodeReply, error) {
	return lockcore.NodeReply{}, errDown
}

func (rwDown) RWRelease(context.Context, string, string) (lockcore.NodeReply, error) {
	return lockcore.NodeReply{}, errDown
}

func (rwDown) RWRaise(context.Context, string, string, int64) error { return errDown }

func (rwDown) RWInspect(context.Context, string) (lockcore.NodeRW, error) {
	return lockcore.NodeRW{}, errDown
}

func TestRWLockAccessControlRateLimitNoQuorumAndUnsupportedNodes(t *testing.T) {
	t.Parallel()
	lease := []string{api.HeaderLeaseID, leaseA}
	ops := []struct {
		method, target, body string
		hdr                  []string
	}{
		{PUT, "/rwlocks/app:table", shared, nil},
		{PATCH, "/rwlocks/app:table", "", lease},
		{DELETE, "/rwlocks/app:table", "", lease},
		{GET, "/rwlocks/app:table", "", nil},
	}
	g := authGateway(t, nil)
	for _, op := range ops {
		wantProblem(t, g.do(t, op.method, op.target, op.body, op.hdr...), http.StatusUnauthorized, api.ProblemUnauthorized)
		other := strings.Replace(op.target, "app:", "other:", 1)
		wantProblem(t, g.do(t, op.method, other, op.body, append(bearerOf(appWriter), op.hdr...)...), http.StatusForbidden, api.ProblemForbidden)
	}
	if res := g.do(t, PUT, "/rwlocks/app:table", shared, bearerOf(appWriter)...); res.Status != http.StatusCreated {
		t.Fatalf("a token whose prefix covers the name: %s", res)
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
		if first := g.do(t, GET, "/rwlocks/warm-up", "", bearerOf(appWriter)...); first.Status == http.StatusTooManyRequests {
			t.Fatalf("the first request was limited: %s", first)
		}
		wantProblem(t, g.do(t, op.method, op.target, op.body, append(bearerOf(appWriter), op.hdr...)...), http.StatusTooManyRequests, api.ProblemRateLimited)
	}
	down := newGateway(t, []lockcore.Node{memnode.New(nil), rwDown{downNode("down-1")}, rwDown{downNode("down-2")}}, nil, nil)
	unsupported := newGateway(t, []lockcore.Node{memnode.New(nil), memnode.New(nil), nodetest.NewFaulty(memnode.New(nil))}, nil, nil)
	for _, op := range ops {
		wantProblem(t, down.do(t, op.method, op.target, op.body, op.hdr...), http.StatusServiceUnavailable, api.ProblemNoQuorum)
		wantProblem(t, unsupported.do(t, op.method, op.target, op.body, op.hdr...), http.StatusNotImplemented, api.ProblemNotSupported)
	}
}

func TestRWLockOperations(t *testing.T) {
	for _, tc := range []struct{ method, path, want string }{
		{PUT, "/rwlocks/s", "rw_acquire"},
		{PATCH, "/rwlocks/s", "rw_extend"},
		{DELETE, "/rwlocks/s", "rw_release"},
		{GET, "/rwlocks/s", "rw_inspect"},
		{GET, "/rwlocks/s/x", "other"},
		{GET, "/rwlocks/", "other"},
	} {
		if got := handlers.Operation(tc.method, tc.path); got != tc.want {
			t.Errorf("Operation(%s, %s) = %q, want %q", tc.method, tc.path, got, tc.want)
		}
	}
}

// Every state-changing readers-writer request logs an audit line with its
// operation, the lock's name and the token, never the lease id.
func TestRWLockAuditLines(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	log := zerolog.New(&logs)
	g := authGateway(t, &log)
	auth := bearerOf(appWriter)
	r := g.do(t, PUT, "/rwlocks/app:table", shared, auth...).rwLease(t, http.StatusCreated)
	lease := append(auth, api.HeaderLeaseID, r.LeaseID)
	g.do(t, PATCH, "/rwlocks/app:table", "", lease...).rwLease(t, http.StatusOK)
	g.do(t, GET, "/rwlocks/app:table", "", auth...).rwInfo(t)
	if res := g.do(t, DELETE, "/rwlocks/app:table", "", lease...); res.Status != http.StatusNoContent {
		t.Fatal(res)
	}
	if strings.Contains(logs.String(), r.LeaseID) {
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
			if m["resource"] != "app:table" || m["caller"] != "writer" {
				t.Errorf("audit line %s", line)
			}
		}
	}
	if want := []string{"rw_acquire", "rw_extend", "rw_release"}; !slices.Equal(ops, want) {
		t.Fatalf("audit ops %v, want %v\n%s", ops, want, logs.String())
	}
}
