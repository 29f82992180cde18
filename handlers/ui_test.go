package handlers_test

import (
	"io/fs"
	"net/http"
	"strings"
	"testing"

	"github.com/lockgate/lockgate/handlers"
	"github.com/lockgate/lockgate/ui"
)

// The page's files are served at /ui/ as the contract says, with a strict
// Content-Security-Policy; anything else below /ui/ is the 404 problem.
func TestUIServesThePage(t *testing.T) {
	g := newGateway(t, memNodes(1, nil), nil, &handlers.Options{UI: ui.Files()})

	if res := g.do(t, http.MethodGet, "/ui", ""); res.Status != http.StatusMovedPermanently || res.Header.Get("Location") != "/ui/" {
		t.Errorf("GET /ui: %s, want 301 to /ui/", res)
	}
	for _, tc := range []struct{ target, ctype, has string }{
		{"/ui/", "text/html; charset=utf-8", `<script src="app.js" defer></script>`},
		{"/ui/index.html", "text/html; charset=utf-8", `<link rel="stylesheet" href="app.css">`},
		{"/ui/app.js", "text/javascript; charset=utf-8", `fetch("../locks?"`},
		{"/ui/app.css", "text/css; charset=utf-8", "table {"},
	} {
		res := g.do(t, http.MethodGet, tc.target, "")
		if res.Status != http.StatusOK || res.Header.Get("Content-Type") != tc.ctype {
			t.Errorf("GET %s: %d %q, want 200 %q", tc.target, res.Status, res.Header.Get("Content-Type"), tc.ctype)
			continue
		}
		if !strings.Contains(string(res.Body), tc.has) {
			t.Errorf("GET %s: no %q in the answer", tc.target, tc.has)
		}
		csp := res.Header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("GET %s: Content-Security-Policy %q lacks %q", tc.target, csp, want)
			}
		}
		if res.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: no X-Content-Type-Options: nosniff", tc.target)
		}
		// Range and conditional requests get the whole file: the contract
		// lists neither 206 nor 304.
		again := g.do(t, http.MethodGet, tc.target, "", "Range", "bytes=0-9", "If-Modified-Since", "Mon, 02 Jan 2006 15:04:05 GMT")
		if again.Status != http.StatusOK || len(again.Body) != len(res.Body) {
			t.Errorf("GET %s with Range and If-Modified-Since: %d, %d bytes; want 200 and all %d", tc.target, again.Status, len(again.Body), len(res.Body))
		}
	}
	for _, tc := range []struct {
		target string
		status int
	}{{"/ui", http.StatusMovedPermanently}, {"/ui/", http.StatusOK}, {"/ui/app.js", http.StatusOK}, {"/ui/nope.js", http.StatusNotFound}} {
		if res := g.do(t, http.MethodHead, tc.target, ""); res.Status != tc.status {
			t.Errorf("HEAD %s: %d, want %d", tc.target, res.Status, tc.status)
		}
	}
	for _, target := range []string{"/ui/nope.js", "/ui/app.go", "/ui/static/app.js", "/ui/..%2fopenapi.yaml", "/ui/.js", "/ui//app.js"} {
		res := g.do(t, http.MethodGet, target, "")
		wantProblem(t, res, http.StatusNotFound, "urn:lockgate:problem:not-found")
	}
	res := g.do(t, http.MethodPost, "/ui/", `{}`)
	wantProblem(t, res, http.StatusMethodNotAllowed, "urn:lockgate:problem:method-not-allowed")
	if res.Header.Get("Allow") != "GET" {
		t.Errorf("POST /ui/: Allow %q, want GET", res.Header.Get("Allow"))
	}
}

// Without Options.UI there is no page.
func TestUIOff(t *testing.T) {
	g := newGateway(t, memNodes(1, nil), nil, nil)
	for _, target := range []string{"/ui", "/ui/", "/ui/app.js"} {
		wantProblem(t, g.do(t, http.MethodGet, target, ""), http.StatusNotFound, "urn:lockgate:problem:not-found")
		if res := g.do(t, http.MethodHead, target, ""); res.Status != http.StatusNotFound {
			t.Errorf("HEAD %s without the page: %d, want 404", target, res.Status)
		}
	}
}

// The page only reads: its script sends no request with a method of its
// own (fetch without a method is a GET), and it puts what the gateway
// says into the page as text, never as HTML.
func TestUIScriptOnlyReads(t *testing.T) {
	js, err := fs.ReadFile(ui.Files(), "app.js")
	if err != nil {
		t.Fatal(err)
	}
	for _, banned := range []string{"method:", "innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("} {
		if strings.Contains(string(js), banned) {
			t.Errorf("app.js contains %q", banned)
		}
	}
}
