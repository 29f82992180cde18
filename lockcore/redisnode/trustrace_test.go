package redisnode_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/faultproxy"
	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/nodetest"
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

// A Check whose probe went over a pooled connection to the process it
// judged, after a newer connection found another process behind the
// address (a load balancer draining the old server), does not trust the
// node: lock traffic may go over the newer connection, to a process no
// Check judged. The probe's read of its own process is not what the newest
// connection reaches (see observed).
func TestACheckOverAnOlderConnectionDoesNotTrustTheNewest(t *testing.T) {
	ctx := context.Background()
	p, q := redistest.Start(t, nil), redistest.Start(t, nil)
	newNode(t, q) // another node's data, in service for its own process
	px, err := faultproxy.Start(p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	n := connectURL(t, "redis://"+px.Addr())
	if h, err := n.Check(ctx); err != nil || h.Initialized {
		t.Fatalf("first check of a new node: %+v, %v", h, err)
	}
	if err := nodetest.Initialize(ctx, n); err != nil {
		t.Fatal(err)
	}
	wantServing(t, n, "check through the proxy")
	wantGranted(t, n, "before")
	old := n.Client().Conn() // holds a pooled connection to p
	defer old.Close()
	if err := old.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	px.Redirect(q.Addr())
	if err := n.Client().Ping(ctx).Err(); err != nil { // a new connection: to q
		t.Fatal(err)
	}
	if err := old.Close(); err != nil { // back to the pool, taken first
		t.Fatal(err)
	}
	wantServing(t, n, "check over the connection to p")
	_, err = n.Acquire(ctx, lockcore.NodeAcquire{Resource: "after", Lease: lockcore.NewLeaseID(), TTL: time.Second})
	if !errors.Is(err, lockcore.ErrQuarantined) {
		t.Fatalf("acquire while the newest connection reaches a process no Check judged: %v; want ErrQuarantined", err)
	}
}
