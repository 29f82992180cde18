package unprotected

import "testing"

type node struct{ off bool }

func (n node) Unprotected(Key) bool { return n.off }

type plain struct{}

// TestAll: the protection is off only when every node, and at least one,
// says so.
func TestAll(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes []any
		want  bool
	}{
		{"no nodes", nil, false},
		{"every node off", []any{node{true}, node{true}}, true},
		{"one node on", []any{node{true}, node{false}}, false},
		{"one node without the method", []any{node{true}, plain{}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := All(tc.nodes); got != tc.want {
				t.Errorf("All = %v, want %v", got, tc.want)
			}
		})
	}
}
