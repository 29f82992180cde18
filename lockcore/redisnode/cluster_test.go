package redisnode_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/nodetest"
	"github.com/lockgate/lockgate/lockcore/redisnode"
)

// connectCluster connects a ClusterNode to c, as it is, and closes it when
// t ends.
func connectCluster(t testing.TB, c *redistest.Cluster) *redisnode.ClusterNode {
	t.Helper()
	n, err := redisnode.NewCluster(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// newClusterNode is connectCluster, the node put in service (initialized
// when new).
func newClusterNode(t testing.TB, c *redistest.Cluster) *redisnode.ClusterNode {
	t.Helper()
	n := connectCluster(t, c)
	h, err := n.Check(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !h.Initialized {
		if err := nodetest.Initialize(context.Background(), n); err != nil {
			t.Fatal(err)
		}
	}
	if h, err := n.Check(context.Background()); err != nil || h.Lost || h.Quarantined || !h.Initialized {
		t.Fatalf("after initialization: %+v, %v", h, err)
	}
	return n
}

func TestClusterConformance(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	nodetest.Run(t, func(t *testing.T) lockcore.Node { return connectCluster(t, c) })
}

func TestClusterDataLoss(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	nodetest.RunDataLoss(t, func(t *testing.T) lockcore.Node { return connectCluster(t, c) },
		func(t *testing.T, n lockcore.Node) {
			err := n.(*redisnode.ClusterNode).Client().ForEachMaster(context.Background(),
				func(ctx context.Context, s *redis.Client) error { return s.FlushAll(ctx).Err() })
			if err != nil {
				t.Fatal(err)
			}
		})
}
