package lockcore_test

import (
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
)

// pairs acquires and releases resource n times on rl.
func pairs(t *testing.T, rl *lockcore.Redlock, resource string, n int) {
	t.Helper()
	for range n {
		l, err := rl.Acquire(t.Context(), lockcore.AcquireRequest{Resource: resource, TTL: 5 * time.Second})
		if err != nil {
			t.Error(err)
			return
		}
		if err := rl.Release(t.Context(), lockcore.ReleaseRequest{Resource: resource, LeaseID: l.ID}); err != nil {
			t.Error(err)
			return
		}
	}
}

// A Redlock keeps goroutines for its node calls unless built with -race,
// where handing calls to kept goroutines would hide races between requests
// from the detector. How kept goroutines are reused and bounded is
// package quorum's (TestKeptCallers*).
func TestRaceBuildsKeepNoCallers(t *testing.T) {
	c := newCluster(t, 3, nil, nil)
	pairs(t, c.rl, "default", 5)
	c.settle()
	if kept := lockcore.Callers(c.rl) > 0; kept == lockcore.RaceBuild {
		t.Fatalf("race build %v: %d goroutines kept, want none exactly in a race build", lockcore.RaceBuild, lockcore.Callers(c.rl))
	}
}
