// Package fencingtest is a conformance suite for fenced stores: anything
// that implements fencing.Guard plus Put, Get and Highest the way
// fencing.Memory, redisfence.Guard and pgfence.Guard do.
//
// Run checks the documented semantics case by case and then races many
// writers with interleaved tokens, and concurrent readers, against a few
// resources. It records when every call started and returned on one logical
// clock, and afterwards checks the history: no admitted token was ever
// lower than one admitted before it began, every refusal names a token that
// really had been admitted, readers never saw a value go back or a value and
// token that no single write produced, and the final state holds the
// highest admitted token.
package fencingtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/lockgate/lockgate/fencing"
)

// Store is what the suite tests: a Guard whose Put checks the token and
// writes the value in one atomic step, with Get and Highest to look at the
// result. Put, Get and Highest mean what they mean on fencing.Memory.
type Store interface {
	fencing.Guard
	Put(ctx context.Context, resource, key string, token uint64, value []byte) error
	Get(ctx context.Context, key string) (fencing.Record, error)
	Highest(ctx context.Context, resource string) (uint64, error)
}

// Run runs the conformance suite against s as subtests of t. s must hold
// nothing under names that start with "fencingtest:". Run calls t.Fatal or
// t.Error only from the test goroutines.
func Run(t *testing.T, s Store) {
	t.Run("Semantics", func(t *testing.T) { testSemantics(t, s) })
	t.Run("BadArguments", func(t *testing.T) { testBadArguments(t, s) })
	t.Run("CanceledContext", func(t *testing.T) { testCanceled(t, s) })
	t.Run("ConcurrentWriters", func(t *testing.T) { testConcurrent(t, s) })
}

// step is one call in a semantics case. Names are relative: the case
// prefixes them to keep cases apart in one store.
type step struct {
	admit    bool // Admit(resource, token) instead of Put(resource, key, token, value)
	resource string
	key      string
	token    uint64
	value    string
	stale    uint64 // want a *StaleTokenError naming this highest token
	wantErr  error  // want an error matching this sentinel
}

func put(resource, key string, token uint64, value string) step {
	return step{resource: resource, key: key, token: token, value: value}
}

func admit(resource string, token uint64) step {
	return step{admit: true, resource: resource, token: token}
}

func (s step) refused(highest uint64) step { s.stale = highest; return s }
func (s step) fails(err error) step        { s.wantErr = err; return s }

type want struct {
	resource string
	token    uint64
	value    string
}

const maxTok = fencing.MaxToken

