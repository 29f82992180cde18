package auth

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const (
	oncall = "oncall-token-0123456789abcdef"
	reader = "reader-token-0123456789abcdef"
)

func TestForceAndListingNeedTheirOperations(t *testing.T) {
	p, err := Parse(strings.NewReader(admin + " * *\n" + oncall + " GET,force invoice- on-call\n" + reader + " PUT invoice-\n"))
	if err != nil {
		t.Fatal(err)
	}
	h := p.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	for _, tt := range []struct {
		name, method, target, token string
		status                      int
	}{
		{"* does not include force", "DELETE", "/locks/x?force=true", admin, 403},
		{"force=false is a plain release", "DELETE", "/locks/x?force=false", admin, 418},
		{"a malformed force value counts as force", "DELETE", "/locks/x?force=yes", admin, 403},
		{"force under the token's prefixes", "DELETE", "/locks/invoice-1?force=true", oncall, 418},
		{"force outside them", "DELETE", "/locks/billing-1?force=true", oncall, 403},
		{"force without a token", "DELETE", "/locks/invoice-1?force=true", "", 401},
		{"the force operation is not release", "DELETE", "/locks/invoice-1", oncall, 403},
		{"listing needs GET on some prefix", "GET", "/locks", oncall, 418},
		{"listing with * methods", "GET", "/locks?prefix=a", admin, 418},
		{"listing without GET", "GET", "/locks", reader, 403},
		{"listing without a token", "GET", "/locks", "", 401},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, tt.target, nil)
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.status {
				t.Errorf("%s %s: %d %s, want %d", tt.method, tt.target, rec.Code, rec.Body, tt.status)
			}
		})
	}
}

func TestNameAndGrants(t *testing.T) {
	p, err := Parse(strings.NewReader(oncall + " GET invoice-,billing: on-call\n\n" + reader + " GET *\n"))
	if err != nil {
		t.Fatal(err)
	}
	req := func(tok string) *http.Request {
		r := httptest.NewRequest("GET", "/locks", nil)
		if tok != "" {
			r.Header.Set("Authorization", "Bearer "+tok)
		}
		return r
	}
	for _, tt := range []struct{ token, name string }{{oncall, "on-call"}, {reader, "line-3"}, {unknown, ""}, {"", ""}} {
		if got := p.Name(req(tt.token)); got != tt.name {
			t.Errorf("Name = %q, want %q", got, tt.name)
		}
	}
	if pre, all := p.Grants(req(oncall)); all || !slices.Equal(pre, []string{"invoice-", "billing:"}) {
		t.Errorf("the on-call token's grants: %v, all %v", pre, all)
	}
	if _, all := p.Grants(req(reader)); !all {
		t.Error("the * token is not granted every resource")
	}
	for _, tok := range []string{unknown, ""} {
		if pre, all := p.Grants(req(tok)); all || len(pre) != 0 {
			t.Errorf("no known token is granted %v, all %v", pre, all)
		}
	}
	q, err := Parse(strings.NewReader(oncall + " PUT,DELETE invoice- writer\n"))
	if err != nil {
		t.Fatal(err)
	}
	if pre, all := q.Grants(req(oncall)); all || len(pre) != 0 {
		t.Errorf("a token without GET is granted %v, all %v", pre, all)
	}
}

func TestFileReloadKeepsTheOldTokensOnABadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(admin + " * *\n")
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	status := func(tok string) int {
		r := httptest.NewRequest("PUT", "/locks/x", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		rec := httptest.NewRecorder()
		f.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(418) })).ServeHTTP(rec, r)
		return rec.Code
	}
	if status(admin) != 418 || status(oncall) != 401 {
		t.Fatal("the first file is not in force")
	}
	write(oncall + " * * on-call\n")
	if _, err := f.Reload(); err != nil {
		t.Fatal(err)
	}
	if status(admin) != 401 || status(oncall) != 418 || f.Name(httptest.NewRequest("GET", "/", nil)) != "" {
		t.Fatal("the reloaded file is not in force")
	}
	write("broken " + admin + "\n")
	if _, err := f.Reload(); err == nil || strings.Contains(err.Error(), admin) {
		t.Fatalf("reloading a bad file: %v", err)
	}
	if status(oncall) != 418 || status(admin) != 401 {
		t.Fatal("a bad file changed the tokens in force")
	}
}

func TestOpenPrefixesAreThoseWithoutASeparator(t *testing.T) {
	p, err := Parse(strings.NewReader("# c\n" + oncall + " GET x,tenant1,a-,b:,c.,d_ one\n" + reader + " * * two\n" +
		admin + " PUT tenant2 three\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p.OpenPrefixes(), []string{"line 2: x", "line 2: tenant1", "line 4: tenant2"}; !slices.Equal(got, want) {
		t.Errorf("OpenPrefixes = %q, want %q", got, want)
	}
}
