package handlers

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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
