package lockcore_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/redisnode"
)

// TestWaitingOnRedis runs the waiting suite again with every cluster node a
// real redis-server (through redisnode, so releases are announced by the
// release script's PUBLISH and heard over pub/sub), three nodes per cluster.
// Each cluster starts from empty servers. The Redlocks still wait on a fake
// clock; the servers expire locks in real time, which the tests that wait
// for an expiry let pass (waitCluster.pass).
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
		return n
	}}
	for _, tc := range waitingSuite {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, redisNodes) })
	}
}
