package lockcore_test

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/goroutines"
	"github.com/lockgate/lockgate/lockcore"
)

// inLoop is how a stack dump names the kept goroutines' function.
const inLoop = "lockcore.(*callers).loop("

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

// The rounds' node calls run on goroutines kept between calls: 100
// acquisitions and releases over three nodes (600 node calls) leave a few,
// not none and not one per call, and Close lets them go.
func TestNodeCallsReuseTheirGoroutines(t *testing.T) {
	c := newCluster(t, 3, nil, nil)
	lockcore.KeepCallers(c.rl, 256)
	pairs(t, c.rl, "reuse", 100)
	c.settle()
	// Three calls per round; a goroutine that has answered but not yet
	// parked when the next round starts is replaced by a new one, so a
	// loaded machine may keep more than three. Without reuse there would
	// be 256.
	if n := lockcore.Callers(c.rl); n < 1 || n > 30 {
		t.Fatalf("%d goroutines kept for 600 node calls, want between 1 and 30", n)
	}
	c.rl.Close()
	eventually(t, "the kept goroutines gone after Close", func() bool {
		return lockcore.Callers(c.rl) == 0 && goroutines.Count("", inLoop) == 0
	})
	pairs(t, c.rl, "reuse", 3) // calls after Close still run
	c.settle()
	eventually(t, "no goroutine kept for calls after Close", func() bool { return goroutines.Count("", inLoop) == 0 })
}

// Exactly the bound stays kept, however many calls ran at once; the
// goroutines started beyond it exit after their call.
func TestKeptCallersAreBounded(t *testing.T) {
	c := newCluster(t, 3, nil, nil)
	lockcore.KeepCallers(c.rl, 2)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() { pairs(t, c.rl, "bounded-"+strconv.Itoa(i), 20) })
	}
	wg.Wait()
	c.settle()
	eventually(t, "2 goroutines kept, none other in the loop", func() bool {
		return lockcore.Callers(c.rl) == 2 && goroutines.Count("", inLoop) == 2
	})
}

// A Redlock keeps goroutines for its node calls unless built with -race,
// where handing calls to kept goroutines would hide races between requests
// from the detector.
func TestRaceBuildsKeepNoCallers(t *testing.T) {
	c := newCluster(t, 3, nil, nil)
	pairs(t, c.rl, "default", 5)
	c.settle()
	if kept := lockcore.Callers(c.rl) > 0; kept == lockcore.RaceBuild {
		t.Fatalf("race build %v: %d goroutines kept, want none exactly in a race build", lockcore.RaceBuild, lockcore.Callers(c.rl))
	}
}
