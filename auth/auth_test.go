package auth

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockgate/lockgate/api"
)

const (
	billing   = "billing-7Q2vX9kLmN4pR8sT1uW3yZ5a"
	dashboard = "dashboard-Hc6Jd8Kf0Lg2Mh4Nj6Pk8Q"
	admin     = "admin-token-0123456789abcdef"
	unknown   = "unknown-token-0123456789abcdef"
)

const file = `# lockgate tokens
` + billing + `	PUT,PATCH,DELETE,GET  invoice-,billing:
  ` + dashboard + ` inspect *

` + admin + ` * *
`

func policy(t *testing.T) *Policy {
	t.Helper()
	p, err := Parse(strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMiddlewareAllowsAndDenies(t *testing.T) {
	p := policy(t)
	h := p.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot) // reached the routes
	}))
	tests := []struct {
		name          string
		method, path  string
		authorization []string
		status        int
		challenge     string
	}{
		{"a token acquires a resource under its prefix", "PUT", "/locks/invoice-42", []string{"Bearer " + billing}, 418, ""},
		{"a trailing slash names the same resource", "DELETE", "/locks/billing:x/", []string{"Bearer " + billing}, 418, ""},
		{"the scheme is case-insensitive", "PATCH", "/locks/invoice-1", []string{"bearer " + billing}, 418, ""},
		{"an operation name allows its method", "GET", "/locks/anything", []string{"Bearer " + dashboard}, 418, ""},
		{"* allows every method on every resource", "DELETE", "/locks/x", []string{"Bearer " + admin}, 418, ""},
		{"no header is 401", "PUT", "/locks/invoice-42", nil, 401, `Bearer realm="lockgate"`},
		{"another scheme is 401", "PUT", "/locks/invoice-42", []string{"Basic " + billing}, 401, `Bearer realm="lockgate"`},
		{"an empty token is 401", "PUT", "/locks/invoice-42", []string{"Bearer "}, 401, `Bearer realm="lockgate"`},
		{"two Authorization headers are 401", "PUT", "/locks/invoice-42", []string{"Bearer " + billing, "Bearer " + admin}, 401, `Bearer realm="lockgate"`},
		{"an unknown token is 401", "PUT", "/locks/invoice-42", []string{"Bearer " + unknown}, 401, `Bearer realm="lockgate", error="invalid_token"`},
		{"a token's prefix is 401 (no partial match)", "PUT", "/locks/invoice-42", []string{"Bearer " + billing[:20]}, 401, `Bearer realm="lockgate", error="invalid_token"`},
		{"a resource outside the prefixes is 403", "PUT", "/locks/payroll-1", []string{"Bearer " + billing}, 403, `Bearer realm="lockgate", error="insufficient_scope"`},
		{"a prefix is not a substring match", "PUT", "/locks/x-invoice-1", []string{"Bearer " + billing}, 403, `Bearer realm="lockgate", error="insufficient_scope"`},
		{"a method the token lacks is 403", "PUT", "/locks/invoice-42", []string{"Bearer " + dashboard}, 403, `Bearer realm="lockgate", error="insufficient_scope"`},
		{"a method no token has is 403", "POST", "/locks/invoice-42", []string{"Bearer " + admin}, 403, `Bearer realm="lockgate", error="insufficient_scope"`},
		{"a semaphore is guarded", "PUT", "/semaphores/invoice-pool/permits", nil, 401, `Bearer realm="lockgate"`},
		{"a semaphore's name is its resource", "PUT", "/semaphores/invoice-pool/permits", []string{"Bearer " + billing}, 418, ""},
		{"a permit's path names its semaphore", "DELETE", "/semaphores/payroll/permits/1", []string{"Bearer " + billing}, 403, `Bearer realm="lockgate", error="insufficient_scope"`},
		{"a semaphore outside the prefixes is 403", "GET", "/semaphores/payroll", []string{"Bearer " + billing}, 403, `Bearer realm="lockgate", error="insufficient_scope"`},
		{"a lock set is guarded", "PUT", "/locksets/invoice-1,invoice-2", nil, 401, `Bearer realm="lockgate"`},
		{"a lock set within the prefixes is allowed", "PUT", "/locksets/invoice-1,billing:x", []string{"Bearer " + billing}, 418, ""},
		{"a lock set with one member outside the prefixes is 403", "PUT", "/locksets/invoice-1,payroll-1", []string{"Bearer " + billing}, 403, `Bearer realm="lockgate", error="insufficient_scope"`},
		{"every member is checked, the first too", "DELETE", "/locksets/payroll-1,invoice-1", []string{"Bearer " + billing}, 403, `Bearer realm="lockgate", error="insufficient_scope"`},
		{"an empty member matches no prefix", "PUT", "/locksets/invoice-1,", []string{"Bearer " + billing}, 403, `Bearer realm="lockgate", error="insufficient_scope"`},
		{"/locks itself is guarded", "GET", "/locks", nil, 401, `Bearer realm="lockgate"`},
		{"/healthz is open", "GET", "/healthz", nil, 418, ""},
		{"/readyz is open", "GET", "/readyz", nil, 418, ""},
		{"/metrics is open", "GET", "/metrics", nil, 418, ""},
		{"/openapi.yaml is open", "GET", "/openapi.yaml", nil, 418, ""},
		{"a path that only starts like /locks is not guarded", "GET", "/locksmith", nil, 418, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, tt.path, nil)
			for _, a := range tt.authorization {
				req.Header.Add("Authorization", a)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tt.status, rec.Body)
			}
			if got := rec.Header().Get("WWW-Authenticate"); got != tt.challenge {
				t.Errorf("WWW-Authenticate %q, want %q", got, tt.challenge)
			}
			if tt.status != 401 && tt.status != 403 {
				return
			}
			body := rec.Body.String()
			for _, tok := range []string{billing, dashboard, admin, unknown, billing[:20]} {
				if strings.Contains(body, tok) {
					t.Errorf("the problem body shows a token: %s", body)
				}
			}
			if ct := rec.Header().Get("Content-Type"); ct != api.MediaProblem {
				t.Errorf("Content-Type %q", ct)
			}
			var p api.Problem
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
				t.Fatal(err)
			}
			want := api.ProblemUnauthorized
			if tt.status == 403 {
				want = api.ProblemForbidden
			}
			if p.Type != want || p.Status != tt.status || p.Instance != tt.path {
				t.Errorf("problem %+v, want type %s status %d instance %s", p, want, tt.status, tt.path)
			}
		})
	}
}

