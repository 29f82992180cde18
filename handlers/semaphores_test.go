package handlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/api"
	"github.com/lockgate/lockgate/auth"
	"github.com/lockgate/lockgate/handlers"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
)

func (r response) permit(t *testing.T, status int) api.Permit {
	t.Helper()
	if r.Status != status {
		t.Fatalf("got %s, want %d", r, status)
	}
	var p api.Permit
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatalf("body is not a permit: %v: %s", err, r.Body)
	}
	if r.Header.Get(api.HeaderLeaseID) != p.LeaseID || p.LeaseID == "" ||
		r.Header.Get(api.HeaderFencingToken) != strconv.FormatInt(p.FencingToken, 10) {
		t.Fatalf("headers %v disagree with the body %+v", r.Header, p)
	}
	return p
}

func permitURL(name string, i int) string {
	return "/semaphores/" + name + "/permits/" + strconv.Itoa(i)
}

func TestSemaphorePermits(t *testing.T) {
	t.Parallel()
	g := defaultGateway(t)
	body := `{"permits":2,"ttl_ms":30000,"owner":"worker"}`
	a := g.do(t, PUT, "/semaphores/pool/permits", body).permit(t, http.StatusCreated)
	b := g.do(t, PUT, "/semaphores/pool/permits", body).permit(t, http.StatusCreated)
	if a.Permits != 2 || a.Semaphore != "pool" || a.Permit == b.Permit {
		t.Fatalf("two permits: %+v %+v", a, b)
	}

	full := g.do(t, PUT, "/semaphores/pool/permits", body)
	if p := wantProblem(t, full, http.StatusConflict, api.ProblemSemaphoreFull); p.RetryAfterMs == nil || *p.RetryAfterMs <= 0 {
		t.Errorf("semaphore-full without retry_after_ms: %s", full)
	}
	mm := wantProblem(t, g.do(t, PUT, "/semaphores/pool/permits", `{"permits":3}`), http.StatusConflict, api.ProblemPermitsMismatch)
	if mm.Field != "permits" || !strings.Contains(mm.Detail, "permits=2, not 3") {
		t.Errorf("permits-mismatch: %+v", mm)
	}

	info := g.do(t, GET, "/semaphores/pool", "")
	if info.Status != http.StatusOK || strings.Contains(string(info.Body), a.LeaseID) || strings.Contains(string(info.Body), b.LeaseID) {
		t.Fatalf("GET: %s (must show no lease id)", info)
	}
	var si api.SemaphoreInfo
	if err := json.Unmarshal(info.Body, &si); err != nil || si.Permits != 2 || si.InUse != 2 || si.Holders[0].Owner != "worker" {
		t.Fatalf("GET: %+v, %v", si, err)
	}
	if res := g.do(t, http.MethodHead, "/semaphores/pool", ""); res.Status != http.StatusOK {
		t.Fatalf("HEAD: %s", res)
	}

	lease := func(p api.Permit, more ...string) []string {
		return append([]string{api.HeaderLeaseID, p.LeaseID}, more...)
	}
	ext := g.do(t, PATCH, permitURL("pool", a.Permit), `{"ttl_ms":60000}`, lease(a, api.HeaderIfMatch, `"`+strconv.FormatInt(a.FencingToken, 10)+`"`)...).permit(t, http.StatusOK)
	if ext.FencingToken != a.FencingToken || ext.TTLms != 60000 {
		t.Fatalf("extend: %+v", ext)
	}
	wantProblem(t, g.do(t, PATCH, permitURL("pool", a.Permit), "", lease(a, api.HeaderIfMatch, `"999"`)...), http.StatusPreconditionFailed, api.ProblemTokenMismatch)
	wantProblem(t, g.do(t, PATCH, permitURL("pool", b.Permit), "", lease(a)...), http.StatusConflict, api.ProblemHeldByOther)
	wantProblem(t, g.do(t, DELETE, permitURL("pool", b.Permit), "", lease(a)...), http.StatusConflict, api.ProblemHeldByOther)
	wantProblem(t, g.do(t, DELETE, permitURL("pool", a.Permit), "", lease(a, api.HeaderIfMatch, `"999"`)...), http.StatusPreconditionFailed, api.ProblemTokenMismatch)
	if res := g.do(t, DELETE, permitURL("pool", a.Permit), "", lease(a)...); res.Status != http.StatusNoContent {
		t.Fatalf("release: %s", res)
	}
	wantProblem(t, g.do(t, PATCH, permitURL("pool", a.Permit), "", lease(a)...), http.StatusNotFound, api.ProblemNotHeld)
	wantProblem(t, g.do(t, DELETE, permitURL("pool", a.Permit), "", lease(a)...), http.StatusNotFound, api.ProblemNotHeld)

	again := g.do(t, PUT, "/semaphores/pool/permits", body).permit(t, http.StatusCreated)
	if again.Permit != a.Permit || again.FencingToken <= a.FencingToken {
		t.Fatalf("the freed permit %d (token %d) taken again: %+v", a.Permit, a.FencingToken, again)
	}
	if res := g.do(t, DELETE, permitURL("pool", again.Permit), "", lease(again)...); res.Status != http.StatusNoContent {
		t.Fatal(res)
	}
	if res := g.do(t, DELETE, permitURL("pool", b.Permit), "", lease(b)...); res.Status != http.StatusNoContent {
		t.Fatal(res)
	}
	wantProblem(t, g.do(t, GET, "/semaphores/pool", ""), http.StatusNotFound, api.ProblemNotHeld)
	if res := g.do(t, http.MethodHead, "/semaphores/pool", ""); res.Status != http.StatusNotFound {
		t.Fatalf("HEAD of a semaphore with no permit held: %s", res)
	}
}