var semanticCases = []struct {
	name    string
	steps   []step
	highest map[string]uint64 // resource → want Highest
	values  map[string]*want  // key → want Get; nil means ErrNotFound
}{
	{
		name:    "a first token is admitted",
		steps:   []step{put("r", "k", 5, "a")},
		highest: map[string]uint64{"r": 5},
		values:  map[string]*want{"k": {"r", 5, "a"}},
	},
	{
		name:    "a higher token is admitted and replaces the value",
		steps:   []step{put("r", "k", 5, "a"), put("r", "k", 7, "b")},
		highest: map[string]uint64{"r": 7},
		values:  map[string]*want{"k": {"r", 7, "b"}},
	},
	{
		name:    "an equal token is admitted again, as one holder writes many times",
		steps:   []step{put("r", "k", 5, "a"), put("r", "k", 5, "b"), admit("r", 5)},
		highest: map[string]uint64{"r": 5},
		values:  map[string]*want{"k": {"r", 5, "b"}},
	},
	{
		name:    "a lower token is refused, names the highest token and changes nothing",
		steps:   []step{put("r", "k", 7, "a"), put("r", "k", 5, "b").refused(7), admit("r", 6).refused(7)},
		highest: map[string]uint64{"r": 7},
		values:  map[string]*want{"k": {"r", 7, "a"}},
	},
	{
		name:    "a refused write to a new key creates nothing",
		steps:   []step{put("r", "k1", 7, "a"), put("r", "k2", 5, "b").refused(7)},
		highest: map[string]uint64{"r": 7},
		values:  map[string]*want{"k1": {"r", 7, "a"}, "k2": nil},
	},
	{
		name:    "resources are fenced independently",
		steps:   []step{put("r1", "k1", 9, "a"), put("r2", "k2", 3, "b"), put("r2", "k2", 2, "c").refused(3)},
		highest: map[string]uint64{"r1": 9, "r2": 3, "r3": 0},
		values:  map[string]*want{"k1": {"r1", 9, "a"}, "k2": {"r2", 3, "b"}},
	},
	{
		name: "Admit and Put share the resource's fence",
		steps: []step{admit("r", 9), put("r", "k", 8, "a").refused(9), put("r", "k", 9, "b"),
			admit("r", 8).refused(9), admit("r", 10), put("r", "k", 9, "c").refused(10)},
		highest: map[string]uint64{"r": 10},
		values:  map[string]*want{"k": {"r", 9, "b"}},
	},
	{
		name: "one resource fences several keys",
		steps: []step{put("r", "k1", 5, "a"), put("r", "k2", 5, "b"), put("r", "k1", 6, "c"),
			put("r", "k2", 5, "d").refused(6)},
		highest: map[string]uint64{"r": 6},
		values:  map[string]*want{"k1": {"r", 6, "c"}, "k2": {"r", 5, "b"}},
	},
	{
		name:    "a key records the resource of its latest write",
		steps:   []step{put("r1", "k", 5, "a"), put("r2", "k", 1, "b")},
		highest: map[string]uint64{"r1": 5, "r2": 1},
		values:  map[string]*want{"k": {"r2", 1, "b"}},
	},
	{
		name:    "tokens compare as numbers, not as strings",
		steps:   []step{put("r", "k", 9, "a"), put("r", "k", 10, "b"), put("r", "k", 9, "c").refused(10)},
		highest: map[string]uint64{"r": 10},
		values:  map[string]*want{"k": {"r", 10, "b"}},
	},
	{
		name: "tokens next to 2^53 compare exactly",
		steps: []step{put("r", "k", maxTok-1, "a"), put("r", "k", maxTok, "b"),
			put("r", "k", maxTok-1, "c").refused(maxTok), admit("r", maxTok)},
		highest: map[string]uint64{"r": maxTok},
		values:  map[string]*want{"k": {"r", maxTok, "b"}},
	},
	{
		name: "invalid tokens are refused and record nothing",
		steps: []step{put("r", "k", 0, "a").fails(fencing.ErrInvalidToken),
			put("r", "k", maxTok+1, "b").fails(fencing.ErrInvalidToken),
			admit("r", 1<<64-1).fails(fencing.ErrInvalidToken)},
		highest: map[string]uint64{"r": 0},
		values:  map[string]*want{"k": nil},
	},
	{
		name: "invalid tokens leave an existing fence alone",
		steps: []step{put("r", "k", 5, "a"), admit("r", 0).fails(fencing.ErrInvalidToken),
			put("r", "k", 1<<53, "b").fails(fencing.ErrInvalidToken), put("r", "k", 4, "c").refused(5)},
		highest: map[string]uint64{"r": 5},
		values:  map[string]*want{"k": {"r", 5, "a"}},
	},
	{
		name:    "values round-trip byte for byte, the empty value too",
		steps:   []step{put("r", "empty", 1, ""), put("r", "binary", 1, "\x00\xff\r\n{\"x\"}")},
		highest: map[string]uint64{"r": 1},
		values:  map[string]*want{"empty": {"r", 1, ""}, "binary": {"r", 1, "\x00\xff\r\n{\"x\"}"}},
	},
	{
		// Redis keys are built as prefix{name}:token and prefix{name}:value;
		// these names would collide under a careless layout.
		name: "names with braces, colons and non-ASCII letters stay distinct",
		steps: []step{put("a", "a", 5, "1"), put("a}:token", "a}:token", 4, "2"), put("a}:value", "a}:value", 3, "3"),
			put("{a}", "{a}", 2, "4"), put("ключ", "ключ", 1, "5")},
		highest: map[string]uint64{"a": 5, "a}:token": 4, "a}:value": 3, "{a}": 2, "ключ": 1},
		values: map[string]*want{"a": {"a", 5, "1"}, "a}:token": {"a}:token", 4, "2"},
			"a}:value": {"a}:value", 3, "3"}, "{a}": {"{a}", 2, "4"}, "ключ": {"ключ", 1, "5"}},
	},
}

func testSemantics(t *testing.T, s Store) {
	ctx := context.Background()
	for i, tc := range semanticCases {
		t.Run(tc.name, func(t *testing.T) {
			prefix := fmt.Sprintf("fencingtest:sem%02d:", i)
			for j, st := range tc.steps {
				res := prefix + st.resource
				var err error
				if st.admit {
					err = s.Admit(ctx, res, st.token)
				} else {
					err = s.Put(ctx, res, prefix+st.key, st.token, []byte(st.value))
				}
				if msg := checkStepErr(err, st, res); msg != "" {
					t.Fatalf("step %d (%+v): %s", j, st, msg)
				}
			}
			checkHighest(ctx, t, s, prefix, tc.highest)
			checkValues(ctx, t, s, prefix, tc.values)
		})
	}
}

// checkHighest fails t unless Highest of each resource (under prefix) is
// the token wanted.
func checkHighest(ctx context.Context, t *testing.T, s Store, prefix string, highest map[string]uint64) {
	t.Helper()
	for res, wantTok := range highest {
		got, err := s.Highest(ctx, prefix+res)
		if err != nil {
			t.Fatalf("Highest(%q): %v", res, err)
		}
		if got != wantTok {
			t.Errorf("Highest(%q) = %d, want %d", res, got, wantTok)
		}
	}
}

