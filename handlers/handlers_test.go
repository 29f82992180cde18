package handlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/rs/zerolog"

	lockgate "github.com/lockgate/lockgate"
	"github.com/lockgate/lockgate/api"
	"github.com/lockgate/lockgate/handlers"
	"github.com/lockgate/lockgate/internal/testlog"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
	"github.com/lockgate/lockgate/lockcore/nodetest"
)

// Every response a test sees goes through checkContract: it must be one the
// operation documents in openapi.yaml (status, headers, body), and every
// error must be a complete problem. TestMain then fails the run if some
// status documented in openapi.yaml was never produced by any test, so a
// status added to the contract needs a test, and a status the code answers
// needs a line in the contract.

// Short names for the methods, to keep the tables narrow.
const (
	GET    = http.MethodGet
	PUT    = http.MethodPut
	PATCH  = http.MethodPatch
	DELETE = http.MethodDelete
	POST   = http.MethodPost
)

// Client-chosen lease ids (16 to 128 characters of A-Z a-z 0-9 - _).
const (
	leaseA = "lease-A-0123456789abcdef"
	leaseB = "lease-B-0123456789abcdef"
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	// Only a full run can tell whether every documented status was seen.
	if code == 0 && flag.Lookup("test.run").Value.String() == "" && flag.Lookup("test.skip").Value.String() == "" {
		if missing := unexercised(); len(missing) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: statuses documented in openapi.yaml that no test produced:\n\t%s\n", strings.Join(missing, "\n\t"))
			code = 1
		}
	}
	os.Exit(code)
}

var contractRouter = sync.OnceValues(func() (routers.Router, error) {
	doc, err := openapi3.NewLoader().LoadFromData(lockgate.OpenAPI)
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, err
	}
	return gorillamux.NewRouter(doc)
})

// exercised records "operationId status" for every response checked against
// the contract.
var exercised = struct {
	sync.Mutex
	seen map[string]bool
}{seen: map[string]bool{}}

func unexercised() []string {
	doc, err := openapi3.NewLoader().LoadFromData(lockgate.OpenAPI)
	if err != nil {
		return []string{err.Error()}
	}
	exercised.Lock()
	defer exercised.Unlock()
	var missing []string
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			for status := range op.Responses.Map() {
				if !exercised.seen[op.OperationID+" "+status] {
					missing = append(missing, fmt.Sprintf("%s %s (%s) → %s", method, path, op.OperationID, status))
				}
			}
		}
	}
	slices.Sort(missing)
	return missing
}

// response is what a client saw.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r response) lease(t *testing.T) api.Lease {
	t.Helper()
	var l api.Lease
	if err := json.Unmarshal(r.Body, &l); err != nil {
		t.Fatalf("status %d: body is not a lease: %v: %s", r.Status, err, r.Body)
	}
	return l
}

func (r response) problem(t *testing.T) api.Problem {
	t.Helper()
	var p api.Problem
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatalf("status %d: body is not a problem: %v: %s", r.Status, err, r.Body)
	}
	return p
}

func (r response) String() string {
	body := bytes.TrimSpace(r.Body)
	if len(body) > 300 {
		body = append(body[:300:300], "…"...)
	}
	return fmt.Sprintf("%d %s", r.Status, body)
}

// oneRawName reports whether target is /locks/ and one raw path segment.
func oneRawName(target string) bool {
	path, _, _ := strings.Cut(target, "?")
	name, ok := strings.CutPrefix(path, "/locks/")
	return ok && name != "" && !strings.Contains(name, "/")
}

// checkContract fails t unless res is an answer that openapi.yaml documents
// for method and target, and unless every error is a complete problem.
func checkContract(t *testing.T, method, target string, res response) {
	t.Helper()
	// HEAD is GET without the content (RFC 9110, 9.3.2): the contract
	// declares it per GET route with GET's statuses and headers and no
	// content. A recorder keeps the body a server would drop; it must be
	// GET's problem.
	if res.Status >= 400 && (method != http.MethodHead || len(res.Body) > 0) {
		checkProblem(t, res)
	}
	if method == http.MethodHead {
		res.Body = nil
	}
	router, err := contractRouter()
	if err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	req := httptest.NewRequest(method, target, nil)
	route, params, err := router.FindRoute(req)
	if err != nil {
		// Only what the contract does not describe may miss its routes.
		// A name with a slash below /locks/ is refused like any other bad
		// resource name.
		switch {
		case errors.Is(err, routers.ErrPathNotFound) && res.Status == http.StatusNotFound:
		case errors.Is(err, routers.ErrPathNotFound) && res.Status == http.StatusBadRequest && strings.HasPrefix(req.URL.Path, "/locks/"):
		case errors.Is(err, routers.ErrMethodNotAllowed) && res.Status == http.StatusMethodNotAllowed:
		case errors.Is(err, routers.ErrPathNotFound) && res.Status == http.StatusMethodNotAllowed && oneRawName(target):
			// An escaped slash in the name: the gateway routes the raw
			// path, one segment below /locks/, as /locks/{resource}; the
			// contract's router decodes it first. The method must be one
			// that /locks/{resource} does not have.
			if _, _, err := router.FindRoute(httptest.NewRequest(method, "/locks/x", nil)); !errors.Is(err, routers.ErrMethodNotAllowed) {
				t.Errorf("%s %s answered 405 but /locks/{resource} has that method (%v)", method, target, err)
			}
		default:
			t.Errorf("%s %s answered %d but openapi.yaml has no such operation: %v", method, target, res.Status, err)
		}
		if res.Status >= 400 && method != http.MethodHead {
			checkProblemSchema(t, res)
		}
		return
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 res.Status,
		Header:                 res.Header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true},
	}
	in.SetBodyBytes(res.Body)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		t.Errorf("%s %s → %s\ndoes not match openapi.yaml: %v", method, target, res, err)
		return
	}
	exercised.Lock()
	exercised.seen[route.Operation.OperationID+" "+strconv.Itoa(res.Status)] = true
	exercised.Unlock()
}

// checkProblem fails t unless res is an RFC 9457 problem whose status member
// is the HTTP status.
func checkProblem(t *testing.T, res response) {
	t.Helper()
	if mt, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type")); mt != api.MediaProblem {
		t.Errorf("status %d: Content-Type %q, want %s", res.Status, res.Header.Get("Content-Type"), api.MediaProblem)
	}
	var p map[string]any
	if err := json.Unmarshal(res.Body, &p); err != nil {
		t.Errorf("status %d: problem is not a JSON object: %v: %s", res.Status, err, res.Body)
		return
	}
	for _, member := range []string{"type", "title", "detail"} {
		if s, _ := p[member].(string); s == "" {
			t.Errorf("status %d: problem member %q is %v, want a non-empty string: %s", res.Status, member, p[member], res.Body)
		}
	}
	if typ, _ := p["type"].(string); !strings.HasPrefix(typ, "urn:lockgate:problem:") {
		t.Errorf("status %d: problem type %q is not a lockgate problem URN", res.Status, typ)
	}
	if status, _ := p["status"].(float64); int(status) != res.Status {
		t.Errorf("problem status member is %v, HTTP status is %d", p["status"], res.Status)
	}
}

// wantProblem fails t unless res is a problem of the given status and type.
func wantProblem(t *testing.T, res response, status int, typ string) api.Problem {
	t.Helper()
	if res.Status != status {
		t.Fatalf("got %s, want %d %s", res, status, typ)
	}
	p := res.problem(t)
	if p.Type != typ {
		t.Errorf("problem type %q, want %q", p.Type, typ)
	}
	return p
}

// wantLease fails t unless res is a lease answer of the given status whose
// headers agree with its body.
func wantLease(t *testing.T, res response, status int, resource string) api.Lease {
	t.Helper()
	if res.Status != status {
		t.Fatalf("got %s, want %d", res, status)
	}
	l := res.lease(t)
	if l.Resource != resource {
		t.Errorf("resource %q, want %q", l.Resource, resource)
	}
	if got := res.Header.Get(api.HeaderLeaseID); got != l.LeaseID || got == "" {
		t.Errorf("Lease-Id header %q, body lease_id %q", got, l.LeaseID)
	}
	if got, want := res.Header.Get(api.HeaderFencingToken), strconv.FormatInt(l.FencingToken, 10); got != want {
		t.Errorf("Fencing-Token header %q, want %q", got, want)
	}
	if got, want := res.Header.Get(api.HeaderETag), `"`+strconv.FormatInt(l.FencingToken, 10)+`"`; got != want {
		t.Errorf("ETag %q, want %q", got, want)
	}
	if got := res.Header.Get("Cache-Control"); got != "no-store" {
		t.Errorf("Cache-Control %q, want no-store", got)
	}
	if l.FencingToken < 1 {
		t.Errorf("fencing_token %d, want ≥ 1", l.FencingToken)
	}
	if l.ValidityMs < 1 || l.ValidityMs > l.TTLms {
		t.Errorf("validity_ms %d, want in [1, ttl_ms %d]", l.ValidityMs, l.TTLms)
	}
	return l
}

