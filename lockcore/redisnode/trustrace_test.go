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
// (a restart, or a Sentinel failover to a replica behind the same name),
// or fails over and back (the same process with another replication
// history), and lock traffic opens a connection to what is there now. The
// verdict is about the process probed, not the one the connections now
// reach: the node must stay out of service until a Check probes that one.
// Trusting it let a promoted replica grant a lock it had never recovered
// for.
func TestACheckDoesNotTrustAProcessItDidNotProbe(t *testing.T) {
	cases := []struct {
		name   string
		change func(t *testing.T, srv *redistest.Server)
	}{
		{"a new process", func(_ *testing.T, srv *redistest.Server) { srv.Restart() }},
		{"a failback", func(t *testing.T, srv *redistest.Server) {
			failBack(t, srv)
			if _, err := srv.Do("CLIENT", "KILL", "TYPE", "normal"); err != nil {
				t.Error(err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
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
				c.change(t, srv)
				if !poll(10*time.Second, func() bool { return n.Client().Ping(ctx).Err() == nil }) {
					t.Error("no connection to the server after the change")
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
				t.Fatalf("the next Check: %+v, %v; want the process found lost", h, err)
			}
		})
	}
}
