package redisnode_test

import (
	"context"

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

// TestOverlappingSetsUnderLoadOverRedisNodes is lockcore's soak of lock
// sets (16 clients, random sets of 2 to 8 of 20 names, with waits) over
// three single Redis nodes: 5 s, or LOCKGATE_SET_SOAK.
func TestOverlappingSetsUnderLoadOverRedisNodes(t *testing.T) {
	d := nodetest.SoakFor(t)
	srvs := redistest.StartN(t, 3, nil)
	nodes := make([]lockcore.Node, len(srvs))
	for i, s := range srvs {
		nodes[i] = newNode(t, s)
	}
	rl, err := lockcore.New(nodes, nodetest.SetOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rl.Close)
	nodetest.SoakSets(t, rl, func(ctx context.Context, rl *lockcore.Redlock, req lockcore.SetAcquireRequest) (*lockcore.SetLease, error) {
		return rl.AcquireSet(ctx, req)
	}, d)
}
