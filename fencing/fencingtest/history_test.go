package fencingtest

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/lockgate/lockgate/fencing"
)

// Histories over one data resource "r" (its key is "r" too).

func w(tok uint64, value string, start, end uint64) event {
	return event{kind: kindPut, actor: "w", resource: "r", token: tok, value: value, start: start, end: end}
}

func stale(tok, highest uint64, start, end uint64) event {
	return event{kind: kindPut, actor: "w", resource: "r", token: tok, value: "refused", start: start, end: end,
		err: &fencing.StaleTokenError{Resource: "r", Token: tok, Highest: highest}}
}

func rd(actor string, tok uint64, value string, start, end uint64) event {
	ev := event{kind: kindGet, actor: actor, resource: "r", start: start, end: end,
		got: fencing.Record{Key: "r", Resource: "r", Token: tok, Value: []byte(value)}}
	if tok == 0 {
		ev.got, ev.err = fencing.Record{}, fencing.ErrNotFound
	}
	return ev
}

func final(highest, tok uint64, value string) state {
	return state{highest: map[string]uint64{"r": highest},
		records: map[string]*fencing.Record{"r": {Key: "r", Resource: "r", Token: tok, Value: []byte(value)}}}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name   string
		events []event
		fin    state
		want   string // substring of a violation; "" means none
	}{
		{
			name: "a correct history has no violations",
			events: []event{rd("a", 0, "", 1, 2), w(5, "v5", 3, 6), w(7, "v7", 4, 8), stale(6, 7, 7, 10),
				w(7, "v7b", 11, 12), rd("a", 7, "v7b", 13, 14)},
			fin: final(7, 7, "v7b"),
		},
		{
			name:   "concurrent calls may take effect in either order",
			events: []event{w(7, "v7", 1, 4), w(5, "v5", 2, 3), stale(4, 7, 5, 6)},
			fin:    final(7, 7, "v7"),
		},
		{
			name:   "a token admitted after a higher one returned is caught",
			events: []event{w(7, "v7", 1, 2), w(5, "v5", 3, 4), stale(6, 7, 5, 6)},
			fin:    final(7, 7, "v7"),
			want:   "token went down",
		},
		{
			name:   "a refusal naming a token nobody wrote is caught",
			events: []event{w(5, "v5", 1, 2), stale(4, 9, 3, 4)},
			fin:    final(5, 5, "v5"),
			want:   "no write had begun to admit",
		},
		{
			name:   "a refusal naming a token written only later is caught",
			events: []event{w(3, "v3", 1, 2), stale(4, 9, 3, 4), w(9, "v9", 5, 6)},
			fin:    final(9, 9, "v9"),
			want:   "no write had begun to admit",
		},
		{
			name:   "a refusal whose fields do not add up is caught",
			events: []event{w(5, "v5", 1, 2), stale(6, 5, 3, 4)},
			fin:    final(5, 5, "v5"),
			want:   "do not describe a stale token",
		},
		{
			name:   "a final fence below the highest admitted token is caught",
			events: []event{w(5, "v5", 1, 2), w(7, "v7", 3, 4), stale(6, 7, 5, 6)},
			fin:    final(5, 7, "v7"),
			want:   "final Highest is 5",
		},
		{
			name:   "a final value from an older write is caught (a lost update)",
			events: []event{w(5, "v5", 1, 4), w(7, "v7", 2, 3), stale(6, 7, 5, 6)},
			fin:    final(7, 5, "v5"),
			want:   "final record has token 5",
		},
		{
			name:   "a torn record, value of one write and token of another, is caught",
			events: []event{w(5, "v5", 1, 2), w(7, "v7", 3, 4), stale(6, 7, 5, 6), rd("a", 7, "v5", 7, 8)},
			fin:    final(7, 7, "v7"),
			want:   "no admitted Put wrote this record",
		},
		{
			name:   "a reader seeing the token go back is caught",
			events: []event{w(5, "v5", 1, 6), w(7, "v7", 2, 5), stale(6, 7, 3, 4), rd("a", 7, "v7", 3, 10), rd("a", 5, "v5", 4, 11)},
			fin:    final(7, 7, "v7"),
			want:   "went back from 7",
		},
		{
			name:   "a read older than a write that had returned is caught",
			events: []event{w(5, "v5", 1, 2), w(7, "v7", 3, 4), stale(6, 7, 5, 6), rd("a", 5, "v5", 7, 8)},
			fin:    final(7, 7, "v7"),
			want:   "read an older token",
		},
		{
			name:   "a history without refusals is caught, since it tested nothing",
			events: []event{w(5, "v5", 1, 2), w(7, "v7", 3, 4)},
			fin:    final(7, 7, "v7"),
			want:   "must produce both",
		},
		{
			name:   "an unexpected error is caught",
			events: []event{w(5, "v5", 1, 2), stale(4, 5, 3, 4), {kind: kindPut, actor: "w", resource: "r", token: 6, start: 5, end: 6, err: context.DeadlineExceeded}},
			fin:    final(5, 5, "v5"),
			want:   "unexpected error",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := check(tt.events, tt.fin)
			if tt.want == "" {
				if len(got) != 0 {
					t.Fatalf("check found violations in a correct history:\n%s", strings.Join(got, "\n"))
				}
				return
			}
			for _, v := range got {
				if strings.Contains(v, tt.want) {
					return
				}
			}
			t.Fatalf("check did not report %q; it reported:\n%s", tt.want, strings.Join(got, "\n"))
		})
	}
}

// racyStore checks and writes in two separate critical sections, the
// mistake fencing exists to prevent. The workload must catch it.
type racyStore struct {
	mu     sync.Mutex
	fences map[string]uint64
	values map[string]fencing.Record
}

func (s *racyStore) Admit(ctx context.Context, resource string, token uint64) error {
	return s.Put(ctx, resource, "", token, nil)
}

func (s *racyStore) Put(_ context.Context, resource, key string, token uint64, value []byte) error {
	s.mu.Lock()
	highest := s.fences[resource]
	s.mu.Unlock()
	if token < highest {
		return &fencing.StaleTokenError{Resource: resource, Token: token, Highest: highest}
	}
	runtime.Gosched() // the gap between check and write
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fences[resource] = token
	if key != "" {
		s.values[key] = fencing.Record{Key: key, Resource: resource, Token: token, Value: value}
	}
	return nil
}

func (s *racyStore) Get(_ context.Context, key string) (fencing.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.values[key]
	if !ok {
		return rec, fencing.ErrNotFound
	}
	return rec, nil
}

func (s *racyStore) Highest(_ context.Context, resource string) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fences[resource], nil
}

func TestWorkloadCatchesCheckThenWrite(t *testing.T) {
	ctx := context.Background()
	w := defaultWorkload()
	// A lost update needs two writers inside the gap at once; a few rounds
	// make missing it vanishingly unlikely even on one CPU.
	for round := range 5 {
		s := &racyStore{fences: map[string]uint64{}, values: map[string]fencing.Record{}}
		w.seed = uint64(round)
		events := w.run(ctx, s)
		fin, err := w.final(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if v := check(events, fin); len(v) > 0 {
			t.Logf("round %d: caught %d violations, e.g. %s", round, len(v), v[0])
			return
		}
	}
	t.Fatal("five racing rounds against a check-then-write store produced no violation")
}