func TestSemaphoresRefuseBadInput(t *testing.T) {
	t.Parallel()
	g := defaultGateway(t)
	lease := []string{api.HeaderLeaseID, leaseA}
	for _, tc := range []struct {
		name, method, target, body string
		hdr                        []string
		status                     int
		typ                        string
	}{
		{"no permits", PUT, "/semaphores/s/permits", `{"ttl_ms":1000}`, nil, 400, api.ProblemInvalid},
		{"no body", PUT, "/semaphores/s/permits", "", nil, 400, api.ProblemInvalid},
		{"permits 0", PUT, "/semaphores/s/permits", `{"permits":0}`, nil, 400, api.ProblemInvalid},
		{"permits 65", PUT, "/semaphores/s/permits", `{"permits":65}`, nil, 400, api.ProblemInvalid},
		{"an owner too long", PUT, "/semaphores/s/permits", `{"permits":1,"owner":"` + strings.Repeat("o", 241) + `"}`, nil, 400, api.ProblemInvalid},
		{"a TTL below the server's", PUT, "/semaphores/s/permits", `{"permits":1,"ttl_ms":1}`, nil, 400, api.ProblemInvalid},
		{"a bad name", PUT, "/semaphores/a%20b/permits", `{"permits":1}`, nil, 400, api.ProblemInvalid},
		{"a body too large", PUT, "/semaphores/s/permits", `{"permits":1,"owner":"` + strings.Repeat("o", 20000) + `"}`, nil, 413, api.ProblemTooLarge},
		{"not JSON", PUT, "/semaphores/s/permits", `permits=1`, []string{"Content-Type", "text/plain"}, 415, api.ProblemMediaType},
		{"permit 64", PATCH, "/semaphores/s/permits/64", "", lease, 400, api.ProblemInvalid},
		{"permit -1", DELETE, "/semaphores/s/permits/-1", "", lease, 400, api.ProblemInvalid},
		{"a permit that is no number", DELETE, "/semaphores/s/permits/x", "", lease, 400, api.ProblemInvalid},
		{"no lease", DELETE, "/semaphores/s/permits/0", "", nil, 400, api.ProblemInvalid},
		{"a bad semaphore name", GET, "/semaphores/a%20b", "", nil, 400, api.ProblemInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantProblem(t, g.do(t, tc.method, tc.target, tc.body, tc.hdr...), tc.status, tc.typ)
		})
	}
}

