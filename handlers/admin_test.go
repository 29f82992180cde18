package handlers_test

import (
	"bytes"
	"context"
	"encoding/base64"
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
)

// Tokens of the listing, force-release and audit tests.
const (
	appReader = "app-reader-0123456789abcdef"
	appWriter = "app-writer-0123456789abcdef"
	onCall    = "on-call-token-0123456789abcdef"
	putOnly   = "put-only-token-0123456789abcdef"
)

func bearerOf(tok string) []string { return []string{"Authorization", "Bearer " + tok} }

// authGateway runs over three in-memory nodes behind a token file, wired as
// cmd/lockgate wires it.
func authGateway(t *testing.T, log *zerolog.Logger) *gateway {
	t.Helper()
	p, err := auth.Parse(strings.NewReader(appReader + " GET app: reader\n" + appWriter + " * app: writer\n" +
		onCall + " GET,force * on-call\n" + putOnly + " PUT *\n"))
	if err != nil {
		t.Fatal(err)
	}
	return newGateway(t, memNodes(3, nil), nil, &handlers.Options{
		Logger: log, Middleware: []func(http.Handler) http.Handler{p.Middleware},
		AllowForce: true, Grants: p.Grants, Caller: p.Name,
	})
}

func (r response) list(t *testing.T) api.LockList {
	t.Helper()
	if r.Status != http.StatusOK {
		t.Fatalf("got %s, want 200", r)
	}
	var l api.LockList
	if err := json.Unmarshal(r.Body, &l); err != nil {
		t.Fatalf("body is not a lock list: %v: %s", err, r.Body)
	}
	return l
}

func TestListLocks(t *testing.T) {
	t.Parallel()
	g := defaultGateway(t)
	var leases []api.Lease
	for _, r := range []string{"app:1", "app:2", "app:3", "app:4", "app:5", "other"} {
		leases = append(leases, g.acquire(t, r, "", `{"owner":"worker of `+r+`"}`))
	}
	var got []string
	target := "/locks?prefix=app:&limit=2"
	for pages := 0; ; pages++ {
		res := g.do(t, GET, target, "")
		if res.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("Cache-Control %q", res.Header.Get("Cache-Control"))
		}
		for _, l := range leases {
			if bytes.Contains(res.Body, []byte(l.LeaseID)) {
				t.Fatalf("the listing shows a lease id: %s", res.Body)
			}
		}
		page := res.list(t)
		if len(page.Locks) > 2 {
			t.Fatalf("page of %d locks, limit 2", len(page.Locks))
		}
		for _, l := range page.Locks {
			got = append(got, l.Resource)
			if l.Owner != "worker of "+l.Resource || l.FencingToken < 1 || l.TTLms != 30000 {
				t.Errorf("listed %+v", l)
			}
		}
		if page.NextCursor == "" {
			break
		}
		if pages > 10 {
			t.Fatal("the listing never ends")
		}
		target = "/locks?prefix=app:&limit=2&cursor=" + page.NextCursor
	}
	slices.Sort(got)
	if want := []string{"app:1", "app:2", "app:3", "app:4", "app:5"}; !slices.Equal(got, want) {
		t.Errorf("listed %v, want %v", got, want)
	}
	if all := g.do(t, GET, "/locks", "").list(t); len(all.Locks) != 6 || all.NextCursor != "" {
		t.Errorf("GET /locks: %+v", all)
	}

	for _, tc := range []struct{ target, field string }{
		{"/locks?limit=0", "limit"},
		{"/locks?limit=1001", "limit"},
		{"/locks?limit=ten", "limit"},
		{"/locks?prefix=a%2Fb", "prefix"},
		{"/locks?cursor=nonsense", "cursor"},
	} {
		p := wantProblem(t, g.do(t, GET, tc.target, ""), http.StatusBadRequest, api.ProblemInvalid)
		if p.Field != tc.field {
			t.Errorf("%s: field %q, want %q", tc.target, p.Field, tc.field)
		}
	}
}