// header turns name, value pairs into a header.
func header(pairs ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(pairs); i += 2 {
		h.Set(pairs[i], pairs[i+1])
	}
	return h
}

// setRequestHeaders sets hdr on req; a body defaults to application/json and
// an empty header value removes the header.
func setRequestHeaders(req *http.Request, body string, hdr []string) {
	if body != "" {
		req.Header.Set("Content-Type", api.MediaJSON)
	}
	for name, vals := range header(hdr...) {
		if vals[0] == "" {
			req.Header.Del(name)
		} else {
			req.Header[name] = vals
		}
	}
}

// gateway is the handler under test over a Redlock.
type gateway struct {
	handler http.Handler
	locker  *lockcore.Redlock
}

func newGateway(t *testing.T, nodes []lockcore.Node, core *lockcore.Options, opts *handlers.Options) *gateway {
	t.Helper()
	rl, err := lockcore.New(nodes, core)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rl.Close)
	h, err := handlers.New(rl, opts)
	if err != nil {
		t.Fatal(err)
	}
	return &gateway{handler: h, locker: rl}
}

func memNodes(n int, opts *memnode.Options) []lockcore.Node {
	nodes := make([]lockcore.Node, n)
	for i := range nodes {
		nodes[i] = memnode.New(opts)
	}
	return nodes
}

// defaultGateway runs over three in-memory nodes with default options.
func defaultGateway(t *testing.T) *gateway { return newGateway(t, memNodes(3, nil), nil, nil) }

// do serves one request through an httptest.ResponseRecorder and checks the
// answer against the contract. hdr is name, value pairs.
func (g *gateway) do(t *testing.T, method, target, body string, hdr ...string) response {
	t.Helper()
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	setRequestHeaders(req, body, hdr)
	rec := httptest.NewRecorder()
	g.handler.ServeHTTP(rec, req)
	res := response{Status: rec.Code, Header: rec.Header(), Body: rec.Body.Bytes()}
	checkContract(t, method, target, res)
	return res
}

// acquire takes resource for lease (empty: a new one) and fails t otherwise.
func (g *gateway) acquire(t *testing.T, resource, lease, body string) api.Lease {
	t.Helper()
	var hdr []string
	if lease != "" {
		hdr = []string{api.HeaderLeaseID, lease}
	}
	return wantLease(t, g.do(t, PUT, "/locks/"+resource, body, hdr...), http.StatusCreated, resource)
}

// serve starts a real server for tests that wait or disconnect. done, if not
// nil, is called when the handler has returned.
func (g *gateway) serve(t *testing.T, done func(*http.Request)) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.handler.ServeHTTP(w, r)
		if done != nil {
			done(r)
		}
	}))
	// Closing the Redlock first ends any wait still running when a test
	// fails, so that srv.Close, which waits for its handlers, returns.
	t.Cleanup(func() {
		g.locker.Close()
		srv.Close()
	})
	return srv
}

// send makes one request to a real server. It does not touch t, so that
// goroutines can call it; the test goroutine checks the contract.
func send(ctx context.Context, srv *httptest.Server, method, target, body string, hdr ...string) (response, error) {
	req, err := http.NewRequestWithContext(ctx, method, srv.URL+target, strings.NewReader(body))
	if err != nil {
		return response{}, err
	}
	setRequestHeaders(req, body, hdr)
	resp, err := srv.Client().Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return response{Status: resp.StatusCode, Header: resp.Header, Body: b}, err
}

// answer is a response from a goroutine.
type answer struct {
	res  response
	err  error
	took time.Duration
}

// sendAsync sends in a goroutine and delivers the answer on the channel.
func sendAsync(ctx context.Context, srv *httptest.Server, method, target, body string, hdr ...string) <-chan answer {
	ch := make(chan answer, 1)
	go func() {
		start := time.Now()
		res, err := send(ctx, srv, method, target, body, hdr...)
		ch <- answer{res, err, time.Since(start)}
	}()
	return ch
}

// await returns the answer, failing t if it takes longer than limit.
func await(t *testing.T, ch <-chan answer, limit time.Duration, what string) answer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(limit):
		t.Fatalf("%s: no answer after %v", what, limit)
		return answer{}
	}
}

// wantWaiterGranted awaits a waiting PUT on resource after its holder
// released (within 10 s: the holder's TTL must be longer, so the answer
// comes from the release), checks it against the contract, and wants it
// granted with a token above the holder's.
func wantWaiterGranted(t *testing.T, waiting <-chan answer, resource string, holder int64) api.Lease {
	t.Helper()
	a := await(t, waiting, 10*time.Second, "the waiter after the release")
	if a.err != nil {
		t.Fatal(a.err)
	}
	checkContract(t, PUT, "/locks/"+resource, a.res)
	l := wantLease(t, a.res, http.StatusCreated, resource)
	if l.FencingToken <= holder {
		t.Errorf("waiter's token %d, want above the holder's %d", l.FencingToken, holder)
	}
	return l
}

// waiterSpy hears of every acquisition its node refuses because another
// lease holds the lock. A waiting Acquire joins its queue before its first
// attempt, so a refusal means a waiter is in the queue: the tests know that
// without sleeping.
type waiterSpy struct{ refused chan string }

// awaitWaiter blocks until a waiter has been refused on the spy's node.
func (s *waiterSpy) awaitWaiter(t *testing.T) {
	t.Helper()
	select {
	case <-s.refused:
	case <-time.After(10 * time.Second):
		t.Fatal("no waiter made an attempt within 10s")
	}
}

// spyGateway runs over a spied-on node and two plain in-memory nodes.
func spyGateway(t *testing.T, core *lockcore.Options, opts *handlers.Options) (*gateway, *waiterSpy) {
	spy := &waiterSpy{refused: make(chan string, 64)}
	// The wrapper keeps memnode's Watch: releases are announced as in
	// production.
	node := nodetest.NewFaulty(memnode.New(nil))
	node.SetAfterAcquire(func(req lockcore.NodeAcquire, rep lockcore.NodeReply) {
		if rep.Status == lockcore.StatusTaken {
			select {
			case spy.refused <- req.Resource:
			default:
			}
		}
	})
	return newGateway(t, append([]lockcore.Node{node}, memNodes(2, nil)...), core, opts), spy
}

// errDown is the error of a node that is down.
var errDown = errors.New("connection refused")

// downNode returns a node named name that fails every call with errDown.
func downNode(name string) lockcore.Node {
	n := nodetest.NewFaulty(memnode.New(&memnode.Options{Name: name}))
	n.SetDown(errDown)
	return n
}

// clockGateway runs over three in-memory nodes on a fake clock, shared by
// the nodes and the Redlock, so TTLs, validities and Retry-After are exact.
func clockGateway(t *testing.T) (*gateway, *nodetest.Clock) {
	c := nodetest.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	return newGateway(t, memNodes(3, &memnode.Options{Now: c.Now}), &lockcore.Options{Clock: c}, nil), c
}

// drift is Redlock's default clock drift allowance for ttl.
func drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*0.01) + 2*time.Millisecond
}

func TestOpenAPIDocumentIsValid(t *testing.T) {
	t.Parallel()
	doc, err := openapi3.NewLoader().LoadFromData(lockgate.OpenAPI)
	if err != nil {
		t.Fatalf("openapi.yaml does not load: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.yaml is invalid: %v", err)
	}
	if _, err := gorillamux.NewRouter(doc); err != nil {
		t.Fatalf("openapi.yaml routes: %v", err)
	}
}

