package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/lockgate/lockgate/fencing"
	"github.com/lockgate/lockgate/fencing/pgfence"
	"github.com/lockgate/lockgate/fencing/redisfence"
	"github.com/lockgate/lockgate/internal/pgtest"
	"github.com/lockgate/lockgate/internal/redistest"
)

// backends are the stores fencedkv can run on; the Redis and PostgreSQL
// ones skip under -short.
var backends = []struct {
	name string
	open func(t *testing.T) store
}{
	{"memory", func(*testing.T) store { return fencing.NewMemory() }},
	{"redis", func(t *testing.T) store {
		srv := redistest.Start(t, nil)
		client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { _ = client.Close() })
		return redisfence.New(client, nil)
	}},
	{"postgres", func(t *testing.T) store {
		pool := pgtest.NewPool(t)
		if err := pgfence.CreateSchema(context.Background(), pool); err != nil {
			t.Fatal(err)
		}
		return pgfence.New(pool)
	}},
}

// call is one request in a scenario and what must come back.
type call struct {
	method, path string
	token        string // Fencing-Token; "-" sends none
	resource     string // Fencing-Resource; "" sends none
	body         string
	bodySize     int // if > 0, send this many bytes instead of body

	status      int
	problemType string // for problem+json answers
	highest     uint64 // for 409: want highest_token
	value       string // for GET 200
	wroteToken  string // for GET 200: Fencing-Token of the stored value
	wroteRes    string // for GET 200: Fencing-Resource of the stored value
}

var scenarios = []struct {
	name  string
	calls []call
}{
	{"a write with token 5, a newer one with 7, then a late 5 is refused", []call{
		{method: "PUT", path: "/kv/report", token: "5", body: "v5", status: 204},
		{method: "GET", path: "/kv/report", status: 200, value: "v5", wroteToken: "5", wroteRes: "report"},
		{method: "PUT", path: "/kv/report", token: "7", body: "v7", status: 204},
		{method: "PUT", path: "/kv/report", token: "5", body: "late", status: 409,
			problemType: fencing.ProblemStaleToken, highest: 7},
		{method: "GET", path: "/kv/report", status: 200, value: "v7", wroteToken: "7", wroteRes: "report"},
		{method: "PUT", path: "/kv/report", token: "7", body: "v7 again", status: 204},
		{method: "GET", path: "/kv/report", status: 200, value: "v7 again", wroteToken: "7", wroteRes: "report"},
	}},
	{"one resource fences several keys through Fencing-Resource", []call{
		{method: "PUT", path: "/kv/a", token: "10", resource: "batch", body: "a10", status: 204},
		{method: "PUT", path: "/kv/b", token: "9", resource: "batch", body: "b9", status: 409,
			problemType: fencing.ProblemStaleToken, highest: 10},
		{method: "PUT", path: "/kv/b", token: "9", body: "b9 under its own key", status: 204},
		{method: "GET", path: "/kv/a", status: 200, value: "a10", wroteToken: "10", wroteRes: "batch"},
		{method: "GET", path: "/kv/b", status: 200, value: "b9 under its own key", wroteToken: "9", wroteRes: "b"},
	}},
	{"tokens are required and must be valid", []call{
		{method: "PUT", path: "/kv/k", token: "-", body: "x", status: 400, problemType: fencing.ProblemMissingToken},
		{method: "PUT", path: "/kv/k", token: "abc", body: "x", status: 400, problemType: fencing.ProblemInvalidToken},
		{method: "PUT", path: "/kv/k", token: "0", body: "x", status: 400, problemType: fencing.ProblemInvalidToken},
		{method: "PUT", path: "/kv/k", token: "9007199254740992", body: "x", status: 400, problemType: fencing.ProblemInvalidToken},
		{method: "GET", path: "/kv/k", status: 404, problemType: problemNoValue},
	}},
	{"keys are validated on reads and writes", []call{
		{method: "PUT", path: "/kv/" + strings.Repeat("k", 201), token: "1", body: "x", status: 400, problemType: fencing.ProblemInvalidKey},
		{method: "PUT", path: "/kv/a%2Fb", token: "1", body: "x", status: 400, problemType: fencing.ProblemInvalidKey},
		{method: "GET", path: "/kv/sp%20ace", status: 400, problemType: fencing.ProblemInvalidKey},
		{method: "PUT", path: "/kv/" + strings.Repeat("k", 200), token: "1", body: "x", status: 204},
		{method: "PUT", path: "/kv/A-z_0.9:x", token: "1", body: "x", status: 204},
	}},
	{"values up to 1 MiB are stored, larger ones get 413", []call{
		{method: "PUT", path: "/kv/big", token: "1", bodySize: maxValueBytes, status: 204},
		{method: "PUT", path: "/kv/big", token: "2", bodySize: maxValueBytes + 1, status: 413, problemType: problemTooLarge},
		{method: "GET", path: "/kv/big", status: 200, value: strings.Repeat("x", maxValueBytes), wroteToken: "1", wroteRes: "big"},
		{method: "PUT", path: "/kv/empty", token: "1", status: 204},
		{method: "GET", path: "/kv/empty", status: 200, value: "", wroteToken: "1", wroteRes: "empty"},
	}},
	{"binary values round-trip", []call{
		{method: "PUT", path: "/kv/bin", token: "3", body: "\x00\xff\r\n", status: 204},
		{method: "GET", path: "/kv/bin", status: 200, value: "\x00\xff\r\n", wroteToken: "3", wroteRes: "bin"},
	}},
	{"health and unknown routes", []call{
		{method: "GET", path: "/healthz", status: 200, value: "ok\n"},
		{method: "GET", path: "/readyz", status: 200, value: "ready\n"},
		{method: "GET", path: "/nope", status: 404, problemType: problemNotFound},
		{method: "DELETE", path: "/kv/k", status: 405, problemType: problemMethodNotAllowed},
	}},
}