// The listing and GET /locks/{resource} give when a lock was granted
// (granted_at): between the request that took it and the answer, and more
// than its TTL before expires_at, which the drift allowance makes early.
// The time held is now - granted_at; TTL less the time left would
// overstate it by that allowance.
func TestListingGivesWhenALockWasGranted(t *testing.T) {
	t.Parallel()
	g := defaultGateway(t)
	before := time.Now()
	g.acquire(t, "granted:1", "", `{"ttl_ms":60000,"owner":"w"}`)
	listed := g.do(t, GET, "/locks?prefix=granted:", "").list(t)
	var inspected api.LockInfo
	if res := g.do(t, GET, "/locks/granted:1", ""); res.Status != http.StatusOK || json.Unmarshal(res.Body, &inspected) != nil {
		t.Fatalf("GET /locks/granted:1: %s", res)
	}
	after := time.Now()
	if len(listed.Locks) != 1 {
		t.Fatalf("listed %+v, want granted:1", listed)
	}
	for what, l := range map[string]api.LockInfo{"listed": listed.Locks[0], "inspected": inspected} {
		if l.GrantedAt == nil {
			t.Errorf("%s: no granted_at: %+v", what, l)
			continue
		}
		// JSON times have nanoseconds; the gateway's clock is this one.
		if l.GrantedAt.Before(before.Add(-time.Millisecond)) || l.GrantedAt.After(after) {
			t.Errorf("%s: granted_at %v, not between the request %v and the answer %v", what, *l.GrantedAt, before, after)
		}
		if end := l.GrantedAt.Add(time.Duration(l.TTLms) * time.Millisecond); !end.After(l.ExpiresAt) {
			t.Errorf("%s: granted_at + ttl %v is not after expires_at %v: the drift allowance is not in expires_at alone", what, end, l.ExpiresAt)
		}
	}
}

func TestListLocksWithoutAQuorum(t *testing.T) {
	t.Parallel()
	g := newGateway(t, append(memNodes(1, nil), downLister{downNode("down-1")}, downLister{downNode("down-2")}), nil, nil)
	res := wantProblem(t, g.do(t, GET, "/locks", ""), http.StatusServiceUnavailable, api.ProblemNoQuorum)
	if res.Detail == "" {
		t.Error("no detail")
	}
}

// Access control filters the listing by the token's prefixes, and guards it
// with GET.
func TestListLocksFollowsAccessControl(t *testing.T) {
	t.Parallel()
	g := authGateway(t, nil)
	for _, r := range []string{"app:1", "app:2", "billing:1"} {
		res := g.do(t, PUT, "/locks/"+r, "", bearerOf(onCall)...)
		if res.Status != http.StatusForbidden {
			t.Fatalf("the on-call token may not acquire: %s", res)
		}
		if res := g.do(t, PUT, "/locks/"+r, "", bearerOf(putOnly)...); res.Status != http.StatusCreated {
			t.Fatalf("acquire %s: %s", r, res)
		}
	}
	names := func(l api.LockList) []string {
		var out []string
		for _, x := range l.Locks {
			out = append(out, x.Resource)
		}
		slices.Sort(out)
		return out
	}
	if got := names(g.do(t, GET, "/locks", "", bearerOf(appReader)...).list(t)); !slices.Equal(got, []string{"app:1", "app:2"}) {
		t.Errorf("the app: reader sees %v", got)
	}
	if got := names(g.do(t, GET, "/locks", "", bearerOf(onCall)...).list(t)); len(got) != 3 {
		t.Errorf("the * token sees %v", got)
	}
	wantProblem(t, g.do(t, GET, "/locks", ""), http.StatusUnauthorized, api.ProblemUnauthorized)
	wantProblem(t, g.do(t, GET, "/locks", "", bearerOf(putOnly)...), http.StatusForbidden, api.ProblemForbidden)
}

