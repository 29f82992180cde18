package lockcore_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/goroutines"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
	"github.com/lockgate/lockgate/lockcore/nodetest"
)

// Goroutines a Redlock leaves running after a call returned, as a stack
// dump names them: Close must wait for every one.
const (
	inRest    = "quorum.(*Call[...]).Rest"    // acting on a round's late answers
	inRaise   = "lockcore.(*Redlock).raiseOn" // a fencing catch-up
	inGuard   = "lockcore.(*guard).loop"      // the node guard
	inBgWait  = "lockcore.(*background).wait" // Close, waiting for them
	inGate    = "nodetest.(*Faulty).fault"    // a node call held at its gate
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
	}{
		{"a late answer's catch-up", true},
		{"a catch-up of a node that answered behind", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Node calls get 5 s: a gated call must still be waiting
			// when the test opens the gate, on a loaded machine too.
			// Other tests' Redlocks may still be ending: only more
			// goroutines than before count.
			base := map[string]int{}
			for _, fn := range []string{inRest, inRaise, inGuard, inGate} {
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
			// Only node 3 has a gate. Its call is counted where it waits
			// (Faulty.fault), not by what issued it: on a loaded machine
			// node 3's answer may come after the quorum's, and its
			// catch-up then runs from Rest, not from catchUp's goroutine;
			// either holds Close up the same way.
			eventually(t, "node 3's call waits at the gate", func() bool {
				return goroutines.Count("", inGate) > base[inGate]
			})

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

// TestCloseWaitsForAnUndoRetry: a failed acquisition whose undo could not
// reach two nodes keeps releasing there in the background (retryUndo).
// Close stops those retries and returns only once the one under way has
// ended.
func TestCloseWaitsForAnUndoRetry(t *testing.T) {
	const (
		inRetry   = "lockcore.(*Redlock).retryUndo"
		inRelease = "nodetest.(*Faulty).Release"
	)
	base := goroutines.Count("", inRetry)
	var nodes []lockcore.Node
	var fs []*nodetest.Faulty
	for range 3 {
		f := nodetest.NewFaulty(memnode.New(nil))
		nodes, fs = append(nodes, f), append(fs, f)
	}
	// Node calls get 5 s: the gated release must still be waiting when
	// the test opens the gate, on a loaded machine too.
	rl, err := lockcore.New(nodes, &lockcore.Options{NodeTimeout: 5 * time.Second, MinTTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := rl.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	fs[1].SetDown(errOff)
	fs[2].SetDown(errOff)
	if _, err := rl.Acquire(context.Background(), lockcore.AcquireRequest{Resource: "undo-retry", TTL: 20 * time.Second}); err == nil {
		t.Fatal("granted with two of three nodes down")
	}
	gate := make(chan struct{})
	fs[1].SetGate(gate)
	fs[1].SetDown(nil)
	eventually(t, "a retried release waits at node 1's gate", func() bool { return goroutines.Count("", inRelease) >= 1 })
	closed := make(chan struct{})
	go func() {
		rl.Close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("Close returned while an undo retry's release was still held at the gate")
	case <-time.After(100 * time.Millisecond):
	}
	close(gate)
	<-closed
	if n := goroutines.Count("", inRetry); n > base {
		t.Errorf("%d undo retries after Close returned, %d before the test", n, base)
	}
}