func TestAcquire(t *testing.T) {
	t.Parallel()

	t.Run("a new lease gets 201 with its lease id, token, ETag and Location", func(t *testing.T) {
		g := defaultGateway(t)
		before := time.Now()
		res := g.do(t, PUT, "/locks/orders:42", `{"ttl_ms":5000,"owner":"worker-7"}`)
		after := time.Now()
		l := wantLease(t, res, http.StatusCreated, "orders:42")
		if got := res.Header.Get("Location"); got != "/locks/orders:42" {
			t.Errorf("Location %q, want /locks/orders:42", got)
		}
		if l.TTLms != 5000 {
			t.Errorf("ttl_ms %d, want 5000", l.TTLms)
		}
		if !lockcore.ValidLeaseID(l.LeaseID) {
			t.Errorf("minted lease id %q is not a valid lease id", l.LeaseID)
		}
		if l.ExpiresAt.Before(before) || l.ExpiresAt.After(after.Add(5*time.Second)) {
			t.Errorf("expires_at %v, want within the TTL of %v", l.ExpiresAt, before)
		}
		if l.ExpiresAt.Location() != time.UTC {
			t.Errorf("expires_at %v is not in UTC", l.ExpiresAt)
		}
	})

	t.Run("an empty body takes the default TTL of 30000 ms", func(t *testing.T) {
		g := defaultGateway(t)
		for _, body := range []string{"", "{}"} {
			res := g.do(t, PUT, "/locks/empty-"+strconv.Itoa(len(body)), body)
			if l := wantLease(t, res, http.StatusCreated, "empty-"+strconv.Itoa(len(body))); l.TTLms != api.DefaultTTLms {
				t.Errorf("body %q: ttl_ms %d, want %d", body, l.TTLms, api.DefaultTTLms)
			}
		}
	})

	t.Run("a retry with the same Lease-Id gets 200 with the same token and a refreshed TTL", func(t *testing.T) {
		g, clock := clockGateway(t)
		first := g.acquire(t, "jobs", leaseA, `{"ttl_ms":1000}`)
		if first.LeaseID != leaseA {
			t.Fatalf("lease_id %q, want the client's %q", first.LeaseID, leaseA)
		}
		clock.Advance(600 * time.Millisecond)
		res := g.do(t, PUT, "/locks/jobs", `{"ttl_ms":60000}`, api.HeaderLeaseID, leaseA)
		again := wantLease(t, res, http.StatusOK, "jobs")
		if again.FencingToken != first.FencingToken || again.LeaseID != leaseA {
			t.Errorf("retry got token %d lease %q, want token %d lease %q", again.FencingToken, again.LeaseID, first.FencingToken, leaseA)
		}
		if again.TTLms != 60000 {
			t.Errorf("ttl_ms %d, want the new 60000", again.TTLms)
		}
		if want := 60*time.Second - drift(60*time.Second); again.ValidityMs != want.Milliseconds() {
			t.Errorf("validity_ms %d, want %d", again.ValidityMs, want.Milliseconds())
		}
		if want := clock.Now().Add(60*time.Second - drift(60*time.Second)); !again.ExpiresAt.Equal(want) {
			t.Errorf("expires_at %v, want %v", again.ExpiresAt, want)
		}
		// The nodes refreshed it too: the first TTL has run out, yet it is held.
		clock.Advance(time.Second)
		res = g.do(t, GET, "/locks/jobs", "")
		if res.Status != http.StatusOK {
			t.Fatalf("GET after the first TTL: %s, want 200", res)
		}
		var info api.LockInfo
		if err := json.Unmarshal(res.Body, &info); err != nil {
			t.Fatal(err)
		}
		if info.TTLms != 60000 || info.FencingToken != first.FencingToken {
			t.Errorf("GET shows ttl_ms %d token %d, want 60000 and %d", info.TTLms, info.FencingToken, first.FencingToken)
		}
	})

	t.Run("a 200 retry has no Location because nothing was created", func(t *testing.T) {
		g := defaultGateway(t)
		g.acquire(t, "jobs", leaseA, "")
		res := g.do(t, PUT, "/locks/jobs", "", api.HeaderLeaseID, leaseA)
		wantLease(t, res, http.StatusOK, "jobs")
		if loc := res.Header.Get("Location"); loc != "" {
			t.Errorf("Location %q on 200", loc)
		}
	})

	t.Run("the edges of every field are accepted", func(t *testing.T) {
		g := defaultGateway(t)
		for i, tc := range []struct {
			name, body string
			hdr        []string
		}{
			{"resource of 200 characters", "", nil},
			{"ttl_ms at the server minimum of 100", `{"ttl_ms":100}`, nil},
			{"ttl_ms at the server maximum of an hour", `{"ttl_ms":3600000}`, nil},
			{"wait_ms at the contract maximum of 300000", `{"wait_ms":300000}`, nil},
			{"owner of 256 characters", `{"owner":"` + strings.Repeat("o", 256) + `"}`, nil},
			{"owner of 256 two-byte characters", `{"owner":"` + strings.Repeat("é", 256) + `"}`, nil},
			{"Lease-Id of 16 characters", "", []string{api.HeaderLeaseID, strings.Repeat("a", 16)}},
			{"Lease-Id of 128 characters", "", []string{api.HeaderLeaseID, strings.Repeat("Z_-9", 32)}},
			{"JSON with a charset parameter", `{}`, []string{"Content-Type", "application/json; charset=utf-8"}},
			{"an empty body with another content type", "", []string{"Content-Type", "text/plain"}},
		} {
			resource := fmt.Sprintf("edge-%d", i)
			if i == 0 {
				resource = strings.Repeat("r", 200)
			}
			res := g.do(t, PUT, "/locks/"+resource, tc.body, tc.hdr...)
			if res.Status != http.StatusCreated {
				t.Errorf("%s: got %s, want 201", tc.name, res)
			}
		}
	})

	t.Run("another lease gets 409 with the holder's remaining TTL, Retry-After rounded up", func(t *testing.T) {
		for _, tc := range []struct {
			ttl, elapsed time.Duration
			retryAfter   string
		}{
			{1500 * time.Millisecond, 0, "2"},
			{1000 * time.Millisecond, 0, "1"},
			{1001 * time.Millisecond, 0, "2"},
			{30 * time.Second, 29*time.Second + 900*time.Millisecond, "1"},
		} {
			g, clock := clockGateway(t)
			g.acquire(t, "r", "", fmt.Sprintf(`{"ttl_ms":%d}`, tc.ttl.Milliseconds()))
			clock.Advance(tc.elapsed)
			res := g.do(t, PUT, "/locks/r", "")
			p := wantProblem(t, res, http.StatusConflict, api.ProblemTaken)
			remaining := (tc.ttl - tc.elapsed).Milliseconds()
			if p.RetryAfterMs == nil || *p.RetryAfterMs != remaining {
				t.Errorf("holder TTL %v after %v: retry_after_ms %v, want %d", tc.ttl, tc.elapsed, p.RetryAfterMs, remaining)
			}
			if got := res.Header.Get(api.HeaderRetryAfter); got != tc.retryAfter {
				t.Errorf("holder TTL %v after %v: Retry-After %q, want %q", tc.ttl, tc.elapsed, got, tc.retryAfter)
			}
		}
	})

	t.Run("a lease that holds nothing gets 409 even with its own Lease-Id", func(t *testing.T) {
		g := defaultGateway(t)
		g.acquire(t, "r", leaseA, "")
		wantProblem(t, g.do(t, PUT, "/locks/r", "", api.HeaderLeaseID, leaseB), http.StatusConflict, api.ProblemTaken)
	})
}