func TestParseErrorsNameTheLineNeverTheToken(t *testing.T) {
	secret := "line-secret-0123456789abcdef"
	tests := []struct {
		name, file string
		line       int
		reason     string
	}{
		{"two fields", "# c\n" + secret + " GET\n", 2, "want 3 or 4 fields"},
		{"five fields", secret + " GET * name extra\n", 1, "want 3 or 4 fields"},
		{"a name with a slash", secret + " GET * a/b\n", 1, "the name must be"},
		{"a short token", "short GET *\n", 1, "16 to 4096"},
		{"a token with a bad character", "bad\"token-0123456789abcdef GET *\n", 1, "16 to 4096"},
		{"an unknown method", secret + " GET,POST *\n", 1, `method "POST"`},
		{"an empty method", secret + " GET,,PUT *\n", 1, `method ""`},
		{"a prefix with a slash", secret + " GET a/b\n", 1, `resource prefix "a/b"`},
		{"an empty prefix", secret + " GET a,\n", 1, `resource prefix ""`},
		{"a token twice", secret + " GET *\n\n" + secret + " PUT *\n", 3, "the token of line 1 again"},
		{"a name twice", secret + " GET a- tenant\n" + admin + " GET b- tenant\n", 2, `the name "tenant" of line 1 again`},
		{"a default name given", secret + " GET a-\n" + admin + " GET b- line-1\n", 2, `the name "line-1" of line 1 again`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tt.file))
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("err %v, want a *ParseError", err)
			}
			if pe.Line != tt.line || !strings.Contains(pe.Reason, tt.reason) {
				t.Errorf("%v, want line %d and %q", err, tt.line, tt.reason)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the error shows the token: %v", err)
			}
		})
	}
}

func TestParseRefusesAFileWithoutTokens(t *testing.T) {
	for _, f := range []string{"", "# only a comment\n\n   \n"} {
		if _, err := Parse(strings.NewReader(f)); !errors.Is(err, ErrNoTokens) {
			t.Errorf("Parse(%q) = %v, want ErrNoTokens", f, err)
		}
	}
}

func TestLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if p.Len() != 3 {
		t.Errorf("Len %d, want 3", p.Len())
	}
	if _, err := Load(filepath.Join(t.TempDir(), "absent")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// The lookup compares against every entry: a token that matches the first
// entry and one that matches the last take the same path through the loop.
func TestLookupFindsEveryEntry(t *testing.T) {
	p := policy(t)
	for i, tok := range []string{billing, dashboard, admin} {
		if e := p.lookup(tok); e != &p.entries[i] {
			t.Errorf("lookup(token %d) = %p, want entry %d", i, e, i)
		}
	}
	if e := p.lookup(unknown); e != nil {
		t.Errorf("lookup(unknown) = %p", e)
	}
}

func TestNeverLogsAnything(t *testing.T) {
	// The package has no logger: this guards against one being added that
	// writes to the process's standard streams.
	r, w, _ := os.Pipe()
	stderr, stdout := os.Stderr, os.Stdout
	os.Stderr, os.Stdout = w, w
	p := policy(t)
	h := p.Middleware(http.NotFoundHandler())
	for _, a := range []string{"Bearer " + billing, "Bearer " + unknown, ""} {
		req := httptest.NewRequest("PUT", "/locks/payroll", nil)
		req.Header.Set("Authorization", a)
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	os.Stderr, os.Stdout = stderr, stdout
	w.Close()
	out, _ := io.ReadAll(r)
	if len(out) > 0 {
		t.Errorf("the middleware wrote to stdout/stderr: %q", out)
	}
}