// checkValues fails t unless Get of each key (under prefix) returns the
// record wanted, or ErrNotFound where none is.
func checkValues(ctx context.Context, t *testing.T, s Store, prefix string, values map[string]*want) {
	t.Helper()
	for key, w := range values {
		rec, err := s.Get(ctx, prefix+key)
		if w == nil {
			if !errors.Is(err, fencing.ErrNotFound) {
				t.Errorf("Get(%q) = %+v, %v; want ErrNotFound", key, rec, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("Get(%q): %v", key, err)
		}
		if rec.Key != prefix+key || rec.Resource != prefix+w.resource || rec.Token != w.token ||
			!bytes.Equal(rec.Value, []byte(w.value)) {
			t.Errorf("Get(%q) = {Key:%q Resource:%q Token:%d Value:%q}, want {Key:%q Resource:%q Token:%d Value:%q}",
				key, rec.Key, rec.Resource, rec.Token, rec.Value, prefix+key, prefix+w.resource, w.token, w.value)
		}
	}
}

// checkStepErr returns what is wrong with err as the outcome of st, or "".
func checkStepErr(err error, st step, resource string) string {
	switch {
	case st.stale != 0:
		var se *fencing.StaleTokenError
		if !errors.As(err, &se) {
			return fmt.Sprintf("got error %v, want *StaleTokenError", err)
		}
		if !errors.Is(err, fencing.ErrStaleToken) {
			return fmt.Sprintf("error %v does not match ErrStaleToken", err)
		}
		if se.Resource != resource || se.Token != st.token || se.Highest != st.stale {
			return fmt.Sprintf("got %+v, want {Resource:%q Token:%d Highest:%d}", *se, resource, st.token, st.stale)
		}
	case st.wantErr != nil:
		if !errors.Is(err, st.wantErr) {
			return fmt.Sprintf("got error %v, want %v", err, st.wantErr)
		}
		if errors.Is(err, fencing.ErrStaleToken) {
			return fmt.Sprintf("error %v also matches ErrStaleToken", err)
		}
	case err != nil:
		return fmt.Sprintf("unexpected error %v", err)
	}
	return ""
}

func testBadArguments(t *testing.T, s Store) {
	ctx := context.Background()
	long := strings.Repeat("x", fencing.MaxNameLen+1)
	tests := []struct {
		name          string
		resource, key string
		token         uint64
		want          error
	}{
		{"an empty resource", "", "fencingtest:bad:k", 1, fencing.ErrInvalidResource},
		{"a resource that is not UTF-8", "fencingtest:bad:\xff", "fencingtest:bad:k", 1, fencing.ErrInvalidResource},
		{"a resource with a NUL byte", "fencingtest:bad:\x00", "fencingtest:bad:k", 1, fencing.ErrInvalidResource},
		{"a resource that is too long", long, "fencingtest:bad:k", 1, fencing.ErrInvalidResource},
		{"an empty key", "fencingtest:bad:r", "", 1, fencing.ErrInvalidKey},
		{"a key that is too long", "fencingtest:bad:r", long, 1, fencing.ErrInvalidKey},
		{"token zero", "fencingtest:bad:r", "fencingtest:bad:k", 0, fencing.ErrInvalidToken},
		{"token 2^53", "fencingtest:bad:r", "fencingtest:bad:k", 1 << 53, fencing.ErrInvalidToken},
	}
	for _, tt := range tests {
		t.Run(tt.name+" is refused", func(t *testing.T) {
			if err := s.Put(ctx, tt.resource, tt.key, tt.token, []byte("v")); !errors.Is(err, tt.want) {
				t.Errorf("Put: got %v, want %v", err, tt.want)
			}
			if tt.want == fencing.ErrInvalidKey {
				if _, err := s.Get(ctx, tt.key); !errors.Is(err, tt.want) {
					t.Errorf("Get: got %v, want %v", err, tt.want)
				}
				return
			}
			if err := s.Admit(ctx, tt.resource, tt.token); !errors.Is(err, tt.want) {
				t.Errorf("Admit: got %v, want %v", err, tt.want)
			}
		})
	}
	got, err := s.Highest(ctx, "fencingtest:bad:r")
	if err != nil || got != 0 {
		t.Errorf("after refused calls Highest = %d, %v; want 0, nil", got, err)
	}
	if _, err := s.Get(ctx, "fencingtest:bad:k"); !errors.Is(err, fencing.ErrNotFound) {
		t.Errorf("after refused calls Get: got %v, want ErrNotFound", err)
	}
}

func testCanceled(t *testing.T, s Store) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	const res = "fencingtest:canceled"
	if err := s.Admit(ctx, res, 1); !errors.Is(err, context.Canceled) {
		t.Errorf("Admit: got %v, want an error matching context.Canceled", err)
	}
	if err := s.Put(ctx, res, res, 1, []byte("v")); !errors.Is(err, context.Canceled) {
		t.Errorf("Put: got %v, want an error matching context.Canceled", err)
	}
	if _, err := s.Get(ctx, res); !errors.Is(err, context.Canceled) {
		t.Errorf("Get: got %v, want an error matching context.Canceled", err)
	}
	if _, err := s.Highest(ctx, res); !errors.Is(err, context.Canceled) {
		t.Errorf("Highest: got %v, want an error matching context.Canceled", err)
	}
}
