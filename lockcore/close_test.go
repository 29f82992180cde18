package lockcore_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/goroutines"
	"github.com/lockgate/lockgate/lockcore"
)

// Goroutines a Redlock leaves running after a call returned, as a stack
// dump names them: Close must wait for every one.
const (
	inRest    = "quorum.(*Call[...]).Rest"    // acting on a round's late answers
	inRaise   = "lockcore.(*Redlock).raiseOn" // a fencing catch-up
	inGuard   = "lockcore.(*guard).loop"      // the node guard
	inBgWait  = "lockcore.(*background).wait" // Close, waiting for them
	closeRes  = "closing"
	lowCount  = 0
	highCount = 10
)

// TestCloseWaitsForBackgroundWork: a call answered at a quorum leaves work
// behind (a late node's answer to act on, a lagging node's counter to
// raise); Close returns only once it is done, and no goroutine the Redlock
// started is left.
func TestCloseWaitsForBackgroundWork(t *testing.T) {
	for _, tc := range []struct {
		name string
		// late makes node 3 wait at a gate in its acquisition (a late
		// answer, whose catch-up runs in quorum's Rest); otherwise only the
		// raise that follows its answer waits (catchUp's own goroutine).
		late bool
		busy string
	}{
		{"a late answer's catch-up", true, inRest},
		{"a catch-up of a node that answered behind", false, inRaise},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Node calls get 5 s: a gated call must still be waiting
			// when the test opens the gate, on a loaded machine too.
			// Other tests' Redlocks may still be ending: only more
			// goroutines than before count.
			base := map[string]int{}
			for _, fn := range []string{inRest, inRaise, inGuard} {
				base[fn] = goroutines.Count("", fn)
			}
			c := newCluster(t, 5, &lockcore.Options{NodeTimeout: 5 * time.Second, MinTTL: 10 * time.Second}, nil)
			// Node 3 is behind: the grant's token (11) is above its own.
			seedCounters(t, c, closeRes, highCount, highCount, highCount, lowCount, highCount)
			// The guard's first pass, before any gate: a gated node's
			// checks would wait out their timeout.
			if err := c.rl.Ready(context.Background()); err != nil {
				t.Fatal(err)
			}
			gate := make(chan struct{})
			if tc.late {
				c.nodes[3].SetGate(gate)
			} else {
				c.nodes[3].SetAfterAcquire(func(lockcore.NodeAcquire, lockcore.NodeReply) { c.nodes[3].SetGate(gate) })
			}
			l, err := c.rl.Acquire(context.Background(), lockcore.AcquireRequest{Resource: closeRes, LeaseID: leaseA, TTL: 20 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			eventually(t, "node 3's call waits at the gate, from "+tc.busy, func() bool { return goroutines.Count("", tc.busy) > base[tc.busy] })

			closed := make(chan struct{})
			go func() {
				c.rl.Close()
				close(closed)
			}()
			eventually(t, "Close waits for the background work", func() bool { return goroutines.Count("", inBgWait) >= 1 })
			select {
			case <-closed:
				t.Fatal("Close returned while node 3's call was still held at the gate")
			default:
			}
			close(gate)
			<-closed
			for _, fn := range []string{inRest, inRaise, inGuard} {
				if n := goroutines.Count("", fn); n > base[fn] {
					t.Errorf("%d goroutines in %s after Close returned, %d before the test", n, fn, base[fn])
				}
			}
			got, err := c.raw[3].Inspect(context.Background(), closeRes)
			if err != nil {
				t.Fatal(err)
			}
			if got.Token != l.Token {
				t.Errorf("node 3 holds token %d after Close, want the lease's %d raised before Close returned (%+v)", got.Token, l.Token, got)
			}
		})
	}
}
