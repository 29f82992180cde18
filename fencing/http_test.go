package fencing_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/lockgate/lockgate/fencing"
)

type problemBody struct {
	Type         string  `json:"type"`
	Title        string  `json:"title"`
	Status       int     `json:"status"`
	Detail       string  `json:"detail"`
	Resource     string  `json:"resource"`
	Token        *uint64 `json:"token"`
	HighestToken *uint64 `json:"highest_token"`
}

// failingGuard stands in for a guard whose storage is down.
type failingGuard struct{}

func (failingGuard) Admit(context.Context, string, uint64) error {
	return errors.New("connection refused to 10.0.0.7:6379")
}

func TestMiddleware(t *testing.T) {
	mem := fencing.NewMemory()
	if err := mem.Admit(context.Background(), "orders", 7); err != nil {
		t.Fatal(err)
	}
	fromPath := func(r *http.Request) string { return r.URL.Path[1:] }
	tests := []struct {
		name       string
		opts       *fencing.MiddlewareOptions
		path       string
		headers    map[string][]string
		wantStatus int
		wantType   string
		wantToken  uint64 // passed on in the context
		wantRes    string
		highest    uint64 // want in the 409 body
	}{
		{name: "a valid token and resource reach the handler",
			headers:    map[string][]string{"Fencing-Token": {"5"}, "Fencing-Resource": {"orders"}},
			wantStatus: http.StatusOK, wantToken: 5, wantRes: "orders"},
		{name: "without a guard a stale token still reaches the handler, which must check it",
			headers:    map[string][]string{"Fencing-Token": {"1"}, "Fencing-Resource": {"orders"}},
			wantStatus: http.StatusOK, wantToken: 1, wantRes: "orders"},
		{name: "a missing token is a 400",
			headers:    map[string][]string{"Fencing-Resource": {"orders"}},
			wantStatus: http.StatusBadRequest, wantType: fencing.ProblemMissingToken},
		{name: "an empty token is a 400",
			headers:    map[string][]string{"Fencing-Token": {""}, "Fencing-Resource": {"orders"}},
			wantStatus: http.StatusBadRequest, wantType: fencing.ProblemMissingToken},
		{name: "a malformed token is a 400",
			headers:    map[string][]string{"Fencing-Token": {"5x"}, "Fencing-Resource": {"orders"}},
			wantStatus: http.StatusBadRequest, wantType: fencing.ProblemInvalidToken},
		{name: "token zero is a 400",
			headers:    map[string][]string{"Fencing-Token": {"0"}, "Fencing-Resource": {"orders"}},
			wantStatus: http.StatusBadRequest, wantType: fencing.ProblemInvalidToken},
		{name: "a token of 2^53 is a 400",
			headers:    map[string][]string{"Fencing-Token": {"9007199254740992"}, "Fencing-Resource": {"orders"}},
			wantStatus: http.StatusBadRequest, wantType: fencing.ProblemInvalidToken},
		{name: "two token headers are a 400",
			headers:    map[string][]string{"Fencing-Token": {"5", "7"}, "Fencing-Resource": {"orders"}},
			wantStatus: http.StatusBadRequest, wantType: fencing.ProblemInvalidToken},
		{name: "a missing resource header is a 400",
			headers:    map[string][]string{"Fencing-Token": {"5"}},
			wantStatus: http.StatusBadRequest, wantType: fencing.ProblemInvalidResource},
		{name: "the resource can come from the request path",
			opts: &fencing.MiddlewareOptions{Resource: fromPath}, path: "/invoices",
			headers:    map[string][]string{"Fencing-Token": {"5"}},
			wantStatus: http.StatusOK, wantToken: 5, wantRes: "invoices"},
		{name: "an invalid resource from the caller's function is a 400",
			opts: &fencing.MiddlewareOptions{Resource: fromPath}, path: "/",
			headers:    map[string][]string{"Fencing-Token": {"5"}},
			wantStatus: http.StatusBadRequest, wantType: fencing.ProblemInvalidResource},
		{name: "with a guard a current token is admitted",
			opts:       &fencing.MiddlewareOptions{Guard: mem},
			headers:    map[string][]string{"Fencing-Token": {"7"}, "Fencing-Resource": {"orders"}},
			wantStatus: http.StatusOK, wantToken: 7, wantRes: "orders"},
		{name: "with a guard a stale token is a 409 naming the highest token",
			opts:       &fencing.MiddlewareOptions{Guard: mem},
			headers:    map[string][]string{"Fencing-Token": {"6"}, "Fencing-Resource": {"orders"}},
			wantStatus: http.StatusConflict, wantType: fencing.ProblemStaleToken, highest: 7},
		{name: "a failing guard is a 500 that does not leak the cause",
			opts:       &fencing.MiddlewareOptions{Guard: failingGuard{}},
			headers:    map[string][]string{"Fencing-Token": {"7"}, "Fencing-Resource": {"orders"}},
			wantStatus: http.StatusInternalServerError, wantType: "about:blank"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var gotToken uint64
			var gotRes string
			var called bool
			h := fencing.Middleware(tt.opts)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				called = true
				var ok1, ok2 bool
				gotToken, ok1 = fencing.TokenFromContext(r.Context())
				gotRes, ok2 = fencing.ResourceFromContext(r.Context())
				if !ok1 || !ok2 {
					t.Error("token or resource missing from the handler's context")
				}
			}))
			path := tt.path
			if path == "" {
				path = "/"
			}
			req := httptest.NewRequest(http.MethodPut, path, nil)
			for k, vs := range tt.headers {
				for _, v := range vs {
					req.Header.Add(k, v)
				}
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)

			if rec.Code != tt.wantStatus {
				t.Fatalf("status %d, want %d; body %s", rec.Code, tt.wantStatus, rec.Body)
			}
			if tt.wantStatus == http.StatusOK {
				if !called || gotToken != tt.wantToken || gotRes != tt.wantRes {
					t.Fatalf("handler called=%v with token %d resource %q, want %d %q",
						called, gotToken, gotRes, tt.wantToken, tt.wantRes)
				}
				return
			}
			if called {
				t.Fatal("handler was called for a refused request")
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
				t.Fatalf("Content-Type %q, want application/problem+json", ct)
			}
			var p problemBody
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
				t.Fatalf("body is not JSON: %v: %s", err, rec.Body)
			}
			if p.Type != tt.wantType || p.Status != tt.wantStatus || p.Title == "" {
				t.Fatalf("problem %+v, want type %q status %d and a title", p, tt.wantType, tt.wantStatus)
			}
			if tt.wantStatus == http.StatusInternalServerError && p.Detail != "" {
				t.Fatalf("500 leaks detail %q", p.Detail)
			}
			if tt.highest != 0 && (p.HighestToken == nil || *p.HighestToken != tt.highest || p.Resource != "orders") {
				t.Fatalf("409 body %s does not name highest token %d of orders", rec.Body, tt.highest)
			}
		})
	}
}

