package handlers_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/lockgate/lockgate/api"
	"github.com/lockgate/lockgate/handlers"
	"github.com/lockgate/lockgate/internal/goroutines"
	"github.com/lockgate/lockgate/lockcore"
)

// The fuzz targets send what a client may send through the real handler
// over in-memory nodes, and hold it to the rules for every answer: never a
// 5xx or a panic, every answer one that openapi.yaml documents (a 4xx a
// complete RFC 9457 problem), and no goroutine left behind. Run one with
//
//	go test -run='^$' -fuzz='^FuzzAcquire$' -fuzztime=30s ./handlers
//
// .ci/fuzz runs each for a few seconds.

// fuzzGateway is a gateway shared by one fuzz target's inputs; each input
// works on a resource of its own, so inputs do not wait on each other.
type fuzzGateway struct {
	*gateway
	n atomic.Int64
}

// defaultBodyLimit is handlers.Options.BodyLimit's default, which the fuzz
// gateway keeps.
const defaultBodyLimit = 16 << 10

func newFuzzGateway(f *testing.F) *fuzzGateway {
	f.Helper()
	rl, err := lockcore.New(memNodes(3, nil), nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(rl.Close)
	// The Redlock's first call starts its node guard (one goroutine for its
	// life): start it here, so that the goroutine counts below see only
	// what a request leaves behind.
	if err := rl.Ready(context.Background()); err != nil {
		f.Fatal(err)
	}
	// A lock held for the whole run keeps each node's sweeper (memnode
	// runs one while the node holds a lock) running from before the
	// counts on, so that they too see only what a request leaves.
	if _, err := rl.Acquire(context.Background(), lockcore.AcquireRequest{Resource: "fuzz-anchor", TTL: time.Hour}); err != nil {
		f.Fatal(err)
	}
	checkKeptParked(f)
	h, err := handlers.New(rl, nil)
	if err != nil {
		f.Fatal(err)
	}
	return &fuzzGateway{gateway: &gateway{handler: h, locker: rl}}
}

// resource returns a name no other input uses.
func (g *fuzzGateway) resource() string { return "fuzz-" + strconv.FormatInt(g.n.Add(1), 10) }

// serve sends req through the handler, checks the answer against the
// contract, and fails t on a 5xx or a goroutine that outlives the request.
func (g *fuzzGateway) serve(t *testing.T, req *http.Request) response {
	t.Helper()
	before := running()
	rec := httptest.NewRecorder()
	g.handler.ServeHTTP(rec, req)
	res := response{Status: rec.Code, Header: rec.Header(), Body: rec.Body.Bytes()}
	if res.Status >= 500 {
		t.Fatalf("%s %s answered %s", req.Method, req.URL, res)
	}
	// The contract judges the target the server read: req.URL.RequestURI()
	// can differ from it (a target whose raw path has a byte that must be
	// escaped, such as `"`, is re-escaped from the decoded path, and an
	// escaped slash in a name becomes a real one).
	target := req.RequestURI
	if target == "" {
		target = req.URL.RequestURI()
	}
	checkContract(t, req.Method, target, res)
	for deadline := time.Now().Add(2 * time.Second); running() > before; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s %s: %d goroutines after the request, %d before", req.Method, req.URL, running(), before)
		}
	}
	return res
}

// running counts the goroutines, less those that lockcore keeps parked
// between node calls (a goroutine whose top frame is callers.loop, waiting
// in its select), from one stack dump: a request may start one that
// outlives it by design. A kept goroutine still busy with a node call has
// other frames on top, and counts. (Under GOTRACEBACK=system the runtime's
// frames are on top of every parked one, and they would count too.)
func running() int {
	return goroutines.Except("[select", keptParked)
}

// keptParked is how a goroutine dump begins for a kept node-call goroutine
// (lockcore's quorum unit) parked between calls: it stays for the
// Redlock's life, and running leaves it out.
const keptParked = "]:\ngithub.com/lockgate/lockgate/lockcore/internal/quorum.(*callers).loop("