func TestAcquireRefusesBadInput(t *testing.T) {
	t.Parallel()
	g := defaultGateway(t)
	for _, tc := range []struct {
		name, target, body string
		hdr                []string
		field              string
	}{
		{"a resource with a character outside A-Z a-z 0-9 . _ - :", "/locks/bad!name", "", nil, "resource"},
		{"a resource with a space", "/locks/a%20b", "", nil, "resource"},
		{"a resource with a non-ASCII letter", "/locks/%C3%A9t%C3%A9", "", nil, "resource"},
		{"a resource of 201 characters", "/locks/" + strings.Repeat("r", 201), "", nil, "resource"},
		{"a body that is not JSON", "/locks/r", `{"ttl_ms":`, nil, "body"},
		{"a field the contract does not know", "/locks/r", `{"ttl":1000}`, nil, "ttl"},
		{"ttl_ms as a string", "/locks/r", `{"ttl_ms":"1000"}`, nil, "ttl_ms"},
		{"ttl_ms with a fraction", "/locks/r", `{"ttl_ms":30000.5}`, nil, "ttl_ms"},
		{"ttl_ms of zero", "/locks/r", `{"ttl_ms":0}`, nil, "ttl_ms"},
		{"ttl_ms below the server minimum of 100", "/locks/r", `{"ttl_ms":99}`, nil, "ttl_ms"},
		{"ttl_ms above the server maximum of an hour", "/locks/r", `{"ttl_ms":3600001}`, nil, "ttl_ms"},
		{"ttl_ms above the contract maximum of a day", "/locks/r", `{"ttl_ms":86400001}`, nil, "ttl_ms"},
		{"a negative wait_ms", "/locks/r", `{"wait_ms":-1}`, nil, "wait_ms"},
		{"wait_ms over 300000", "/locks/r", `{"wait_ms":300001}`, nil, "wait_ms"},
		{"wait_ms as a boolean", "/locks/r", `{"wait_ms":true}`, nil, "wait_ms"},
		{"an owner of 257 characters", "/locks/r", `{"owner":"` + strings.Repeat("o", 257) + `"}`, nil, "owner"},
		{"an owner with a control character", "/locks/r", `{"owner":"bell\u0007"}`, nil, "owner"},
		{"an owner with a newline", "/locks/r", `{"owner":"two\nlines"}`, nil, "owner"},
		{"an owner with DEL", "/locks/r", `{"owner":"del\u007f"}`, nil, "owner"},
		{"an owner that is a number", "/locks/r", `{"owner":7}`, nil, "owner"},
		{"a Lease-Id shorter than 16 characters", "/locks/r", "", []string{api.HeaderLeaseID, "short-lease"}, api.HeaderLeaseID},
		{"a Lease-Id with characters outside A-Z a-z 0-9 - _", "/locks/r", "", []string{api.HeaderLeaseID, "secret.lease.id.123456"}, api.HeaderLeaseID},
		{"a Lease-Id of 129 characters", "/locks/r", "", []string{api.HeaderLeaseID, strings.Repeat("s", 129)}, api.HeaderLeaseID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := g.do(t, PUT, tc.target, tc.body, tc.hdr...)
			p := wantProblem(t, res, http.StatusBadRequest, api.ProblemInvalid)
			if p.Field != tc.field {
				t.Errorf("field %q, want %q (detail %q)", p.Field, tc.field, p.Detail)
			}
			if !strings.Contains(p.Detail, tc.field) {
				t.Errorf("detail %q does not name %q", p.Detail, tc.field)
			}
			// A malformed lease id may still be someone's secret.
			if len(tc.hdr) == 2 && tc.hdr[0] == api.HeaderLeaseID && bytes.Contains(res.Body, []byte(tc.hdr[1])) {
				t.Errorf("the problem echoes the Lease-Id: %s", res.Body)
			}
		})
	}
	// Nothing above may have taken a lock.
	if res := g.do(t, GET, "/locks/r", ""); res.Status != http.StatusNotFound {
		t.Errorf("after refused requests GET /locks/r is %s, want 404", res)
	}
}

func TestRequestBodyLimits(t *testing.T) {
	t.Parallel()
	owner := func(n int) string { return `{"owner":"` + strings.Repeat("x", n) + `"}` } // n+12 bytes

	t.Run("a body of exactly BodyLimit bytes is read", func(t *testing.T) {
		g := newGateway(t, memNodes(1, nil), nil, &handlers.Options{BodyLimit: 64})
		if body := owner(52); len(body) != 64 {
			t.Fatalf("body is %d bytes", len(body))
		} else if res := g.do(t, PUT, "/locks/r", body); res.Status != http.StatusCreated {
			t.Errorf("got %s, want 201", res)
		}
	})

	t.Run("a body one byte over BodyLimit gets 413 on PUT and PATCH", func(t *testing.T) {
		g := newGateway(t, memNodes(1, nil), nil, &handlers.Options{BodyLimit: 64})
		l := g.acquire(t, "r", "", "")
		wantProblem(t, g.do(t, PUT, "/locks/s", owner(53)), http.StatusRequestEntityTooLarge, api.ProblemTooLarge)
		wantProblem(t, g.do(t, PATCH, "/locks/r", `{"ttl_ms":1000}`+strings.Repeat(" ", 50), api.HeaderLeaseID, l.LeaseID),
			http.StatusRequestEntityTooLarge, api.ProblemTooLarge)
		if res := g.do(t, GET, "/locks/s", ""); res.Status != http.StatusNotFound {
			t.Errorf("the refused PUT took the lock: GET is %s", res)
		}
	})

	t.Run("the default limit is 16 KiB", func(t *testing.T) {
		g := defaultGateway(t)
		body := `{"owner":"x"}` + strings.Repeat(" ", 16<<10-13)
		if res := g.do(t, PUT, "/locks/r", body); res.Status != http.StatusCreated {
			t.Errorf("16 KiB: got %s, want 201", res)
		}
		wantProblem(t, g.do(t, PUT, "/locks/s", body+" "), http.StatusRequestEntityTooLarge, api.ProblemTooLarge)
	})

	t.Run("a body sent to an operation that takes none is ignored, whatever its size or type", func(t *testing.T) {
		g := newGateway(t, memNodes(1, nil), nil, &handlers.Options{BodyLimit: 64})
		l := g.acquire(t, "r", "", "")
		big := strings.Repeat("x", 1000)
		if res := g.do(t, GET, "/locks/r", big, "Content-Type", "text/plain"); res.Status != http.StatusOK {
			t.Errorf("GET with a body: %s, want 200", res)
		}
		for _, target := range []string{"/healthz", "/readyz"} {
			if res := g.do(t, GET, target, big, "Content-Type", "text/plain"); res.Status != http.StatusOK {
				t.Errorf("GET %s with a body: %s, want 200", target, res)
			}
		}
		if res := g.do(t, DELETE, "/locks/r", big, api.HeaderLeaseID, l.LeaseID); res.Status != http.StatusNoContent {
			t.Errorf("DELETE with a body: %s, want 204", res)
		}
	})

	t.Run("a body that is not JSON gets 415 on PUT and PATCH", func(t *testing.T) {
		g := defaultGateway(t)
		l := g.acquire(t, "r", "", "")
		for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "application/problem+json", "not a media type", ""} {
			wantProblem(t, g.do(t, PUT, "/locks/s", `{}`, "Content-Type", ct), http.StatusUnsupportedMediaType, api.ProblemMediaType)
			wantProblem(t, g.do(t, PATCH, "/locks/r", `{}`, "Content-Type", ct, api.HeaderLeaseID, l.LeaseID),
				http.StatusUnsupportedMediaType, api.ProblemMediaType)
		}
	})
}