func TestForceRelease(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	log := zerolog.New(&logs)
	g := authGateway(t, &log)
	res := g.do(t, PUT, "/locks/app:stuck", `{"ttl_ms":3600000}`, bearerOf(appWriter)...)
	held := wantLease(t, res, http.StatusCreated, "app:stuck")

	wantProblem(t, g.do(t, DELETE, "/locks/app:stuck?force=true", "", bearerOf(appWriter)...), http.StatusForbidden, api.ProblemForbidden)
	wantProblem(t, g.do(t, DELETE, "/locks/app:stuck?force=true", "", bearerOf(appReader)...), http.StatusForbidden, api.ProblemForbidden)
	wantProblem(t, g.do(t, DELETE, "/locks/app:stuck?force=true", ""), http.StatusUnauthorized, api.ProblemUnauthorized)
	wantProblem(t, g.do(t, DELETE, "/locks/app:stuck?force=maybe", "", bearerOf(onCall)...), http.StatusBadRequest, api.ProblemInvalid)
	if info := g.do(t, GET, "/locks/app:stuck", "", bearerOf(appReader)...); info.Status != http.StatusOK {
		t.Fatalf("refused force releases broke the lock: %s", info)
	}

	if res := g.do(t, DELETE, "/locks/app:stuck?force=true", "", bearerOf(onCall)...); res.Status != http.StatusNoContent {
		t.Fatalf("force release by the on-call token: %s", res)
	}
	wantProblem(t, g.do(t, GET, "/locks/app:stuck", "", bearerOf(appReader)...), http.StatusNotFound, api.ProblemNotHeld)
	wantProblem(t, g.do(t, DELETE, "/locks/app:stuck?force=true", "", bearerOf(onCall)...), http.StatusNotFound, api.ProblemNotHeld)
	next := wantLease(t, g.do(t, PUT, "/locks/app:stuck", "", bearerOf(appWriter)...), http.StatusCreated, "app:stuck")
	if next.FencingToken <= held.FencingToken {
		t.Errorf("next token %d, want above the broken lock's %d", next.FencingToken, held.FencingToken)
	}
	res = g.do(t, DELETE, "/locks/app:stuck", "", append(bearerOf(appWriter), api.HeaderLeaseID, held.LeaseID)...)
	wantProblem(t, res, http.StatusConflict, api.ProblemHeldByOther)
	// force=false is a plain release, which needs its Lease-Id.
	p := wantProblem(t, g.do(t, DELETE, "/locks/app:stuck?force=false", "", bearerOf(appWriter)...), http.StatusBadRequest, api.ProblemInvalid)
	if p.Field != api.HeaderLeaseID {
		t.Errorf("field %q, want Lease-Id", p.Field)
	}

	// The audit log: one line per state-changing request, naming the
	// caller by the token's name, never by the token or a lease id.
	var audit []map[string]any
	for line := range strings.Lines(logs.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		if m["audit"] == true {
			audit = append(audit, m)
		}
	}
	want := []struct {
		op, caller, outcome string
		status              float64
		token               float64
	}{
		{"acquire", "writer", "acquired", 201, float64(held.FencingToken)},
		{"force", "writer", "forbidden", 403, 0},
		{"force", "reader", "forbidden", 403, 0},
		{"force", "anonymous", "unauthorized", 401, 0},
		{"force", "on-call", "bad_request", 400, 0},
		{"force", "on-call", "force_released", 204, float64(held.FencingToken)},
		{"force", "on-call", "not_held", 404, 0},
		{"acquire", "writer", "acquired", 201, float64(next.FencingToken)},
		{"release", "writer", "held_by_other", 409, 0},
		{"force", "writer", "bad_request", 400, 0},
	}
	if len(audit) != len(want) {
		t.Fatalf("%d audit lines, want %d:\n%s", len(audit), len(want), logs.String())
	}
	for i, w := range want {
		m := audit[i]
		tok, _ := m["fencing_token"].(float64)
		if m["op"] != w.op || m["caller"] != w.caller || m["outcome"] != w.outcome || m["status"] != w.status ||
			tok != w.token || m["resource"] != "app:stuck" {
			t.Errorf("audit line %d: %v, want %+v", i, m, w)
		}
	}
	for _, secret := range []string{appReader, appWriter, onCall, putOnly, held.LeaseID, next.LeaseID} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the log shows the secret %q", secret)
		}
	}
}

// Without access control, no one may force a release, and the problem says
// how to allow it.
func TestForceReleaseNeedsAccessControl(t *testing.T) {
	t.Parallel()
	g := defaultGateway(t)
	g.acquire(t, "stuck", "", "")
	p := wantProblem(t, g.do(t, DELETE, "/locks/stuck?force=true", ""), http.StatusForbidden, api.ProblemForbidden)
	if !strings.Contains(p.Detail, "-auth-file") || !strings.Contains(p.Detail, "force") {
		t.Errorf("the problem does not say how to enable force release: %q", p.Detail)
	}
	if _, err := g.locker.Inspect(t.Context(), "stuck"); err != nil {
		t.Errorf("the refused force release broke the lock: %v", err)
	}
}