// checkKeptParked fails f when kept node-call goroutines exist but none is
// matched by keptParked (the function moved or was renamed): running would
// count them, and a request that happened to start one would look like a
// leak.
func checkKeptParked(f *testing.F) {
	f.Helper()
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(time.Millisecond) {
		kept := goroutines.Count("", "(*callers).loop(")
		if kept == 0 || goroutines.Count("[select", keptParked) == kept {
			return
		}
		if time.Now().After(deadline) {
			f.Fatalf("%d kept node-call goroutines, %d matched by keptParked: is its pattern stale?", kept, goroutines.Count("[select", keptParked))
		}
	}
}

// release frees what a successful acquire took, so memory stays flat over
// a long fuzzing run.
func (g *fuzzGateway) release(res response, resource string) {
	if res.Status == http.StatusCreated || res.Status == http.StatusOK {
		_ = g.locker.Release(context.Background(), lockcore.ReleaseRequest{Resource: resource, LeaseID: res.Header.Get(api.HeaderLeaseID)})
	}
}

// bodyRequest builds a request with body and headers that may hold
// anything; header values are set as the server would receive them after
// parsing (no CR, LF or NUL can reach a handler over HTTP/1.1).
func bodyRequest(method, target, body, contentType string, hdr ...string) *http.Request {
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", headerValue(contentType))
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] != "" {
			req.Header.Set(hdr[i], headerValue(hdr[i+1]))
		}
	}
	return req
}

func headerValue(v string) string {
	return strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' || r == 0 {
			return -1
		}
		return r
	}, v)
}

func FuzzAcquire(f *testing.F) {
	g := newFuzzGateway(f)
	for _, seed := range []struct{ body, contentType, lease string }{
		{"", "", ""},
		{`{}`, api.MediaJSON, ""},
		{`{"ttl_ms":5000,"wait_ms":0,"owner":"worker-7"}`, api.MediaJSON, leaseA},
		{`{"ttl_ms":0}`, api.MediaJSON, ""},
		{`{"ttl_ms":50}`, api.MediaJSON, ""},
		{`{"ttl_ms":86400001}`, api.MediaJSON, ""},
		{`{"wait_ms":-1}`, api.MediaJSON, ""},
		{`{"ttl_ms":1e309}`, api.MediaJSON, ""},
		{`{"ttl_ms":9223372036854775808}`, api.MediaJSON, ""},
		{`{"owner":"a\u0000b"}`, api.MediaJSON, ""},
		{"{\"owner\":\"ok\xff\xfe\"}", api.MediaJSON, ""},
		{`{} {}`, api.MediaJSON, ""},
		{`{}]`, api.MediaJSON, ""},
		{`null`, api.MediaJSON, ""},
		{`[]`, api.MediaJSON, ""},
		{`{"ttl":1000}`, api.MediaJSON, ""},
		{`{"ttl_ms":1000,"ttl_ms":"x"}`, api.MediaJSON, ""},
		{`{}`, "text/plain", ""},
		{`{}`, "application/json; charset=utf-8", ""},
		{"", "", "short"},
		{"", "", "lease-ñ-0123456789abcdef"},
		{`{"owner":` + strings.Repeat("[", 100) + `}`, api.MediaJSON, ""},
	} {
		f.Add(seed.body, seed.contentType, seed.lease)
	}
	f.Fuzz(func(t *testing.T, body, contentType, lease string) {
		resource := g.resource()
		res := g.serve(t, bodyRequest(PUT, "/locks/"+resource, body, contentType, api.HeaderLeaseID, lease))
		g.release(res, resource)
	})
}

