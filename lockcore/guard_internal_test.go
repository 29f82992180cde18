package lockcore

import (
	"testing"
	"time"
)

// TestAnUninitializedNodeWaitsBootGraceThenIsQuarantined: the guard leaves
// a node that stays uninitialized in a cluster that is not new alone for
// bootGrace from when it first found it so (another gateway may be
// initializing it), and no longer.
func TestAnUninitializedNodeWaitsBootGraceThenIsQuarantined(t *testing.T) {
	g := &guard{uninitSince: make([]time.Time, 2)}
	t0 := time.Now()
	tests := []struct {
		name string
		node int
		at   time.Duration
		want bool
	}{
		{"first found uninitialized", 0, 0, true},
		{"just before the grace ends", 0, bootGrace - time.Millisecond, true},
		{"when the grace ends", 0, bootGrace, false},
		{"long after", 0, 3 * bootGrace, false},
		{"another node, first found late", 1, 3 * bootGrace, true},
	}
	for _, tc := range tests {
		if got := g.booting(tc.node, t0.Add(tc.at)); got != tc.want {
			t.Errorf("%s: booting(%d, +%v) = %v, want %v", tc.name, tc.node, tc.at, got, tc.want)
		}
	}
}