func TestAcquireWaiting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("a waiter gets the lock when the holder releases during the wait", func(t *testing.T) {
		g, spy := spyGateway(t, nil, nil)
		srv := g.serve(t, nil)
		holder := g.acquire(t, "w", "", `{"ttl_ms":30000}`)
		waiting := sendAsync(ctx, srv, PUT, "/locks/w", `{"wait_ms":60000,"owner":"waiter"}`)
		spy.awaitWaiter(t)
		if res := g.do(t, DELETE, "/locks/w", "", api.HeaderLeaseID, holder.LeaseID); res.Status != http.StatusNoContent {
			t.Fatalf("release: %s", res)
		}
		// The holder's TTL is 30s: an answer within 10s came from the release.
		wantWaiterGranted(t, waiting, "w", holder.FencingToken)
	})

	t.Run("a waiter gets 409 when wait_ms runs out", func(t *testing.T) {
		g := defaultGateway(t)
		srv := g.serve(t, nil)
		g.acquire(t, "w", "", `{"ttl_ms":30000}`)
		a := await(t, sendAsync(ctx, srv, PUT, "/locks/w", `{"wait_ms":150}`), 10*time.Second, "waiter")
		if a.err != nil {
			t.Fatal(a.err)
		}
		checkContract(t, PUT, "/locks/w", a.res)
		p := wantProblem(t, a.res, http.StatusConflict, api.ProblemTaken)
		if a.took < 150*time.Millisecond {
			t.Errorf("answered after %v, before wait_ms 150 ran out", a.took)
		}
		if p.RetryAfterMs == nil || *p.RetryAfterMs <= 0 || *p.RetryAfterMs > 30000 {
			t.Errorf("retry_after_ms %v, want in (0, 30000]", p.RetryAfterMs)
		}
		if ra, err := strconv.Atoi(a.res.Header.Get(api.HeaderRetryAfter)); err != nil || ra < 1 || ra > 30 {
			t.Errorf("Retry-After %q, want 1..30", a.res.Header.Get(api.HeaderRetryAfter))
		}
	})

	t.Run("a waiter past MaxWaiters gets 429 with Retry-After", func(t *testing.T) {
		g, spy := spyGateway(t, &lockcore.Options{MaxWaiters: 1}, nil)
		srv := g.serve(t, nil)
		holder := g.acquire(t, "w", "", `{"ttl_ms":30000}`)
		first := sendAsync(ctx, srv, PUT, "/locks/w", `{"wait_ms":60000}`)
		spy.awaitWaiter(t)
		second := await(t, sendAsync(ctx, srv, PUT, "/locks/w", `{"wait_ms":60000}`), 10*time.Second, "second waiter")
		if second.err != nil {
			t.Fatal(second.err)
		}
		checkContract(t, PUT, "/locks/w", second.res)
		if p := wantProblem(t, second.res, http.StatusTooManyRequests, api.ProblemTooManyWaiters); p.Limit != "replica" {
			t.Errorf("limit %q, want replica", p.Limit)
		}
		if second.res.Header.Get(api.HeaderRetryAfter) == "" {
			t.Error("429 without Retry-After")
		}
		// The first waiter is unaffected.
		g.do(t, DELETE, "/locks/w", "", api.HeaderLeaseID, holder.LeaseID)
		a := await(t, first, 10*time.Second, "first waiter")
		if a.err != nil {
			t.Fatal(a.err)
		}
		checkContract(t, PUT, "/locks/w", a.res)
		wantLease(t, a.res, http.StatusCreated, "w")
	})

	t.Run("a waiter gets 503 shutting-down when the Redlock closes", func(t *testing.T) {
		g, spy := spyGateway(t, nil, nil)
		srv := g.serve(t, nil)
		g.acquire(t, "w", "", `{"ttl_ms":30000}`)
		waiting := sendAsync(ctx, srv, PUT, "/locks/w", `{"wait_ms":60000}`)
		spy.awaitWaiter(t)
		g.locker.Close()
		a := await(t, waiting, 10*time.Second, "waiter after Close")
		if a.err != nil {
			t.Fatal(a.err)
		}
		checkContract(t, PUT, "/locks/w", a.res)
		wantProblem(t, a.res, http.StatusServiceUnavailable, api.ProblemShuttingDown)
		if a.res.Header.Get(api.HeaderRetryAfter) == "" {
			t.Error("503 without Retry-After")
		}
		// New waits are refused at once.
		wantProblem(t, g.do(t, PUT, "/locks/w", `{"wait_ms":60000}`), http.StatusServiceUnavailable, api.ProblemShuttingDown)
	})

	t.Run("a client that leaves while waiting takes no lock and does not block the next waiter", func(t *testing.T) {
		var logs testlog.Buffer
		log := zerolog.New(&logs)
		finished := make(chan string, 8)
		g, spy := spyGateway(t, nil, &handlers.Options{Logger: &log})
		srv := g.serve(t, func(r *http.Request) { finished <- r.Header.Get("X-Who") })
		holder := g.acquire(t, "w", "", `{"ttl_ms":30000}`)

		leaving, leave := context.WithCancel(ctx)
		defer leave()
		left := sendAsync(leaving, srv, PUT, "/locks/w", `{"wait_ms":300000,"owner":"left"}`, "X-Who", "left")
		spy.awaitWaiter(t)
		next := sendAsync(ctx, srv, PUT, "/locks/w", `{"wait_ms":300000,"owner":"next"}`, "X-Who", "next")

		leave()
		if a := await(t, left, 10*time.Second, "the leaving client"); a.err == nil {
			t.Fatalf("the leaving client got an answer: %s", a.res)
		}
		select {
		case who := <-finished:
			if who != "left" {
				t.Fatalf("%q finished first, want the client that left", who)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the handler of the client that left did not return within 10s")
		}
		if !strings.Contains(logs.String(), `"outcome":"client_gone"`) {
			t.Errorf("no client_gone outcome in the log:\n%s", logs.String())
		}

		g.do(t, DELETE, "/locks/w", "", api.HeaderLeaseID, holder.LeaseID)
		// The holder's TTL is 30s: within 10s means the release woke it.
		a := await(t, next, 10*time.Second, "the next waiter after the release")
		if a.err != nil {
			t.Fatal(a.err)
		}
		checkContract(t, PUT, "/locks/w", a.res)
		l := wantLease(t, a.res, http.StatusCreated, "w")
		res := g.do(t, GET, "/locks/w", "")
		var info api.LockInfo
		if err := json.Unmarshal(res.Body, &info); err != nil || res.Status != http.StatusOK {
			t.Fatalf("GET: %s", res)
		}
		if info.Owner != "next" || info.FencingToken != l.FencingToken {
			t.Errorf("held by owner %q token %d, want the next waiter with token %d", info.Owner, info.FencingToken, l.FencingToken)
		}
	})
}

func TestNoQuorum(t *testing.T) {
	t.Parallel()
	nodes := []lockcore.Node{memnode.New(nil), downNode("down-1"), downNode("down-2")}
	logs := &testlog.Buffer{}
	log := zerolog.New(logs)
	g := newGateway(t, nodes, nil, &handlers.Options{Logger: &log})
	for _, tc := range []struct {
		name, method, body string
		hdr                []string
	}{
		{"PUT", PUT, `{"ttl_ms":1000}`, nil},
		{"PUT with a wait", PUT, `{"wait_ms":1000}`, nil},
		{"PATCH", PATCH, "", []string{api.HeaderLeaseID, leaseA}},
		{"PATCH with If-Match", PATCH, "", []string{api.HeaderLeaseID, leaseA, api.HeaderIfMatch, `"1"`}},
		{"DELETE", DELETE, "", []string{api.HeaderLeaseID, leaseA}},
		{"GET", GET, "", nil},
	} {
		t.Run(tc.name+" with two of three nodes down gets 503; the log names the nodes, the answer does not", func(t *testing.T) {
			res := g.do(t, tc.method, "/locks/r", tc.body, tc.hdr...)
			wantProblem(t, res, http.StatusServiceUnavailable, api.ProblemNoQuorum)
			if res.Header.Get(api.HeaderRetryAfter) == "" {
				t.Error("503 without Retry-After")
			}
			if strings.Contains(res.String(), "down-1") || strings.Contains(res.String(), "down-2") {
				t.Errorf("the answer names the lock nodes: %s", res)
			}
			if l := logs.String(); !strings.Contains(l, "down-1") || !strings.Contains(l, "down-2") {
				t.Errorf("the log does not name the failing nodes:\n%s", l)
			}
		})
	}
	t.Run("readyz is 503 and healthz is 200", func(t *testing.T) {
		wantProblem(t, g.do(t, GET, "/readyz", ""), http.StatusServiceUnavailable, api.ProblemNoQuorum)
		if res := g.do(t, GET, "/healthz", ""); res.Status != http.StatusOK {
			t.Errorf("healthz: %s", res)
		}
	})
}

// TestLivenessAsksNoNode: with every node down /readyz is 503 while /livez
// (and /healthz, its older name) answers 200 from the process alone.
func TestLivenessAsksNoNode(t *testing.T) {
	t.Parallel()
	g := newGateway(t, []lockcore.Node{downNode("down-1"), downNode("down-2"), downNode("down-3")}, nil, nil)
	wantProblem(t, g.do(t, GET, "/readyz", ""), http.StatusServiceUnavailable, api.ProblemNoQuorum)
	for _, target := range []string{"/livez", "/healthz"} {
		res := g.do(t, GET, target, "")
		var h api.Health
		if err := json.Unmarshal(res.Body, &h); err != nil || res.Status != http.StatusOK || h.Status != "ok" {
			t.Errorf("GET %s with every node down: %s, want 200 status ok", target, res)
		}
		if res := g.do(t, http.MethodHead, target, ""); res.Status != http.StatusOK {
			t.Errorf("HEAD %s with every node down: %s", target, res)
		}
	}
}

func TestHealth(t *testing.T) {
	t.Parallel()
	// One node of three down still leaves a quorum.
	g := newGateway(t, append(memNodes(2, nil), downNode("down")), nil, nil)
	for _, tc := range []struct{ target, status string }{{"/healthz", "ok"}, {"/livez", "ok"}, {"/readyz", "ready"}} {
		res := g.do(t, GET, tc.target, "")
		var h api.Health
		if err := json.Unmarshal(res.Body, &h); err != nil || res.Status != http.StatusOK || h.Status != tc.status {
			t.Errorf("GET %s: %s, want 200 status %q", tc.target, res, tc.status)
		}
		// While ready, /readyz says which node does not serve, since
		// when and why, without its name or address.
		if tc.target != "/readyz" {
			continue
		}
		if len(h.Nodes) != 3 || h.Nodes[2].State != "unreachable" || h.Nodes[2].Since == nil ||
			h.Nodes[2].Reason != "its check failed: an error (the gateway's log has it)" || strings.Contains(string(res.Body), "down") {
			t.Errorf("GET /readyz: %s, want node 3 unreachable, since when and why, never its name", res)
		}
	}
}

