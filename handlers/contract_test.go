package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	lockgate "github.com/lockgate/lockgate"
	"github.com/lockgate/lockgate/api"
)

// The contract middleware finds routes and validates requests with its own
// shortcuts (routeFinder, operation). These tests hold them to what
// kin-openapi's gorillamux router and openapi3filter.ValidateRequest answer
// for the same requests, over openapi.yaml.

func loadSpec(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(lockgate.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return doc
}

// routePaths are paths to route: the document's, near misses and
// escapes.
var routePaths = []string{
	"/", "", "/locks", "/locks/", "/locks/a", "/locks/a/", "/locks//", "/locks/a/b", "/locks/a%2Fb",
	"/locks/%7Bresource%7D", "/locks/{resource}", "/locks/a.b:c_d-e", "/locks/ñ", "/locks/a%00b", "/locks/a b",
	"/locks/" + strings.Repeat("r", 300), "//locks/a", "/locks//a", "/LOCKS/a", "/locks?x=1", "/locksx",
	"/healthz", "/healthz/", "/readyz", "/metrics", "/openapi.yaml", "/openapi.yamlx", "/openapi", "/nope",
	"/locks/healthz", "/healthz/x", "/locks/..", "/locks/.", "/locks/%2e%2e",
	"/locksets/a,b", "/locksets/a%2Cb", "/locksets/a,b/", "/locksets/,", "/locksets/", "/locksets",
}

var routeMethods = []string{
	http.MethodGet, http.MethodHead, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodPost,
	http.MethodOptions, http.MethodTrace, "QUERY", "get", "PROPFIND",
}

// randomPath builds a path from pieces that matter to routing.
func randomPath(rng *rand.Rand) string {
	pieces := []string{"/", "/", "/", "locks", "healthz", "readyz", "metrics", "openapi.yaml", "a", "%2F", "%25",
		"{", "}", ".", "..", "ñ", " ", "%20", "resource", ":", "_"}
	var b strings.Builder
	for range 1 + rng.IntN(6) {
		b.WriteString(pieces[rng.IntN(len(pieces))])
	}
	return b.String()
}

func TestRouteFinderAnswersAsGorillamux(t *testing.T) {
	doc := loadSpec(t)
	mux, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	f := newRouteFinder(doc, mux)
	if f.templates == nil {
		t.Fatal("openapi.yaml is routed by gorillamux itself: the comparison would compare it with itself")
	}
	paths := append([]string(nil), routePaths...)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		paths = append(paths, randomPath(rng))
	}
	compared := 0
	for _, path := range paths {
		for _, method := range routeMethods {
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			req.Method = method
			// Set the path as a client sends it, escapes and all.
			req.URL.Path, req.URL.RawPath = path, ""
			if p, err := urlPathUnescape(path); err == nil && p != path {
				req.URL.Path, req.URL.RawPath = p, path
			}
			wantRoute, wantVars, wantErr := mux.FindRoute(req)
			route, vars, err := f.FindRoute(req)
			compared++
			if !errors.Is(err, wantErr) || (err == nil) != (wantErr == nil) {
				t.Errorf("%s %q: error %v, gorillamux %v", method, path, err, wantErr)
				continue
			}
			if err != nil {
				continue
			}
			if *route != *wantRoute {
				t.Errorf("%s %q: route %+v, gorillamux %+v", method, path, *route, *wantRoute)
			}
			if !maps.Equal(vars, wantVars) {
				t.Errorf("%s %q: vars %v, gorillamux %v", method, path, vars, wantVars)
			}
		}
	}
	t.Logf("%d requests routed alike", compared)
}

// urlPathUnescape is url.PathUnescape without importing net/url twice in
// spirit: a request's Path is its RawPath unescaped.
func urlPathUnescape(s string) (string, error) {
	req, err := http.NewRequest(http.MethodGet, "http://h"+s, nil)
	if err != nil {
		return "", err
	}
	return req.URL.Path, nil
}