func TestHandler(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			st := be.open(t)
			for _, sc := range scenarios {
				t.Run(sc.name, func(t *testing.T) {
					// Each scenario gets its own server but shares the store;
					// their keys do not overlap.
					srv := httptest.NewServer(newHandler(st, zerolog.New(io.Discard)))
					defer srv.Close()
					for i, c := range sc.calls {
						if msg := do(t, srv.URL, c); msg != "" {
							t.Fatalf("call %d, %s %s (token %q): %s", i, c.method, c.path, c.token, msg)
						}
					}
				})
			}
		})
	}
}

// do makes one call and returns what is wrong with the answer, or "".
func do(t *testing.T, base string, c call) string {
	t.Helper()
	body := []byte(c.body)
	if c.bodySize > 0 {
		body = bytes.Repeat([]byte("x"), c.bodySize)
	}
	req, err := http.NewRequest(c.method, base+c.path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if c.token != "-" && c.method == "PUT" {
		req.Header.Set(fencing.TokenHeader, c.token)
	}
	if c.resource != "" {
		req.Header.Set(fencing.ResourceHeader, c.resource)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != c.status {
		return "status " + resp.Status + ", body " + string(got)
	}
	if c.problemType != "" {
		if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
			return "Content-Type " + ct + ", want application/problem+json"
		}
		var p struct {
			Type         string `json:"type"`
			Title        string `json:"title"`
			Status       int    `json:"status"`
			HighestToken uint64 `json:"highest_token"`
		}
		if err := json.Unmarshal(got, &p); err != nil {
			return "problem body is not JSON: " + string(got)
		}
		if p.Type != c.problemType || p.Status != c.status || p.Title == "" {
			return "problem " + string(got) + ", want type " + c.problemType
		}
		if p.HighestToken != c.highest {
			return "problem " + string(got) + " names the wrong highest token"
		}
		return ""
	}
	if c.method == "GET" && c.status == 200 {
		if string(got) != c.value {
			return "body " + shorten(string(got)) + ", want " + shorten(c.value)
		}
		if tok := resp.Header.Get(fencing.TokenHeader); tok != c.wroteToken {
			return "Fencing-Token " + tok + ", want " + c.wroteToken
		}
		if res := resp.Header.Get(fencing.ResourceHeader); res != c.wroteRes {
			return "Fencing-Resource " + res + ", want " + c.wroteRes
		}
	}
	return ""
}

func shorten(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// /readyz follows the store: 200 while Redis answers, 503 with Retry-After
// once it is gone, while /healthz stays 200.
func TestReadinessFollowsTheStore(t *testing.T) {
	srv := redistest.Start(t, nil)
	st, closeStore, err := openStore(context.Background(), config{redisURL: srv.URL()}, zerolog.New(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	h := httptest.NewServer(newHandler(st, zerolog.New(io.Discard)))
	defer h.Close()
	if msg := do(t, h.URL, call{method: "GET", path: "/readyz", status: 200, value: "ready\n"}); msg != "" {
		t.Fatalf("Redis up: %s", msg)
	}
	srv.Kill()
	if msg := do(t, h.URL, call{method: "GET", path: "/readyz", status: 503, problemType: problemUnavailable}); msg != "" {
		t.Errorf("Redis down: %s", msg)
	}
	if msg := do(t, h.URL, call{method: "GET", path: "/healthz", status: 200, value: "ok\n"}); msg != "" {
		t.Errorf("Redis down, /healthz: %s", msg)
	}
	// A store failure is a 500 with a lockgate problem type, its cause in
	// the log only.
	if msg := do(t, h.URL, call{method: "GET", path: "/kv/x", status: 500, problemType: problemInternal}); msg != "" {
		t.Errorf("Redis down, a read: %s", msg)
	}
}