func TestExtend(t *testing.T) {
	t.Parallel()

	t.Run("with ttl_ms: 200, same token, the new TTL and validity", func(t *testing.T) {
		g, clock := clockGateway(t)
		l := g.acquire(t, "r", "", `{"ttl_ms":1000}`)
		clock.Advance(400 * time.Millisecond)
		res := g.do(t, PATCH, "/locks/r", `{"ttl_ms":60000}`, api.HeaderLeaseID, l.LeaseID)
		e := wantLease(t, res, http.StatusOK, "r")
		if e.FencingToken != l.FencingToken || e.LeaseID != l.LeaseID {
			t.Errorf("extended token %d lease %q, want %d %q", e.FencingToken, e.LeaseID, l.FencingToken, l.LeaseID)
		}
		wantValidity := 60*time.Second - drift(60*time.Second)
		if e.TTLms != 60000 || e.ValidityMs != wantValidity.Milliseconds() {
			t.Errorf("ttl_ms %d validity_ms %d, want 60000 and %d", e.TTLms, e.ValidityMs, wantValidity.Milliseconds())
		}
		if want := clock.Now().Add(wantValidity); !e.ExpiresAt.Equal(want) {
			t.Errorf("expires_at %v, want %v", e.ExpiresAt, want)
		}
	})

	t.Run("without a body: 200 with the TTL the lock was taken with, counted from now", func(t *testing.T) {
		g, clock := clockGateway(t)
		l := g.acquire(t, "r", "", `{"ttl_ms":2000}`)
		clock.Advance(1500 * time.Millisecond)
		e := wantLease(t, g.do(t, PATCH, "/locks/r", "", api.HeaderLeaseID, l.LeaseID), http.StatusOK, "r")
		if e.FencingToken != l.FencingToken || e.TTLms != 2000 || e.ValidityMs != l.ValidityMs {
			t.Errorf("got token %d ttl_ms %d validity_ms %d, want %d, 2000, %d", e.FencingToken, e.TTLms, e.ValidityMs, l.FencingToken, l.ValidityMs)
		}
		if want := l.ExpiresAt.Add(1500 * time.Millisecond); !e.ExpiresAt.Equal(want) {
			t.Errorf("expires_at %v, want %v", e.ExpiresAt, want)
		}
		// Past the first expiry the lock still stands.
		clock.Advance(time.Second)
		if res := g.do(t, GET, "/locks/r", ""); res.Status != http.StatusOK {
			t.Errorf("GET after the first TTL: %s, want 200", res)
		}
	})

	t.Run("with the holder's token in If-Match: 200", func(t *testing.T) {
		g := defaultGateway(t)
		l := g.acquire(t, "r", "", "")
		res := g.do(t, PATCH, "/locks/r", "", api.HeaderLeaseID, l.LeaseID, api.HeaderIfMatch, `"`+strconv.FormatInt(l.FencingToken, 10)+`"`)
		wantLease(t, res, http.StatusOK, "r")
	})

	t.Run("with another token in If-Match: 412", func(t *testing.T) {
		g := defaultGateway(t)
		l := g.acquire(t, "r", "", "")
		res := g.do(t, PATCH, "/locks/r", "", api.HeaderLeaseID, l.LeaseID, api.HeaderIfMatch, `"`+strconv.FormatInt(l.FencingToken+1, 10)+`"`)
		wantProblem(t, res, http.StatusPreconditionFailed, api.ProblemTokenMismatch)
	})

	t.Run("a lock nobody holds: 404", func(t *testing.T) {
		g := defaultGateway(t)
		wantProblem(t, g.do(t, PATCH, "/locks/r", "", api.HeaderLeaseID, leaseA), http.StatusNotFound, api.ProblemNotHeld)
	})

	t.Run("a lock another lease holds: 409 with Retry-After, the holder untouched", func(t *testing.T) {
		g := defaultGateway(t)
		holder := g.acquire(t, "r", leaseA, `{"ttl_ms":5000}`)
		res := g.do(t, PATCH, "/locks/r", `{"ttl_ms":60000}`, api.HeaderLeaseID, leaseB)
		p := wantProblem(t, res, http.StatusConflict, api.ProblemHeldByOther)
		if p.RetryAfterMs == nil || *p.RetryAfterMs <= 0 || *p.RetryAfterMs > 5000 {
			t.Errorf("retry_after_ms %v, want in (0, 5000]", p.RetryAfterMs)
		}
		if res.Header.Get(api.HeaderRetryAfter) == "" {
			t.Error("409 without Retry-After")
		}
		// The holder can still extend: nothing changed hands.
		wantLease(t, g.do(t, PATCH, "/locks/r", "", api.HeaderLeaseID, holder.LeaseID), http.StatusOK, "r")
	})

	t.Run("bad input: 400 naming the field", func(t *testing.T) {
		g := defaultGateway(t)
		l := g.acquire(t, "r", "", "")
		for _, tc := range []struct {
			name, body string
			hdr        []string
			field      string
			detail     string
		}{
			{"without Lease-Id", "", nil, api.HeaderLeaseID, "required"},
			{"with a malformed Lease-Id", "", []string{api.HeaderLeaseID, "x"}, api.HeaderLeaseID, ""},
			{"with an unquoted If-Match", "", []string{api.HeaderLeaseID, l.LeaseID, api.HeaderIfMatch, "1"}, api.HeaderIfMatch, ""},
			{"with a weak If-Match", "", []string{api.HeaderLeaseID, l.LeaseID, api.HeaderIfMatch, `W/"1"`}, api.HeaderIfMatch, ""},
			{"with If-Match zero", "", []string{api.HeaderLeaseID, l.LeaseID, api.HeaderIfMatch, `"0"`}, api.HeaderIfMatch, ""},
			{"with If-Match *", "", []string{api.HeaderLeaseID, l.LeaseID, api.HeaderIfMatch, `*`}, api.HeaderIfMatch, ""},
			{"with ttl_ms below the server minimum", `{"ttl_ms":99}`, []string{api.HeaderLeaseID, l.LeaseID}, "ttl_ms", ""},
			{"with an unknown field", `{"wait_ms":1}`, []string{api.HeaderLeaseID, l.LeaseID}, "wait_ms", ""},
		} {
			res := g.do(t, PATCH, "/locks/r", tc.body, tc.hdr...)
			p := wantProblem(t, res, http.StatusBadRequest, api.ProblemInvalid)
			if p.Field != tc.field || !strings.Contains(p.Detail, tc.field) || !strings.Contains(p.Detail, tc.detail) {
				t.Errorf("%s: field %q detail %q, want field %q and a detail with %q", tc.name, p.Field, p.Detail, tc.field, tc.detail)
			}
		}
	})
}