func TestNewTemplateTakesOnlyWhatItMatchesAsMuxDoes(t *testing.T) {
	tests := []struct {
		path string
		ok   bool
	}{
		{"/locks/{resource}", true},
		{"/locks", true},
		{"/", true},
		{"/a/{x}/b/{y}", true},
		{"/a/", true},
		{"/books/{id}.json", false},
		{"/a/{x:[0-9]+}", false},
		{"/a/{}", false},
		{"/a/{x", false},
		{"/a/x}", false},
		{"/a/{{x}}", false},
		{"a/{x}", false},
	}
	for _, tt := range tests {
		if got := newTemplate(tt.path) != nil; got != tt.ok {
			t.Errorf("newTemplate(%q) taken: %v, want %v", tt.path, got, tt.ok)
		}
	}
}

func TestRouteFinderLeavesOtherServersToGorillamux(t *testing.T) {
	for _, servers := range []openapi3.Servers{
		{{URL: "/v1"}},
		{{URL: "https://example.com/"}},
		{{URL: "/"}, {URL: "/v2"}},
	} {
		doc := loadSpec(t)
		doc.Servers = servers
		mux, err := gorillamux.NewRouter(doc)
		if err != nil {
			t.Fatal(err)
		}
		if f := newRouteFinder(doc, mux); f.templates != nil {
			t.Errorf("servers %v: matched by the route finder, not gorillamux", servers[0].URL)
		}
	}
}

// validationCase is a request to validate.
type validationCase struct {
	method, path, query, body string
	hdr                       map[string][]string
}

func (c validationCase) request(oldBody bool) *http.Request {
	req := httptest.NewRequest(c.method, "/", nil)
	req.URL.Path, req.URL.RawQuery = c.path, c.query
	req.Header = http.Header{}
	maps.Copy(req.Header, c.hdr)
	if c.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	// As the contract middleware hands the body on: before, always a
	// reader (empty for an empty body); now no body when empty.
	switch {
	case oldBody:
		req.Body = io.NopCloser(bytes.NewReader([]byte(c.body)))
	case c.body == "":
		req.Body = http.NoBody
	default:
		st := &reqState{}
		st.body.Reset([]byte(c.body))
		req.Body, req.GetBody = &st.body, st.reread
	}
	return req
}