func FuzzExtend(f *testing.F) {
	g := newFuzzGateway(f)
	for _, seed := range []struct{ body, contentType, ifMatch string }{
		{"", "", ""},
		{`{"ttl_ms":2000}`, api.MediaJSON, `"1"`},
		{`{"ttl_ms":0}`, api.MediaJSON, ""},
		{`{"ttl_ms":99999999999}`, api.MediaJSON, ""},
		{`{"wait_ms":10}`, api.MediaJSON, ""},
		{`{} x`, api.MediaJSON, ""},
		{"", "", `"99999999999999999999"`},
		{"", "", `W/"1"`},
		{"", "", `*`},
		{"", "", `"0"`},
	} {
		f.Add(seed.body, seed.contentType, seed.ifMatch, true)
		f.Add(seed.body, seed.contentType, seed.ifMatch, false)
	}
	f.Fuzz(func(t *testing.T, body, contentType, ifMatch string, ownLease bool) {
		resource := g.resource()
		l, err := g.locker.Acquire(context.Background(), lockcore.AcquireRequest{Resource: resource, TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = g.locker.Release(context.Background(), lockcore.ReleaseRequest{Resource: resource, LeaseID: l.ID})
		}()
		lease := leaseB
		if ownLease {
			lease = l.ID
		}
		g.serve(t, bodyRequest(PATCH, "/locks/"+resource, body, contentType, api.HeaderLeaseID, lease, api.HeaderIfMatch, ifMatch))
	})
}

func FuzzRelease(f *testing.F) {
	g := newFuzzGateway(f)
	for _, seed := range []struct{ lease, ifMatch, body string }{
		{"", "", ""},
		{leaseA, `"1"`, ""},
		{leaseB, "", ""},
		{"short", "", ""},
		{strings.Repeat("a", 129), "", ""},
		{leaseA, `"abc"`, "{}"},
		{leaseA, "", strings.Repeat("x", 20000)},
	} {
		f.Add(seed.lease, seed.ifMatch, seed.body)
	}
	f.Fuzz(func(t *testing.T, lease, ifMatch, body string) {
		resource := g.resource()
		if _, err := g.locker.Acquire(context.Background(), lockcore.AcquireRequest{Resource: resource, LeaseID: leaseA, TTL: 10 * time.Second}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = g.locker.Release(context.Background(), lockcore.ReleaseRequest{Resource: resource, LeaseID: leaseA})
		}()
		g.serve(t, bodyRequest(DELETE, "/locks/"+resource, body, "", api.HeaderLeaseID, lease, api.HeaderIfMatch, ifMatch))
	})
}

// FuzzResourcePath sends any request target an HTTP/1.1 server would
// accept. Besides the rules for every answer: a name lockcore finds valid is
// served (GET: 404, nothing holds it), any other name below /locks/ is 400
// naming the resource, and the metrics' operation never carries the name.
func FuzzResourcePath(f *testing.F) {
	g := newFuzzGateway(f)
	for _, seed := range []string{
		"/locks/a", "/locks/orders:42", "/locks/a/b", "/locks/a/", "/locks/", "/locks//a", "/locks/a%2Fb",
		"/locks/a%00b", "/locks/%C3%A9t%C3%A9", "/locks/bad!name", "/locks/a%20b", "/locks/" + strings.Repeat("r", 201),
		"/locks/..", "/locks/./a", "/locks/a?x=1", "/locks/%zz", "/nope", "/healthz", "/locks/a#frag", "*",
	} {
		f.Add(uint8(0), seed)
		f.Add(uint8(1), seed)
		f.Add(uint8(4), seed) // POST, which no path has
	}
	methods := []string{GET, PUT, PATCH, DELETE, POST, "HEAD", "OPTIONS"}
	f.Fuzz(func(t *testing.T, m uint8, target string) {
		method := methods[int(m)%len(methods)]
		// Only what net/http's server would parse reaches a handler.
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(method + " " + target + " HTTP/1.1\r\nHost: lockgate\r\n\r\n")))
		if err != nil || !strings.HasPrefix(req.URL.Path, "/") {
			t.Skip()
		}
		req.RemoteAddr = "192.0.2.1:1234"
		if method != GET && method != "HEAD" {
			req.Header.Set(api.HeaderLeaseID, leaseA)
		}
		res := g.serve(t, req)
		g.release(res, strings.TrimPrefix(req.URL.Path, "/locks/"))
		if op := handlers.Operation(method, req.URL.Path); strings.Contains(op, "/") || strings.Contains(op, ":") {
			t.Errorf("Operation(%s, %q) = %q carries the path", method, req.URL.Path, op)
		}
		name, below := strings.CutPrefix(req.URL.Path, "/locks/")
		if !below || name == "" || req.URL.RawPath != "" {
			return
		}
		switch {
		case lockcore.ValidResource(name) && method == GET && res.Status != http.StatusNotFound:
			t.Errorf("GET of the valid, free name %q: %s, want 404", name, res)
		case !lockcore.ValidResource(name) && method != "HEAD" && method != "OPTIONS" && method != POST:
			p := res.problem(t)
			if res.Status != http.StatusBadRequest || p.Field != "resource" {
				t.Errorf("%s of the invalid name %q: %s, want 400 naming the resource", method, name, res)
			}
		}
	})
}