func TestTokenFromContextWithoutMiddleware(t *testing.T) {
	if tok, ok := fencing.TokenFromContext(context.Background()); ok || tok != 0 {
		t.Errorf("TokenFromContext on a bare context = %d, %v", tok, ok)
	}
	if res, ok := fencing.ResourceFromContext(context.Background()); ok || res != "" {
		t.Errorf("ResourceFromContext on a bare context = %q, %v", res, ok)
	}
}

func TestWriteError(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		wantStatus int
		wantType   string
	}{
		{"a wrapped stale error is a 409", fmt.Errorf("put: %w", &fencing.StaleTokenError{Resource: "r", Token: 1, Highest: 2}),
			http.StatusConflict, fencing.ProblemStaleToken},
		{"a missing token is a 400", fencing.ErrMissingToken, http.StatusBadRequest, fencing.ProblemMissingToken},
		{"an invalid token is a 400", fencing.CheckToken(0), http.StatusBadRequest, fencing.ProblemInvalidToken},
		{"an invalid resource is a 400", fencing.CheckResource(""), http.StatusBadRequest, fencing.ProblemInvalidResource},
		{"an invalid key is a 400", fencing.CheckKey(""), http.StatusBadRequest, fencing.ProblemInvalidKey},
		{"anything else is a 500", context.DeadlineExceeded, http.StatusInternalServerError, "about:blank"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			fencing.WriteError(rec, tt.err)
			var p problemBody
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
				t.Fatalf("body is not JSON: %v", err)
			}
			if rec.Code != tt.wantStatus || p.Status != tt.wantStatus || p.Type != tt.wantType {
				t.Fatalf("got %d %+v, want %d %s", rec.Code, p, tt.wantStatus, tt.wantType)
			}
		})
	}
}