func TestValidationAnswersAsValidateRequest(t *testing.T) {
	c, err := newContract(lockgate.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	const lease = "lease-A-0123456789abcdef"
	paths := []string{"/locks/a", "/locks/bad!", "/locks/%20", "/locks/" + strings.Repeat("r", 201), "/locks", "/healthz", "/readyz", "/openapi.yaml", "/metrics"}
	leaseIDs := []map[string][]string{nil, {"Lease-Id": {lease}}, {"Lease-Id": {"short"}}, {"Lease-Id": {""}}, {"Lease-Id": {}}, {"Lease-Id": {lease, "x"}}}
	ifMatches := []map[string][]string{nil, {"If-Match": {`"42"`}}, {"If-Match": {"42"}}, {"If-Match": {}}}
	queries := []string{"", "force=true", "force=maybe", "force=", "force", "limit=0", "limit=5&prefix=a", "prefix=!", "cursor=" + strings.Repeat("c", 3000), "other=1", "%zz"}
	bodies := []string{"", `{"ttl_ms":1000}`, `{"ttl_ms":"x"}`, `{"ttl_ms":0}`, `{"zzz":1}`, `null`, `[`, `{"owner":"a","wait_ms":10}`, `{"wait_ms":-1}`}
	methods := []string{http.MethodGet, http.MethodPut, http.MethodPatch, http.MethodDelete}
	// The route finder's routes are shared by all requests: validation
	// must leave them as they were.
	f := c.router.(*routeFinder)
	before := map[*routers.Route]routers.Route{}
	for _, tp := range f.templates {
		for _, r := range tp.routes {
			before[r] = *r
		}
	}
	defer func() {
		for r, was := range before {
			if *r != was {
				t.Errorf("validation changed the shared route %s %s", was.Method, was.Path)
			}
		}
	}()
	checked, failed := 0, 0
	for _, method := range methods {
		for _, path := range paths {
			for _, l := range leaseIDs {
				for _, im := range ifMatches {
					for _, q := range queries {
						for _, body := range bodies {
							hdr := map[string][]string{}
							maps.Copy(hdr, l)
							maps.Copy(hdr, im)
							vc := validationCase{method, path, q, body, hdr}
							ref := vc.request(true)
							route, params, err := c.router.FindRoute(ref)
							if err != nil {
								continue
							}
							want := openapi3filter.ValidateRequest(context.Background(), &openapi3filter.RequestValidationInput{
								Request: ref, PathParams: params, Route: route, Options: validationOptions,
							})
							req := vc.request(false)
							route, params, err = c.router.FindRoute(req)
							if err != nil {
								t.Fatalf("%+v: %v", vc, err)
							}
							got := c.validate(req, route, params, []byte(vc.body))
							checked++
							if (got == nil) != (want == nil) || (got != nil && got.Error() != want.Error()) {
								failed++
								if failed < 20 {
									t.Errorf("%s %s?%s %v %q:\n got  %v\n want %v", method, path, q, hdr, body, got, want)
								}
								continue
							}
							if got != nil {
								gf, gr := describe(got, nil)
								wf, wr := describe(want, nil)
								if gf != wf || gr != wr {
									t.Errorf("%s %s?%s %v %q: described as %s: %s, want %s: %s", method, path, q, hdr, body, gf, gr, wf, wr)
								}
							}
						}
					}
				}
			}
		}
	}
	if checked < 10000 {
		t.Fatalf("only %d requests compared", checked)
	}
	t.Logf("%d requests validated alike", checked)
}

func TestAlwaysMet(t *testing.T) {
	doc := loadSpec(t)
	tests := []struct {
		name string
		reqs openapi3.SecurityRequirements
		want bool
	}{
		{"none", nil, true},
		{"anonymous or bearer", openapi3.SecurityRequirements{{}, {"bearerAuth": {}}}, true},
		{"bearer", openapi3.SecurityRequirements{{"bearerAuth": {}}}, true},
		{"an undeclared scheme", openapi3.SecurityRequirements{{"nope": {}}}, false},
		{"an undeclared scheme or bearer", openapi3.SecurityRequirements{{"nope": {}}, {"bearerAuth": {}}}, true},
	}
	for _, tt := range tests {
		if got := alwaysMet(doc, tt.reqs); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
		// What alwaysMet claims, openapi3filter does.
		if tt.want {
			mux, err := gorillamux.NewRouter(doc)
			if err != nil {
				t.Fatal(err)
			}
			req := httptest.NewRequest(http.MethodGet, "/locks/a", strings.NewReader("{}"))
			route, params, err := mux.FindRoute(req)
			if err != nil {
				t.Fatal(err)
			}
			in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: validationOptions}
			if err := openapi3filter.ValidateSecurityRequirements(context.Background(), in, tt.reqs); err != nil {
				t.Errorf("%s: openapi3filter refuses: %v", tt.name, err)
			}
		}
	}
}

