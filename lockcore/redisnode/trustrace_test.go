package redisnode_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
)

// TestACheckDoesNotTrustAProcessItDidNotProbe: a Check probes the node's
// server process; before it records its verdict, the process is replaced
// (a restart, or a Sentinel failover to a replica behind the same name)
// and lock traffic opens a connection to the new one. The verdict is about
// the process probed, not the one the connections now reach: the node
// must stay out of service until a Check probes the new process. Trusting
// it let a promoted replica grant a lock it had never recovered for.
func TestACheckDoesNotTrustAProcessItDidNotProbe(t *testing.T) {
	srv := redistest.Start(t, &redistest.Options{AOF: true})
	n := newNode(t, srv)
	rl, err := lockcore.New([]lockcore.Node{n}, &lockcore.Options{NodeTimeout: itNodeTimeout, MinTTL: itMinTTL, CheckInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := rl.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	rl.Close() // no guard's Check from here on: only the test's
	if _, err := n.Acquire(ctx, lockcore.NodeAcquire{Resource: "before", Lease: "l0", TTL: time.Second}); err != nil {
		t.Fatal("in service before the test:", err)
	}
	n.SetAfterProbe(func() {
		n.SetAfterProbe(nil)
		srv.Restart() // a new server process on the address
		if !poll(10*time.Second, func() bool { return n.Client().Ping(ctx).Err() == nil }) {
			t.Error("no connection to the restarted server")
		}
	})
	if _, err := n.Check(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = n.Acquire(ctx, lockcore.NodeAcquire{Resource: "after", Lease: "l1", TTL: time.Second})
	if !errors.Is(err, lockcore.ErrQuarantined) {
		t.Fatalf("acquire on a process no Check probed: %v; want ErrQuarantined", err)
	}
	h, err := n.Check(ctx)
	if err != nil || !h.Lost {
		t.Fatalf("the next Check: %+v, %v; want the new process found lost", h, err)
	}
}
