package lockcore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/nodetest"
	"github.com/lockgate/lockgate/lockcore/redisnode"
)

// TestWaitingOnRedisClusters runs the waiting suite with every node a
// Redis Cluster of three shards (redisnode.ClusterNode): releases are
// published on one shard and heard over a pub/sub connection to another,
// which the Cluster's bus forwards. Each node starts from empty shards,
// initialized as in TestWaitingOnRedis.
func TestWaitingOnRedisClusters(t *testing.T) {
	clusters := []*redistest.Cluster{redistest.StartCluster(t, 3, 0), redistest.StartCluster(t, 3, 0), redistest.StartCluster(t, 3, 0)}
	clusterNodes := backend{realTime: true, node: func(t testing.TB, i int, _ func() time.Time) lockcore.Node {
		n, err := redisnode.NewCluster(clusters[i].URL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		// A busy machine can leave a shard unheard on the Cluster's bus
		// for a moment (CLUSTERDOWN until the bus hears it again).
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			err = n.Client().ForEachMaster(context.Background(), func(ctx context.Context, s *redis.Client) error {
				return s.FlushAll(ctx).Err()
			})
			if err == nil || !strings.Contains(err.Error(), "CLUSTERDOWN") || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := nodetest.Initialize(context.Background(), n); err != nil {
			t.Fatal(err)
		}
		return n
	}}
	for _, tc := range waitingSuite {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, clusterNodes) })
	}
}