// TestPassedBodiesAreRememberedPerOperation checks the body check's memory
// (passed): a body is remembered only for the operation it passed, only if
// it passed, only when sent as exactly application/json and short enough,
// and never more than maxPassed bodies at once.
func TestPassedBodiesAreRememberedPerOperation(t *testing.T) {
	c, err := newContract(lockgate.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	const lease = "lease-A-0123456789abcdef"
	check := func(method, body, ct string) (*passed, error) {
		t.Helper()
		vc := validationCase{method: method, path: "/locks/a", body: body, hdr: map[string][]string{}}
		if method == http.MethodPatch {
			vc.hdr["Lease-Id"] = []string{lease}
		}
		req := vc.request(false)
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		route, params, err := c.router.FindRoute(req)
		if err != nil {
			t.Fatal(err)
		}
		return &c.ops[route.Operation].passed, c.validate(req, route, params, []byte(body))
	}
	put, patch := http.MethodPut, http.MethodPatch

	// wait_ms is an acquire's field, not an extend's.
	const waits = `{"wait_ms":5}`
	if p, err := check(put, waits, ""); err != nil || p.len() != 1 {
		t.Fatalf("PUT %s: %v, %d remembered; want it passed and remembered", waits, err, p.len())
	}
	if p, err := check(patch, waits, ""); err == nil || p.len() != 0 {
		t.Fatalf("PATCH %s: %v, %d remembered; want it refused (another operation's body)", waits, err, p.len())
	}
	// A body that failed fails again, and is not remembered.
	for range 2 {
		if p, err := check(put, `{"ttl_ms":0}`, ""); err == nil || p.len() != 1 {
			t.Fatalf(`PUT {"ttl_ms":0}: %v, %d remembered; want it refused, nothing more remembered`, err, p.len())
		}
	}
	// Only exactly application/json, and only short bodies.
	if p, err := check(put, `{"ttl_ms":1000}`, "application/json; charset=utf-8"); err != nil || p.len() != 1 {
		t.Fatalf("with charset: %v, %d remembered; want it passed, not remembered", err, p.len())
	}
	long := `{"owner":"` + strings.Repeat("o", maxPassedLen) + `"}`
	if p, err := check(put, long, ""); err != nil || p.len() != 1 {
		t.Fatalf("a %d-byte body: %v, %d remembered; want it passed, not remembered", len(long), err, p.len())
	}
	// Bounded.
	most := 0
	for i := range 2*maxPassed + 10 {
		p, err := check(put, `{"ttl_ms":`+strconv.Itoa(1000+i)+`}`, "")
		if err != nil {
			t.Fatal(err)
		}
		most = max(most, p.len())
	}
	if most != maxPassed {
		t.Fatalf("at most %d bodies remembered, want %d", most, maxPassed)
	}
	// A remembered body still passes, and its operation's other checks
	// still run: a PATCH without its Lease-Id is refused.
	if _, err := check(patch, `{"ttl_ms":1000}`, ""); err != nil {
		t.Fatal(err)
	}
	vc := validationCase{method: patch, path: "/locks/a", body: `{"ttl_ms":1000}`}
	req := vc.request(false)
	route, params, _ := c.router.FindRoute(req)
	if err := c.validate(req, route, params, []byte(vc.body)); err == nil {
		t.Fatal("a PATCH without Lease-Id passed once its body was remembered")
	}
}

// TestPassedResourceNames checks the memory of a path parameter's values:
// only values that passed, bounded.
func TestPassedResourceNames(t *testing.T) {
	c, err := newContract(lockgate.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	check := func(path string) (*passed, error) {
		t.Helper()
		req := validationCase{method: http.MethodGet, path: path}.request(false)
		route, params, err := c.router.FindRoute(req)
		if err != nil {
			t.Fatal(err)
		}
		var p *passed
		for _, prm := range c.ops[route.Operation].params {
			if prm.p.Name == "resource" {
				p = prm.passed
			}
		}
		if p == nil {
			t.Fatal("the resource parameter has no memory")
		}
		return p, c.validate(req, route, params, nil)
	}
	if p, err := check("/locks/a"); err != nil || p.len() != 1 {
		t.Fatalf("/locks/a: %v, %d remembered; want it passed and remembered", err, p.len())
	}
	for range 2 {
		if p, err := check("/locks/bad!"); err == nil || p.len() != 1 {
			t.Fatalf("/locks/bad!: %v, %d remembered; want it refused, nothing more remembered", err, p.len())
		}
	}
	// The longest name the contract allows fits (an escaped one does not
	// pass: openapi3filter checks the value as the path has it).
	if p, err := check("/locks/" + strings.Repeat("n", 200)); err != nil || p.len() != 2 {
		t.Fatalf("a 200-byte name: %v, %d remembered; want it passed and remembered", err, p.len())
	}
	most := 0
	for i := range 2*maxPassed + 10 {
		p, err := check("/locks/r-" + strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		most = max(most, p.len())
	}
	if most != maxPassed {
		t.Fatalf("at most %d names remembered, want %d", most, maxPassed)
	}
}

// defaultsSpec has a request body whose schema fills in a default, which
// openapi3filter writes back into the request's body.
const defaultsSpec = `openapi: 3.0.3
info: { title: t, version: "1" }
servers: [{ url: / }]
paths:
  /x:
    put:
      requestBody:
        content:
          application/json:
            schema:
              type: object
              properties:
                a: { type: integer, default: 5 }
      responses:
        "204": { description: ok }
`

// The handler reads the bytes the client sent, not openapi3filter's
// rewriting of them with the schema's defaults filled in.
func TestTheHandlerReadsTheBodySent(t *testing.T) {
	c, err := newContract([]byte(defaultsSpec))
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{`{}`, `{"a":7}`, `{ "a" : 1e0 }`} {
		var got string
		h := c.enforce(1024)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				t.Errorf("reading the body: %v", err)
			}
			got = string(b)
			w.WriteHeader(http.StatusNoContent)
		}))
		req := httptest.NewRequest(http.MethodPut, "/x", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusNoContent || got != body {
			t.Errorf("PUT %s: %d, the handler read %q; want 204 and the body sent", body, rec.Code, got)
		}
	}
}

