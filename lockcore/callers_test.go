package lockcore_test

import (
	"strconv"
	"sync"
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

// The rounds' node calls run on goroutines kept between calls: 100
// acquisitions and releases over three nodes (600 node calls) leave a few,
// not none and not one per call, and Close lets them go.
func TestNodeCallsReuseTheirGoroutines(t *testing.T) {
	c := newCluster(t, 3, nil, nil)
	pairs(t, c.rl, "reuse", 100)
	c.settle()
	// Three calls per round; a goroutine that has answered but not yet
	// parked when the next round starts is replaced by a new one, so a
	// loaded machine may keep a few more.
	if n := lockcore.Callers(c.rl); n < 1 || n > 12 {
		t.Fatalf("%d goroutines kept for 600 node calls, want between 1 and 12", n)
	}
	c.rl.Close()
	eventually(t, "the kept goroutines gone after Close", func() bool { return lockcore.Callers(c.rl) == 0 })
	pairs(t, c.rl, "reuse", 3) // calls after Close still run
}

// No more goroutines stay parked than the bound, however many calls ran at
// once.
func TestKeptCallersAreBounded(t *testing.T) {
	c := newCluster(t, 3, nil, nil)
	lockcore.SetMaxCallers(c.rl, 2)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() { pairs(t, c.rl, "bounded-"+strconv.Itoa(i), 20) })
	}
	wg.Wait()
	c.settle()
	eventually(t, "at most 2 goroutines kept", func() bool { return lockcore.Callers(c.rl) <= 2 })
}