func TestRelease(t *testing.T) {
	t.Parallel()

	t.Run("204, then the lock can be taken again with a higher token", func(t *testing.T) {
		g := defaultGateway(t)
		l := g.acquire(t, "r", "", "")
		res := g.do(t, DELETE, "/locks/r", "", api.HeaderLeaseID, l.LeaseID)
		if res.Status != http.StatusNoContent || len(res.Body) != 0 {
			t.Fatalf("got %s, want 204 without a body", res)
		}
		wantProblem(t, g.do(t, GET, "/locks/r", ""), http.StatusNotFound, api.ProblemNotHeld)
		again := g.acquire(t, "r", "", "")
		if again.FencingToken <= l.FencingToken {
			t.Errorf("token after release %d, want above %d", again.FencingToken, l.FencingToken)
		}
	})

	t.Run("the same lease id can take the lock again after releasing it, with a higher token", func(t *testing.T) {
		g := defaultGateway(t)
		l := g.acquire(t, "r", leaseA, "")
		g.do(t, DELETE, "/locks/r", "", api.HeaderLeaseID, leaseA)
		if again := g.acquire(t, "r", leaseA, ""); again.FencingToken <= l.FencingToken {
			t.Errorf("token %d, want above %d", again.FencingToken, l.FencingToken)
		}
	})

	t.Run("with the holder's token in If-Match: 204", func(t *testing.T) {
		g := defaultGateway(t)
		l := g.acquire(t, "r", "", "")
		res := g.do(t, DELETE, "/locks/r", "", api.HeaderLeaseID, l.LeaseID, api.HeaderIfMatch, `"`+strconv.FormatInt(l.FencingToken, 10)+`"`)
		if res.Status != http.StatusNoContent {
			t.Errorf("got %s, want 204", res)
		}
	})

	t.Run("a second release: 404", func(t *testing.T) {
		g := defaultGateway(t)
		l := g.acquire(t, "r", "", "")
		g.do(t, DELETE, "/locks/r", "", api.HeaderLeaseID, l.LeaseID)
		wantProblem(t, g.do(t, DELETE, "/locks/r", "", api.HeaderLeaseID, l.LeaseID), http.StatusNotFound, api.ProblemNotHeld)
	})

	t.Run("by another lease: 409, and the lock stays", func(t *testing.T) {
		g := defaultGateway(t)
		l := g.acquire(t, "r", leaseA, "")
		wantProblem(t, g.do(t, DELETE, "/locks/r", "", api.HeaderLeaseID, leaseB), http.StatusConflict, api.ProblemHeldByOther)
		if res := g.do(t, GET, "/locks/r", ""); res.Status != http.StatusOK || res.Header.Get(api.HeaderETag) != `"`+strconv.FormatInt(l.FencingToken, 10)+`"` {
			t.Errorf("GET after a refused release: %s", res)
		}
	})

	t.Run("with another token in If-Match: 412, and the lock stays", func(t *testing.T) {
		g := defaultGateway(t)
		l := g.acquire(t, "r", "", "")
		wantProblem(t, g.do(t, DELETE, "/locks/r", "", api.HeaderLeaseID, l.LeaseID, api.HeaderIfMatch, `"12345"`),
			http.StatusPreconditionFailed, api.ProblemTokenMismatch)
		if res := g.do(t, GET, "/locks/r", ""); res.Status != http.StatusOK {
			t.Errorf("GET after a refused release: %s", res)
		}
	})

	t.Run("without Lease-Id: 400 saying it is required", func(t *testing.T) {
		g := defaultGateway(t)
		p := wantProblem(t, g.do(t, DELETE, "/locks/r", ""), http.StatusBadRequest, api.ProblemInvalid)
		if p.Field != api.HeaderLeaseID || !strings.Contains(p.Detail, "required") {
			t.Errorf("field %q detail %q, want Lease-Id and required", p.Field, p.Detail)
		}
	})

	t.Run("with a malformed If-Match: 400", func(t *testing.T) {
		g := defaultGateway(t)
		p := wantProblem(t, g.do(t, DELETE, "/locks/r", "", api.HeaderLeaseID, leaseA, api.HeaderIfMatch, "42"), http.StatusBadRequest, api.ProblemInvalid)
		if p.Field != api.HeaderIfMatch {
			t.Errorf("field %q, want If-Match", p.Field)
		}
	})
}

func TestInspect(t *testing.T) {
	t.Parallel()

	t.Run("200 with the owner and token, never the lease id", func(t *testing.T) {
		g := defaultGateway(t)
		l := g.acquire(t, "r", leaseA, `{"ttl_ms":5000,"owner":"worker-7"}`)
		res := g.do(t, GET, "/locks/r", "")
		if res.Status != http.StatusOK {
			t.Fatalf("got %s, want 200", res)
		}
		if bytes.Contains(res.Body, []byte(leaseA)) {
			t.Errorf("the body shows the lease id: %s", res.Body)
		}
		for name, vals := range res.Header {
			if strings.Contains(strings.Join(vals, " "), leaseA) {
				t.Errorf("header %s shows the lease id", name)
			}
		}
		var info api.LockInfo
		if err := json.Unmarshal(res.Body, &info); err != nil {
			t.Fatal(err)
		}
		want := api.LockInfo{Resource: "r", FencingToken: l.FencingToken, Owner: "worker-7", TTLms: 5000}
		if info.Resource != want.Resource || info.FencingToken != want.FencingToken || info.Owner != want.Owner || info.TTLms != want.TTLms {
			t.Errorf("got %+v, want %+v", info, want)
		}
		if got := res.Header.Get(api.HeaderETag); got != `"`+strconv.FormatInt(l.FencingToken, 10)+`"` {
			t.Errorf("ETag %q for token %d", got, l.FencingToken)
		}
		if info.ExpiresAt.After(l.ExpiresAt.Add(5 * time.Second)) {
			t.Errorf("expires_at %v, far after the lease's %v", info.ExpiresAt, l.ExpiresAt)
		}
	})

	t.Run("nobody holds it: 404", func(t *testing.T) {
		g := defaultGateway(t)
		wantProblem(t, g.do(t, GET, "/locks/r", ""), http.StatusNotFound, api.ProblemNotHeld)
	})

	t.Run("expired: 404", func(t *testing.T) {
		g, clock := clockGateway(t)
		g.acquire(t, "r", "", `{"ttl_ms":100}`)
		clock.Advance(100 * time.Millisecond)
		wantProblem(t, g.do(t, GET, "/locks/r", ""), http.StatusNotFound, api.ProblemNotHeld)
	})

	t.Run("a bad resource name: 400", func(t *testing.T) {
		g := defaultGateway(t)
		p := wantProblem(t, g.do(t, GET, "/locks/a%2Bb", ""), http.StatusBadRequest, api.ProblemInvalid)
		if p.Field != "resource" {
			t.Errorf("field %q, want resource", p.Field)
		}
	})
}

func TestRoutesOutsideTheLocks(t *testing.T) {
	t.Parallel()
	g := defaultGateway(t)

	t.Run("GET /openapi.yaml serves the embedded contract", func(t *testing.T) {
		res := g.do(t, GET, "/openapi.yaml", "")
		if res.Status != http.StatusOK || !bytes.Equal(res.Body, lockgate.OpenAPI) {
			t.Errorf("got %d with %d bytes, want 200 with the %d bytes of openapi.yaml", res.Status, len(res.Body), len(lockgate.OpenAPI))
		}
		if mt, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type")); mt != "application/yaml" {
			t.Errorf("Content-Type %q", res.Header.Get("Content-Type"))
		}
	})

	for _, tc := range []struct {
		name, method, target string
		status               int
		typ                  string
	}{
		{"an unknown route is a 404 problem", GET, "/nope", http.StatusNotFound, api.ProblemNotFound},
		{"a path below a lock is a 400 problem naming the resource rule", GET, "/locks/a/b", http.StatusBadRequest, api.ProblemInvalid},
		{"the collection of locks is a 404 problem", GET, "/locks/", http.StatusNotFound, api.ProblemNotFound},
		{"POST on a lock is a 405 problem", POST, "/locks/x", http.StatusMethodNotAllowed, api.ProblemMethodNotAllowed},
		{"PUT on healthz is a 405 problem", PUT, "/healthz", http.StatusMethodNotAllowed, api.ProblemMethodNotAllowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantProblem(t, g.do(t, tc.method, tc.target, ""), tc.status, tc.typ)
		})
	}

	// RFC 9110: a 405 lists the methods the resource supports.
	for target, want := range map[string]string{"/locks/x": "GET, PUT, PATCH, DELETE", "/healthz": "GET"} {
		if res := g.do(t, POST, target, ""); res.Header.Get("Allow") != want {
			t.Errorf("POST %s: Allow %q, want %q", target, res.Header.Get("Allow"), want)
		}
	}
}

func TestAccessLogNeverShowsLeaseIDs(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer // the recorder serves synchronously
	log := zerolog.New(&logs)
	g := newGateway(t, memNodes(3, nil), nil, &handlers.Options{Logger: &log})

	const malformed = "almost-a-lease!id-0123"
	g.acquire(t, "audit:1", leaseA, `{"owner":"worker-7"}`)
	g.do(t, PUT, "/locks/audit:1", "", api.HeaderLeaseID, leaseB)
	g.do(t, PATCH, "/locks/audit:1", "", api.HeaderLeaseID, leaseA)
	g.do(t, PUT, "/locks/audit:2", "", api.HeaderLeaseID, malformed)
	if res := g.do(t, DELETE, "/locks/audit:1", "", api.HeaderLeaseID, leaseA); res.Status != http.StatusNoContent {
		t.Fatalf("release: %s", res)
	}

	for _, secret := range []string{leaseA, leaseB, malformed} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the log shows lease id %q:\n%s", secret, logs.String())
		}
	}
	var lines []map[string]any
	for line := range strings.Lines(logs.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %v: %s", err, line)
		}
		if m["message"] == "request" { // the access log; audit lines are tested apart
			lines = append(lines, m)
		}
	}
	want := []struct {
		method, path string
		status       float64
		outcome      string
	}{
		{PUT, "/locks/audit:1", 201, "acquired"},
		{PUT, "/locks/audit:1", 409, "taken"},
		{PATCH, "/locks/audit:1", 200, "extended"},
		{PUT, "/locks/audit:2", 400, "bad_request"},
		{DELETE, "/locks/audit:1", 204, "released"},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d log lines, want %d:\n%s", len(lines), len(want), logs.String())
	}
	for i, w := range want {
		m := lines[i]
		if m["method"] != w.method || m["path"] != w.path || m["status"] != w.status || m["outcome"] != w.outcome ||
			m["resource"] != strings.TrimPrefix(w.path, "/locks/") {
			t.Errorf("log line %d: %v, want method %s path %s status %v resource and outcome %s", i, m, w.method, w.path, w.status, w.outcome)
		}
	}
}

