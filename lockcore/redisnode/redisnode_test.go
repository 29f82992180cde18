package redisnode_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/nodetest"
	"github.com/lockgate/lockgate/lockcore/redisnode"
)

// newNode connects a Node to srv and closes it when t ends.
func newNode(t testing.TB, srv *redistest.Server) *redisnode.Node {
	t.Helper()
	n, err := redisnode.New(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

func TestConformance(t *testing.T) {
	srv := redistest.Start(t, nil)
	nodetest.Run(t, func(t *testing.T) lockcore.Node { return newNode(t, srv) })
}

// A node whose server is gone (its host still up) refuses connections: that
// is an answer, and it must come at once, not after a retry back-off, or a
// dead minority node would slow every acquisition down (it did: 10 to 30 ms
// per call, go-redis's default back-off before its one retry). The fastest of
// a few calls must stay under 8 ms, below the back-off's least 10 ms, which
// a loaded machine is unlikely to reach for five calls in a row.
func TestADeadNodeAnswersAtOnce(t *testing.T) {
	srv := redistest.Start(t, nil)
	n := newNode(t, srv)
	ctx := context.Background()
	req := lockcore.NodeAcquire{Resource: "dead", Lease: lockcore.NewLeaseID(), TTL: time.Second}
	if _, err := n.Acquire(ctx, req); err != nil { // leaves a pooled connection behind
		t.Fatal(err)
	}
	srv.Kill()
	fastest := time.Hour
	for range 5 {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		start := time.Now()
		_, err := n.Acquire(cctx, req)
		d := time.Since(start)
		cancel()
		if err == nil {
			t.Fatal("acquire on a killed server succeeded")
		}
		fastest = min(fastest, d)
	}
	if fastest >= 8*time.Millisecond {
		t.Fatalf("the fastest of 5 calls to a killed server took %v; a refused connection should fail at once", fastest)
	}
}
