package lockcore_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/nodetest"
	"github.com/lockgate/lockgate/lockcore/redisnode"
)

// TestWaitingOnRedis runs the waiting suite again with every cluster node a
// real redis-server (through redisnode, so releases are announced by the
// release script's PUBLISH and heard over pub/sub), three nodes per cluster.
// Each cluster starts from empty servers, initialized as a new cluster's
// first gateway initializes them (zero counters), so that no test counts
// the guard's first pass: on empty servers it writes every slot's counter
// on every node (16384 scripts per node; 0.3 to 0.6 s under -race on a
// shared 2-core machine, more than a second under load), in the first
// request of each replica, and two replicas starting at once both do it.
// The Redlocks still wait on a fake clock; the servers expire locks in
// real time, which the tests that wait for an expiry let pass
// (waitCluster.pass).
func TestWaitingOnRedis(t *testing.T) {
	servers := redistest.StartN(t, 3, nil)
	redisNodes := backend{realTime: true, node: func(t testing.TB, i int, _ func() time.Time) lockcore.Node {
		n, err := redisnode.New(servers[i].URL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		if err := n.Client().FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		if err := nodetest.Initialize(context.Background(), n); err != nil {
			t.Fatal(err)
		}
		return n
	}}
	for _, tc := range waitingSuite {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, redisNodes) })
	}
}
