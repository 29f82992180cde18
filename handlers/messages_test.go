package handlers_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lockgate/lockgate/api"
)

// A whole number spelt with an exponent or a fraction is an integer to the
// contract, so it is accepted as one; a fraction that is not whole is
// refused in the contract's words, never a Go decoder's.
func TestWholeNumbersInAnyNotationAreIntegers(t *testing.T) {
	t.Parallel()
	g := defaultGateway(t)
	for i, body := range []string{`{"ttl_ms":1e4}`, `{"ttl_ms":10000.0}`, `{"ttl_ms":1.0E4,"wait_ms":0e0}`} {
		res := g.do(t, "PUT", "/locks/whole-"+string(rune('a'+i)), body)
		l := wantLease(t, res, http.StatusCreated, "whole-"+string(rune('a'+i)))
		if l.TTLms != 10000 {
			t.Errorf("%s: ttl_ms %d, want 10000", body, l.TTLms)
		}
	}
	res := g.do(t, "PUT", "/locks/whole-x", `{"ttl_ms":10000.5}`)
	p := wantProblem(t, res, http.StatusBadRequest, api.ProblemInvalid)
	if p.Field != "ttl_ms" || strings.Contains(p.Detail, "Go struct") || strings.Contains(p.Detail, "int64") || strings.Contains(p.Detail, "unmarshal") {
		t.Errorf("10000.5: field %q detail %q", p.Field, p.Detail)
	}
}

// A resource name, a Lease-Id or an If-Match that breaks its rule is told
// which character is not allowed, or what the length limit is, not the
// regular expression; a lease id's characters are never quoted.
func TestBadNamesAndHeadersAreToldWhatIsWrong(t *testing.T) {
	t.Parallel()
	g := defaultGateway(t)
	long := strings.Repeat("a", 201)
	for _, tc := range []struct {
		name, target string
		hdr          []string
		field        string
		want         []string
		never        []string
	}{
		{"a unicode name", "/locks/caf%C3%A9", nil, "resource",
			[]string{"character 4 is 'é' (U+00E9), which is not allowed", "A-Z a-z 0-9 . _ - :"}, nil},
		{"a space", "/locks/two%20words", nil, "resource", []string{"character 4 is a space"}, nil},
		{"an encoded slash", "/locks/a%2Fb", nil, "resource", []string{"slash"}, nil},
		{"a name over 200", "/locks/" + long, nil, "resource", []string{"it has 201, over the limit of 200"}, nil},
		{"a short lease id", "/locks/x", []string{"Lease-Id", "short-id"}, "Lease-Id",
			[]string{"16 to 128 characters of A-Z a-z 0-9 - _", "it has 8"}, []string{"short-id"}},
		{"a lease id with a dot", "/locks/x", []string{"Lease-Id", "s3cret.lease-0123456789"}, "Lease-Id",
			[]string{"character 7 is a character that is not allowed"}, []string{"s3cret", "'.'"}},
		{"an unquoted If-Match", "/locks/x", []string{"Lease-Id", "a-lease-id-0123456789", "If-Match", "42"}, "If-Match",
			[]string{`in double quotes, e.g. "42"`}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := g.do(t, "PATCH", tc.target, "", tc.hdr...)
			p := wantProblem(t, res, http.StatusBadRequest, api.ProblemInvalid)
			if p.Field != tc.field {
				t.Errorf("field %q, want %q (%s)", p.Field, tc.field, p.Detail)
			}
			for _, w := range tc.want {
				if !strings.Contains(p.Detail, w) {
					t.Errorf("detail %q lacks %q", p.Detail, w)
				}
			}
			for _, w := range append(tc.never, "regular expression", "^[") {
				if strings.Contains(p.Detail, w) {
					t.Errorf("detail %q shows %q", p.Detail, w)
				}
			}
		})
	}
}

// Two Lease-Id (or If-Match) headers are refused, as fencing refuses two
// Fencing-Token headers, instead of the first being used.
func TestARepeatedLeaseIDIsRefused(t *testing.T) {
	t.Parallel()
	g := defaultGateway(t)
	l := g.acquire(t, "twice", "", "")
	for _, h := range []string{api.HeaderLeaseID, api.HeaderIfMatch} {
		for _, method := range []string{"PUT", "PATCH", "DELETE"} {
			if method == "PUT" && h == api.HeaderIfMatch {
				continue // PUT takes no If-Match
			}
			req := httptest.NewRequest(method, "/locks/twice", nil)
			req.Header.Set(api.HeaderLeaseID, l.LeaseID)
			req.Header.Add(h, map[string]string{api.HeaderLeaseID: "another-lease-0123456789", api.HeaderIfMatch: `"1"`}[h])
			if h == api.HeaderIfMatch {
				req.Header.Add(h, `"1"`)
			}
			rec := httptest.NewRecorder()
			g.handler.ServeHTTP(rec, req)
			res := response{Status: rec.Code, Header: rec.Header(), Body: rec.Body.Bytes()}
			checkContract(t, method, "/locks/twice", res)
			p := wantProblem(t, res, http.StatusBadRequest, api.ProblemInvalid)
			if p.Field != h || !strings.Contains(p.Detail, "2 "+h+" headers") || strings.Contains(p.Detail, l.LeaseID) {
				t.Errorf("%s with two %s: field %q detail %q", method, h, p.Field, p.Detail)
			}
		}
	}
	if res := g.do(t, "GET", "/locks/twice", ""); res.Status != http.StatusOK {
		t.Errorf("the lock was changed: GET %d %s", res.Status, res.Body)
	}
}

// An owner must be printable, a rule openapi.yaml does not state and that
// the validate tags of package api hold: a zero-width space or a
// line separator passes the contract and lockcore.ValidOwner, and is
// refused naming owner; other non-ASCII letters are taken.
func TestAnOwnerThatIsNotPrintableIsRefused(t *testing.T) {
	t.Parallel()
	g := defaultGateway(t)
	for i, owner := range []string{`\u200b`, `a\u2028b`} {
		res := g.do(t, "PUT", "/locks/unprintable-"+string(rune('a'+i)), `{"owner":"`+owner+`"}`)
		if p := wantProblem(t, res, http.StatusBadRequest, api.ProblemInvalid); p.Field != "owner" {
			t.Errorf("lock owner %s: field %q, want owner", owner, p.Field)
		}
		res = g.do(t, "PUT", "/semaphores/unprintable/permits", `{"permits":1,"owner":"`+owner+`"}`)
		if p := wantProblem(t, res, http.StatusBadRequest, api.ProblemInvalid); p.Field != "owner" {
			t.Errorf("permit owner %s: field %q, want owner", owner, p.Field)
		}
	}
	wantLease(t, g.do(t, "PUT", "/locks/printable", `{"owner":"Jürgen's worker 7"}`), http.StatusCreated, "printable")
	if res := g.do(t, "PUT", "/semaphores/printable/permits", `{"permits":1,"owner":"Jürgen's worker 7"}`); res.Status != http.StatusCreated {
		t.Errorf("a printable permit owner: %s, want 201", res)
	}
}