// The contract's patterns and lockcore's checks, written independently: the
// fuzzer looks for a string on which they disagree.
var (
	contractResource = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,200}$`)
	contractLeaseID  = regexp.MustCompile(`^[A-Za-z0-9_-]{16,128}$`)
)

// FuzzValidators holds lockcore.ValidResource, ValidLeaseID and ValidOwner
// to the rules openapi.yaml and the README state, and checks that an owner
// the HTTP layer accepts is one lockcore accepts.
func FuzzValidators(f *testing.F) {
	g := newFuzzGateway(f)
	for _, seed := range []string{
		"", "a", "orders:42", "a/b", "é", "\x00", "\u0085", "\ufffd", "\xff", strings.Repeat("r", 200), strings.Repeat("r", 201),
		"lease-A-0123456789abcdef", strings.Repeat("s", 128), strings.Repeat("s", 129), "worker 7", "two\nlines", "tab\t",
		"\u200b", "\u00a0", "\u2028", strings.Repeat("é", 256), strings.Repeat("é", 257), "del\x7f",
		strings.Repeat("s", 15), strings.Repeat("s", 16), "a.b:c_d-e", "lease.with.dots-0123", "~", "0123456789abcdef\x80",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := lockcore.ValidResource(s), contractResource.MatchString(s); got != want {
			t.Errorf("ValidResource(%q) = %v, openapi.yaml's pattern says %v", s, got, want)
		}
		if got, want := lockcore.ValidLeaseID(s), contractLeaseID.MatchString(s); got != want {
			t.Errorf("ValidLeaseID(%q) = %v, openapi.yaml's pattern says %v", s, got, want)
		}
		runes, printable := 0, utf8.ValidString(s)
		for _, r := range s {
			runes++
			if unicode.IsControl(r) || r == utf8.RuneError {
				printable = false
			}
		}
		if got, want := lockcore.ValidOwner(s), printable && runes <= 256; got != want {
			t.Errorf("ValidOwner(%q) = %v, want %v (at most 256 characters, no control characters, valid UTF-8)", s, got, want)
		}

		// An owner the HTTP layer lets through is one lockcore accepts:
		// a 201 means both agreed, and a refusal is a 400 naming owner.
		body, err := jsonString(s)
		if err != nil {
			return
		}
		resource := g.resource()
		reqBody := `{"owner":` + body + `}`
		res := g.serve(t, bodyRequest(PUT, "/locks/"+resource, reqBody, api.MediaJSON))
		g.release(res, resource)
		switch res.Status {
		case http.StatusCreated:
			if !lockcore.ValidOwner(s) {
				t.Errorf("owner %q was accepted, but ValidOwner refuses it", s)
			}
		case http.StatusBadRequest:
			if p := res.problem(t); p.Field != "owner" {
				t.Errorf("owner %q: 400 naming %q, want owner", s, p.Field)
			}
		case http.StatusRequestEntityTooLarge:
			// The body bound comes first: an owner whose encoding
			// (U+FFFD escapes included) makes the body too large.
			if len(reqBody) <= defaultBodyLimit {
				t.Errorf("owner %q: 413 for a body of %d bytes, within the limit", s, len(reqBody))
			}
		default:
			t.Errorf("owner %q: %s, want 201, 400, or 413 for a body over %d bytes", s, res, defaultBodyLimit)
		}
	})
}

// jsonString encodes s as a JSON string as a client would (invalid UTF-8
// becomes U+FFFD, as encoding/json does).
func jsonString(s string) (string, error) {
	b, err := json.Marshal(s)
	return string(b), err
}
