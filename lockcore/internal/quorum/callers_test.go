package quorum

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/goroutines"
)

// inLoop is how a stack dump names the kept goroutines' function.
const inLoop = "quorum.(*callers).loop("

// calls makes n calls over g's 3 nodes, one after the other.
func calls(g *Group, n int) {
	f := newFakes(3)
	for range n {
		All(context.Background(), g, []ans{{}, {}, {}}, f.call)
	}
}

// Rule 10: node calls run on goroutines kept between calls: 200 calls
// over three nodes (600 node calls) leave a few, not none and not one per
// call, and Close lets them go; calls after Close still run.
func TestKeptCallersAreReused(t *testing.T) {
	g := New(Config{Nodes: 3, Quorum: 2, Timeout: time.Minute, Kept: 256})
	calls(g, 200)
	// A goroutine that has answered but not yet parked when the next call
	// starts is replaced by a new one, so a loaded machine may keep more
	// than three. Without reuse there would be 256.
	if n := g.Kept(); n < 1 || n > 30 {
		t.Fatalf("%d goroutines kept for 600 node calls, want between 1 and 30", n)
	}
	g.Close()
	eventually(t, "the kept goroutines gone after Close", func() bool {
		return g.Kept() == 0 && goroutines.Count("", inLoop) == 0
	})
	calls(g, 3)
	eventually(t, "no goroutine kept for calls after Close", func() bool { return goroutines.Count("", inLoop) == 0 })
}

// Rule 10: exactly the bound stays kept, however many calls ran at once;
// the goroutines started beyond it exit after their call.
func TestKeptCallersAreBounded(t *testing.T) {
	g := New(Config{Nodes: 3, Quorum: 2, Timeout: time.Minute, Kept: 2})
	defer g.Close()
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() { calls(g, 20) })
	}
	wg.Wait()
	eventually(t, "2 goroutines kept, none other in the loop", func() bool {
		return g.Kept() == 2 && goroutines.Count("", inLoop) == 2
	})
}

// Rule 10: with Kept 0, every node call has a goroutine of its own.
func TestNoCallersKept(t *testing.T) {
	g := New(Config{Nodes: 3, Quorum: 2, Timeout: time.Minute})
	defer g.Close()
	calls(g, 5)
	if n := g.Kept(); n != 0 || goroutines.Count("", inLoop) != 0 {
		t.Fatalf("%d goroutines kept with Kept 0", n)
	}
}