// The contract checks every rule openapi.yaml states of a body's fields,
// and it alone: the validate tags of package api do not repeat them (see
// contract). Each body breaking one is refused before the handler, naming
// the field; each at the edge of the rule reaches the handler.
func TestTheContractChecksTheBodyFields(t *testing.T) {
	c, err := newContract(lockgate.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	const lock, sem = "/locks/r", "/semaphores/s/permits"
	long := func(n int) string { return strings.Repeat("é", n) }
	for _, tc := range []struct {
		method, path, body string
		field              string // "": the handler is reached
	}{
		{http.MethodPut, lock, `{"ttl_ms":0}`, "ttl_ms"},
		{http.MethodPut, lock, `{"ttl_ms":86400001}`, "ttl_ms"},
		{http.MethodPut, lock, `{"ttl_ms":1,"wait_ms":0,"owner":"` + long(256) + `"}`, ""},
		{http.MethodPut, lock, `{"ttl_ms":86400000,"wait_ms":300000}`, ""},
		{http.MethodPut, lock, `{"wait_ms":-1}`, "wait_ms"},
		{http.MethodPut, lock, `{"wait_ms":300001}`, "wait_ms"},
		{http.MethodPut, lock, `{"owner":"` + long(257) + `"}`, "owner"},
		{http.MethodPut, lock, `{"ttl_ms":"1"}`, "ttl_ms"},
		{http.MethodPut, lock, `{"ttl":1}`, "ttl"},
		{http.MethodPatch, lock, `{"ttl_ms":86400000}`, ""},
		{http.MethodPatch, lock, `{"ttl_ms":0}`, "ttl_ms"},
		{http.MethodPatch, lock, `{"ttl_ms":86400001}`, "ttl_ms"},
		{http.MethodPatch, lock, `{"wait_ms":1}`, "wait_ms"},
		{http.MethodPut, sem, `{"permits":1,"ttl_ms":1,"wait_ms":300000,"owner":"` + long(240) + `"}`, ""},
		{http.MethodPut, sem, `{"permits":64,"ttl_ms":86400000}`, ""},
		{http.MethodPut, sem, `{"permits":0}`, "permits"},
		{http.MethodPut, sem, `{"permits":65}`, "permits"},
		{http.MethodPut, sem, `{"ttl_ms":1}`, "permits"},
		{http.MethodPut, sem, `{"permits":1,"ttl_ms":0}`, "ttl_ms"},
		{http.MethodPut, sem, `{"permits":1,"ttl_ms":86400001}`, "ttl_ms"},
		{http.MethodPut, sem, `{"permits":1,"wait_ms":-1}`, "wait_ms"},
		{http.MethodPut, sem, `{"permits":1,"wait_ms":300001}`, "wait_ms"},
		{http.MethodPut, sem, `{"permits":1,"owner":"` + long(241) + `"}`, "owner"},
		{http.MethodPut, sem, `{"permits":1,"k":1}`, "k"},
	} {
		reached := false
		h := c.enforce(1 << 20)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			reached = true
			w.WriteHeader(http.StatusNoContent)
		}))
		req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
		req.Header.Set("Content-Type", api.MediaJSON)
		req.Header.Set(api.HeaderLeaseID, "lease-A-0123456789abcdef")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		name := tc.method + " " + tc.path + " " + tc.body
		if len(name) > 80 {
			name = name[:80] + "…"
		}
		if tc.field == "" {
			if !reached {
				t.Errorf("%s: refused (%d %s), want it passed on", name, rec.Code, rec.Body)
			}
			continue
		}
		var p api.Problem
		_ = json.Unmarshal(rec.Body.Bytes(), &p)
		if reached || rec.Code != http.StatusBadRequest || p.Field != tc.field {
			t.Errorf("%s: handler reached %v, %d naming %q; want 400 naming %s", name, reached, rec.Code, p.Field, tc.field)
		}
	}
}
