package handlers

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	lockgate "github.com/lockgate/lockgate"
	"github.com/lockgate/lockgate/api"
)

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