func TestHostileInputIsRefusedWithAProblem(t *testing.T) {
	t.Parallel()
	g := defaultGateway(t)
	l := g.acquire(t, "held", "", "")
	deep := strings.Repeat("[", 5000) + strings.Repeat("]", 5000)
	for _, tc := range []struct {
		name, method, target, body string
		hdr                        []string
	}{
		{"a Lease-Id of 1 MiB", PUT, "/locks/r", "", []string{api.HeaderLeaseID, strings.Repeat("a", 1<<20)}},
		{"an If-Match of 1 MiB", PATCH, "/locks/held", "", []string{api.HeaderLeaseID, l.LeaseID, api.HeaderIfMatch, `"` + strings.Repeat("9", 1<<20) + `"`}},
		{"an If-Match with a token beyond int64", DELETE, "/locks/held", "", []string{api.HeaderLeaseID, l.LeaseID, api.HeaderIfMatch, `"99999999999999999999"`}},
		{"a Lease-Id with non-ASCII characters", PUT, "/locks/r", "", []string{api.HeaderLeaseID, "lease-ñ-0123456789abcdef"}},
		{"an owner with invalid UTF-8", PUT, "/locks/r", "{\"owner\":\"ok\xff\xfe\"}", nil},
		{"an owner with an escaped replacement character", PUT, "/locks/r", `{"owner":"\ufffd"}`, nil},
		{"an owner with a NUL", PUT, "/locks/r", `{"owner":"a\u0000b"}`, nil},
		{"an owner with a C1 control character", PUT, "/locks/r", `{"owner":"a\u0085b"}`, nil},
		{"JSON nested 5000 deep", PUT, "/locks/r", `{"owner":` + deep + `}`, nil},
		{"JSON arrays nested 5000 deep as the body", PUT, "/locks/r", deep, nil},
		{"a null body", PUT, "/locks/r", `null`, nil},
		{"a null body on PATCH", PATCH, "/locks/held", `null`, []string{api.HeaderLeaseID, l.LeaseID}},
		{"an array body", PUT, "/locks/r", `[]`, nil},
		{"a string body", PUT, "/locks/r", `"ttl_ms"`, nil},
		{"two JSON objects", PUT, "/locks/r", `{} {}`, nil},
		{"a null ttl_ms", PUT, "/locks/r", `{"ttl_ms":null}`, nil},
		{"a null owner", PUT, "/locks/r", `{"owner":null}`, nil},
		{"ttl_ms of 1e309", PUT, "/locks/r", `{"ttl_ms":1e309}`, nil},
		{"ttl_ms of 30000.5", PUT, "/locks/r", `{"ttl_ms":30000.5}`, nil},
		{"ttl_ms beyond int64", PUT, "/locks/r", `{"ttl_ms":9223372036854775808}`, nil},
		{"wait_ms of -0.5", PUT, "/locks/r", `{"wait_ms":-0.5}`, nil},
		{"ttl_ms twice, the second a string", PUT, "/locks/r", `{"ttl_ms":1000,"ttl_ms":"x"}`, nil},
		{"a body that is only whitespace and a brace", PUT, "/locks/r", " \n{", nil},
		{"an unterminated string", PUT, "/locks/r", `{"owner":"abc`, nil},
		{"an encoded slash in the resource", GET, "/locks/a%2Fb", "", nil},
		{"an encoded NUL in the resource", GET, "/locks/a%00b", "", nil},
		{"a resource of 10000 characters", PUT, "/locks/" + strings.Repeat("r", 10000), "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := g.do(t, tc.method, tc.target, tc.body, tc.hdr...)
			if res.Status < 400 || res.Status > 499 {
				t.Fatalf("got %s, want a 4xx problem", res)
			}
		})
	}
	// None of it took a lock or disturbed the held one.
	wantProblem(t, g.do(t, GET, "/locks/r", ""), http.StatusNotFound, api.ProblemNotHeld)
	wantLease(t, g.do(t, PATCH, "/locks/held", "", api.HeaderLeaseID, l.LeaseID), http.StatusOK, "held")
}

// TestANoQuorumAnswerSaysWhenAQuorumIsBack: two of three nodes lost their
// data and cannot recover from the third alone, so they are quarantined
// for the largest TTL (1 h). A 503 says so in Retry-After, and /readyz
// gives each node's state, why, and until when.
func TestANoQuorumAnswerSaysWhenAQuorumIsBack(t *testing.T) {
	t.Parallel()
	a, b, c := memnode.New(nil), memnode.New(nil), memnode.New(nil)
	var logs testlog.Buffer
	lg := zerolog.New(&logs)
	g := newGateway(t, []lockcore.Node{a, b, c}, &lockcore.Options{CheckInterval: 10 * time.Millisecond}, &handlers.Options{Logger: &lg})
	if res := g.do(t, GET, "/readyz", ""); res.Status != http.StatusOK {
		t.Fatalf("readyz before the losses: %s", res)
	}
	b.LoseData()
	c.LoseData()
	var p api.Problem
	deadline := time.Now().Add(5 * time.Second)
	for {
		res := g.do(t, GET, "/readyz", "")
		p = api.Problem{}
		_ = json.Unmarshal([]byte(res.Body), &p)
		if len(p.Nodes) == 3 && p.Nodes[1].State == "quarantined" && p.Nodes[2].State == "quarantined" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("readyz never showed two quarantined nodes: %s", res)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if p.Nodes[0].State != "serving" || p.Nodes[1].Until == nil || time.Until(*p.Nodes[1].Until) < 50*time.Minute ||
		!strings.Contains(p.Nodes[1].Reason, "serves again after") {
		t.Fatalf("readyz's nodes: %+v", p.Nodes)
	}
	until := *p.Nodes[1].Until
	// A probe of /readyz is no operation that failed: the node states
	// are logged once, where they change, not once per probe.
	if n := strings.Count(logs.String(), "no quorum of lock nodes"); n != 0 {
		t.Errorf("%d warnings from probes of /readyz:\n%s", n, logs.String())
	}
	res := g.do(t, PUT, "/locks/r", `{"ttl_ms":1000}`)
	if n := strings.Count(logs.String(), "no quorum of lock nodes"); n != 1 {
		t.Errorf("%d warnings for one PUT without a quorum, want 1", n)
	}
	p = wantProblem(t, res, http.StatusServiceUnavailable, api.ProblemNoQuorum)
	if s, _ := strconv.Atoi(res.Header.Get(api.HeaderRetryAfter)); s < 3000 || s > 3700 {
		t.Fatalf("Retry-After %q with the quorum back in an hour", res.Header.Get(api.HeaderRetryAfter))
	}
	// The detail says which nodes are out, why and until when, and does
	// not call an hour's wait a passing failure.
	for _, want := range []string{"1 of the 2 lock nodes needed answered", "node 2 of 3, quarantined after a restart or a loss of data",
		"node 3 of 3, quarantined", "serves again after", "until about ", "retrying sooner fails the same way"} {
		if !strings.Contains(p.Detail, want) {
			t.Errorf("detail %q, want it to say %q", p.Detail, want)
		}
	}
	if strings.Contains(p.Detail, "try again") || strings.Contains(p.Detail, "node 1 ") {
		t.Errorf("detail %q: calls the quarantine transient, or names the serving node", p.Detail)
	}
	_, after, _ := strings.Cut(p.Detail, "until about ")
	if at, err := time.Parse(time.RFC3339, strings.TrimRight(strings.Fields(after + " ")[0], ";,.")); err != nil || at.Sub(until).Abs() > time.Minute {
		t.Errorf("detail %q: want node 2's end of quarantine, /readyz's %v", p.Detail, until)
	}
}