// downLister is a node that is down, listing included.
type downLister struct{ lockcore.Node }

func (downLister) ScanLocks(context.Context, string, string, int) ([]string, string, error) {
	return nil, "", errDown
}

func (downLister) InspectLocks(context.Context, []string) ([]lockcore.NodeLock, error) {
	return nil, errDown
}

var _ handlers.Lister = (*lockcore.Redlock)(nil)
var _ handlers.ForceReleaser = (*lockcore.Redlock)(nil)

// Tokens of two tenants, each granted its own prefix.
const (
	tenantA  = "tenant-a-token-0123456789abcdef"
	tenantA2 = "tenant-a2-token-0123456789abcdef"
	tenantB  = "tenant-b-token-0123456789abcdef"
	twoGrant = "two-grants-token-0123456789abcdef"
)

func tenantsGateway(t *testing.T) *gateway {
	t.Helper()
	p, err := auth.Parse(strings.NewReader(tenantA + " * a- tenant-a\n" + tenantA2 + " GET a- tenant-a2\n" +
		tenantB + " * b- tenant-b\n" + twoGrant + " GET b-,a-,a-x line-4\n"))
	if err != nil {
		t.Fatal(err)
	}
	return newGateway(t, memNodes(3, nil), nil, &handlers.Options{
		Middleware: []func(http.Handler) http.Handler{p.Middleware}, Grants: p.Grants, Caller: p.Name,
	})
}

// listAll follows a listing to its end and returns the names listed and
// every cursor it was given.
func (g *gateway) listAll(t *testing.T, token, query string) (names, cursors []string) {
	t.Helper()
	target := "/locks?" + query
	for pages := 0; ; pages++ {
		page := g.do(t, GET, target, "", bearerOf(token)...).list(t)
		for _, l := range page.Locks {
			names = append(names, l.Resource)
		}
		if page.NextCursor == "" {
			return names, cursors
		}
		if pages > 20 {
			t.Fatal("the listing never ends")
		}
		cursors = append(cursors, page.NextCursor)
		target = "/locks?" + query + "&cursor=" + page.NextCursor
	}
}

