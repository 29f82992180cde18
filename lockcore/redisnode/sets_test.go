package redisnode_test

import (
	"testing"

	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/nodetest"
)

// Lock sets over three single Redis nodes: the suite the in-memory nodes
// pass (rules S1 to S8 of lockcore's doc).
func TestLockSetsOverRedisNodes(t *testing.T) {
	srvs := redistest.StartN(t, 3, nil)
	nodetest.RunSets(t, func(t *testing.T) []lockcore.Node {
		nodes := make([]lockcore.Node, len(srvs))
		for i, s := range srvs {
			nodes[i] = newNode(t, s)
		}
		return nodes
	})
}

// Lock sets over a Redis Cluster node of three shards: a set's members
// hash to slots of different shards, so no one script could take them;
// each member is its own Redlock round (rule S1) and the suite holds as
// over single nodes.
func TestLockSetsOverAClusterNode(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	// The suite's sets name members that differ in their last letter,
	// which moves their slot: they lie on more than one shard.
	shards := map[string]bool{}
	for _, m := range []string{"setabc.1-a", "setabc.1-b", "setabc.1-c", "setabc.1-d", "setabc.1-e"} {
		shards[c.OwnerOf(lockcore.FenceSlot(m)).Addr()] = true
	}
	if len(shards) < 2 {
		t.Fatalf("five members on %d shard", len(shards))
	}
	nodetest.RunSets(t, func(t *testing.T) []lockcore.Node { return []lockcore.Node{newClusterNode(t, c)} })
}