// A PUT with wait_ms waits for every permit; the first released through
// the replica is handed to it.
func TestSemaphoreWaiterGetsTheReleasedPermit(t *testing.T) {
	t.Parallel()
	g := defaultGateway(t)
	srv := g.serve(t, nil)
	body := `{"permits":2,"ttl_ms":30000}`
	a := g.do(t, PUT, "/semaphores/w/permits", body).permit(t, http.StatusCreated)
	g.do(t, PUT, "/semaphores/w/permits", body).permit(t, http.StatusCreated)
	waiter := sendAsync(context.Background(), srv, PUT, "/semaphores/w/permits", `{"permits":2,"ttl_ms":30000,"wait_ms":60000}`)
	deadline := time.Now().Add(30 * time.Second)
	for g.locker.Waiting() != 2 {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never waited for both permits")
		}
		time.Sleep(2 * time.Millisecond)
	}
	if res := g.do(t, DELETE, permitURL("w", a.Permit), "", api.HeaderLeaseID, a.LeaseID); res.Status != http.StatusNoContent {
		t.Fatal(res)
	}
	ans := await(t, waiter, 30*time.Second, "the waiter")
	if ans.err != nil {
		t.Fatal(ans.err)
	}
	checkContract(t, PUT, "/semaphores/w/permits", ans.res)
	if p := ans.res.permit(t, http.StatusCreated); p.Permit != a.Permit || p.FencingToken <= a.FencingToken {
		t.Fatalf("the waiter got %+v after permit %d (token %d) was released", p, a.Permit, a.FencingToken)
	}
	if loc := ans.res.Header.Get("Location"); loc != permitURL("w", a.Permit) {
		t.Errorf("Location %q", loc)
	}
}

func TestSemaphoreAccessControlRateLimitAndNoQuorum(t *testing.T) {
	t.Parallel()
	lease := []string{api.HeaderLeaseID, leaseA}
	ops := []struct {
		method, target, body string
		hdr                  []string
	}{
		{PUT, "/semaphores/app:pool/permits", `{"permits":1}`, nil},
		{PATCH, "/semaphores/app:pool/permits/0", "", lease},
		{DELETE, "/semaphores/app:pool/permits/0", "", lease},
		{GET, "/semaphores/app:pool", "", nil},
	}
	g := authGateway(t, nil)
	for _, op := range ops {
		wantProblem(t, g.do(t, op.method, op.target, op.body, op.hdr...), http.StatusUnauthorized, api.ProblemUnauthorized)
		other := strings.Replace(op.target, "app:", "other:", 1)
		wantProblem(t, g.do(t, op.method, other, op.body, append(bearerOf(appWriter), op.hdr...)...), http.StatusForbidden, api.ProblemForbidden)
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
		if first := g.do(t, GET, "/semaphores/warm-up", "", bearerOf(appWriter)...); first.Status == http.StatusTooManyRequests {
			t.Fatalf("the first request was limited: %s", first)
		}
		wantProblem(t, g.do(t, op.method, op.target, op.body, append(bearerOf(appWriter), op.hdr...)...), http.StatusTooManyRequests, api.ProblemRateLimited)
	}
	down := newGateway(t, []lockcore.Node{memnode.New(nil), downNode("down-1"), downNode("down-2")}, nil, nil)
	for _, op := range ops {
		wantProblem(t, down.do(t, op.method, op.target, op.body, op.hdr...), http.StatusServiceUnavailable, api.ProblemNoQuorum)
	}
}

func TestSemaphoreOperations(t *testing.T) {
	for _, tc := range []struct{ method, path, want string }{
		{PUT, "/semaphores/s/permits", "permit_acquire"},
		{PATCH, "/semaphores/s/permits/3", "permit_extend"},
		{DELETE, "/semaphores/s/permits/3", "permit_release"},
		{GET, "/semaphores/s", "semaphore_inspect"},
		{GET, "/semaphores/s/permits/3", "other"},
		{PUT, "/semaphores/s", "other"},
		{DELETE, "/semaphores/s/permits/3/x", "other"},
		{GET, "/semaphores/", "other"},
	} {
		if got := handlers.Operation(tc.method, tc.path); got != tc.want {
			t.Errorf("Operation(%s, %s) = %q, want %q", tc.method, tc.path, got, tc.want)
		}
	}
}