// A tenant's listing shows nothing of another tenant: a prefix outside its
// grants is refused whatever is held under it (no yes/no answer), a prefix
// that covers its grants is narrowed to them, and its cursors are sealed,
// bound to the caller and the prefix, and hold no name in the clear.
func TestListingStaysWithinTheCallersGrants(t *testing.T) {
	t.Parallel()
	g := tenantsGateway(t)
	for _, r := range []string{"a-1", "a-2", "a-3", "a-x9"} {
		if res := g.do(t, PUT, "/locks/"+r, "", bearerOf(tenantA)...); res.Status != http.StatusCreated {
			t.Fatalf("acquire %s: %s", r, res)
		}
	}
	// What tenant A sees and is answered, asked before and after B holds
	// locks: the same, byte for byte but for the sealed cursors.
	probes := []string{"prefix=b-", "prefix=b-la", "prefix=b-lb", "prefix=b-layoffs-q3", "prefix=c", "prefix=a"}
	view := func() []string {
		var out []string
		for _, q := range probes {
			res := g.do(t, GET, "/locks?"+q, "", bearerOf(tenantA)...)
			out = append(out, q+" "+http.StatusText(res.Status))
			if res.Status != http.StatusOK {
				p := wantProblem(t, res, http.StatusForbidden, api.ProblemForbidden)
				out = append(out, p.Detail)
			}
		}
		for _, q := range []string{"limit=1", "prefix=&limit=2", "prefix=a&limit=1", "prefix=a-"} {
			names, cursors := g.listAll(t, tenantA, q)
			slices.Sort(names)
			out = append(out, q+" "+strings.Join(names, ",")+" pages "+strconv.Itoa(len(cursors)+1))
		}
		return out
	}
	before := view()
	for _, r := range []string{"b-layoffs-q3", "b-layoffs-q4", "b-other"} {
		wantLease(t, g.do(t, PUT, "/locks/"+r, "", bearerOf(tenantB)...), http.StatusCreated, r)
	}
	after := view()
	if !slices.Equal(before, after) {
		t.Errorf("tenant A's answers change when tenant B holds locks:\nbefore %q\nafter  %q", before, after)
	}
	for _, line := range after {
		if strings.HasPrefix(line, "this token may list no resource") {
			continue // the refusal names the prefix A asked for
		}
		if strings.Contains(line, "b-layoffs") && !strings.HasPrefix(line, "prefix=b-layoffs") || strings.Contains(line, "b-other") {
			t.Errorf("tenant A is shown one of B's names: %q", line)
		}
	}
	if names, _ := g.listAll(t, tenantA, "limit=1"); len(names) != 4 {
		t.Errorf("tenant A lists %v, want its 4 locks", names)
	}

	// B's cursors open for B only, and only for the prefix they were
	// issued for.
	bNames, bCursors := g.listAll(t, tenantB, "prefix=b-&limit=1")
	slices.Sort(bNames)
	if want := []string{"b-layoffs-q3", "b-layoffs-q4", "b-other"}; !slices.Equal(bNames, want) || len(bCursors) == 0 {
		t.Fatalf("tenant B lists %v with %d cursors, want %v", bNames, len(bCursors), want)
	}
	for _, c := range bCursors {
		if res := g.do(t, GET, "/locks?prefix=b-&cursor="+c, "", bearerOf(tenantB)...); res.Status != http.StatusOK {
			t.Errorf("tenant B's own cursor: %s", res)
		}
		wantProblem(t, g.do(t, GET, "/locks?prefix=b-&cursor="+c, "", bearerOf(tenantA)...), http.StatusForbidden, api.ProblemForbidden)
		for _, q := range []string{"", "prefix=a-&", "prefix=a&"} {
			p := wantProblem(t, g.do(t, GET, "/locks?"+q+"cursor="+c, "", bearerOf(tenantA)...), http.StatusBadRequest, api.ProblemInvalid)
			if p.Field != "cursor" {
				t.Errorf("field %q, want cursor", p.Field)
			}
		}
		// A token granted b- too may list b-, but not through B's cursor.
		wantProblem(t, g.do(t, GET, "/locks?prefix=b-&cursor="+c, "", bearerOf(twoGrant)...), http.StatusBadRequest, api.ProblemInvalid)
	}

	// A's cursors: bound to A (not A2, granted the same prefix), opaque,
	// and a changed one does not open.
	_, aCursors := g.listAll(t, tenantA, "prefix=a-&limit=1")
	if len(aCursors) < 3 {
		t.Fatalf("%d cursors for 4 locks a page", len(aCursors))
	}
	for _, c := range append(aCursors, bCursors...) {
		wantProblem(t, g.do(t, GET, "/locks?prefix=a-&cursor="+c, "", bearerOf(tenantA2)...), http.StatusBadRequest, api.ProblemInvalid)
		raw, err := base64.RawURLEncoding.DecodeString(c)
		if err != nil {
			t.Fatalf("cursor %q is not base64url: %v", c, err)
		}
		for _, name := range []string{"a-1", "a-2", "a-3", "a-x9", "b-layoffs", "b-other", `"p"`} {
			if bytes.Contains(raw, []byte(name)) {
				t.Errorf("cursor %q shows %q in the clear", c, name)
			}
		}
		flipped := []byte(c)
		flipped[len(flipped)/2] ^= 1
		if flipped[len(flipped)/2] == '-'^1 || flipped[len(flipped)/2] == '_'^1 {
			flipped[len(flipped)/2] = 'A'
		}
		wantProblem(t, g.do(t, GET, "/locks?prefix=a-&cursor="+string(flipped), "", bearerOf(tenantA)...), http.StatusBadRequest, api.ProblemInvalid)
	}

	// A token with several grants: a listing of "" is narrowed to them,
	// one after the other, each name once (a-x is under a-).
	names, _ := g.listAll(t, twoGrant, "limit=2")
	slices.Sort(names)
	if want := []string{"a-1", "a-2", "a-3", "a-x9", "b-layoffs-q3", "b-layoffs-q4", "b-other"}; !slices.Equal(names, want) {
		t.Errorf("the two-grant token lists %v, want %v", names, want)
	}
	if names, _ := g.listAll(t, twoGrant, "prefix=b-l&limit=1"); len(names) != 2 {
		t.Errorf("prefix b-l under a grant: %v", names)
	}
}
