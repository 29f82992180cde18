package redisnode_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

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

// A shard's failover inside a Cluster node is a new primary process: the
// node is lost (its record names the old set of primaries) and refuses
// every lock until it is quarantined and repaired. A reshard between the
// same primaries is not a loss.
func TestClusterShardFailoverIsALoss(t *testing.T) {
	c := redistest.StartCluster(t, 3, 1)
	n := newClusterNode(t, c)
	ctx := context.Background()
	req := lockcore.NodeAcquire{Resource: "failover", Lease: lockcore.NewLeaseID(), TTL: time.Minute}
	if r, err := n.Acquire(ctx, req); err != nil || r.Status != lockcore.StatusGranted {
		t.Fatalf("Acquire: %+v, %v", r, err)
	}

	slot := lockcore.FenceSlot("failover")
	src := c.OwnerOf(slot)
	var dst *redistest.Server
	for _, p := range c.Primaries() {
		if p != src {
			dst = p
			break
		}
	}
	if err := c.MoveSlot(slot, src, dst, 0); err != nil {
		t.Fatal(err)
	}
	c.WaitStable()
	if h, err := n.Check(ctx); err != nil || h.Lost || h.Quarantined {
		t.Fatalf("after a reshard: %+v, %v; want in service", h, err)
	}
	if l, err := n.Inspect(ctx, "failover"); err != nil || !l.Found || l.Lease != req.Lease {
		t.Fatalf("the lock after its slot moved: %+v, %v", l, err)
	}

	c.KillAndPromote(dst, c.ReplicaOf(dst))
	// Before any Check: the connection to the promoted replica finds a
	// process the last Check did not, and the node stops serving at once.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		r, err := n.Acquire(ctx, req)
		if err == nil {
			t.Fatalf("the promoted replica served before any check: %+v", r)
		}
		if errors.Is(err, lockcore.ErrQuarantined) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Acquire after the failover: %v, want ErrQuarantined", err)
		}
	}
	h := checkWithin(t, n, func(h lockcore.NodeHealth) bool { return h.Lost })
	t.Logf("after the failover: %s", h.Reason)
	if !h.Initialized {
		t.Fatalf("after the failover: %+v; want the record found, naming other primaries", h)
	}
	if _, err := n.Acquire(ctx, lockcore.NodeAcquire{Resource: "other", Lease: lockcore.NewLeaseID(), TTL: time.Minute}); !errors.Is(err, lockcore.ErrQuarantined) {
		t.Fatalf("Acquire on a lost node: %v, want ErrQuarantined", err)
	}
	if err := n.Quarantine(ctx); err != nil {
		t.Fatal(err)
	}
	if h := checkWithin(t, n, func(h lockcore.NodeHealth) bool { return h.Quarantined }); h.Lost {
		t.Fatalf("after Quarantine: %+v", h)
	}
	floor := make([]int64, lockcore.FenceSlots)
	floor[slot] = 1000
	if err := nodetest.RepairNow(ctx, n, floor); err != nil {
		t.Fatal(err)
	}
	if h, err := n.Check(ctx); err != nil || h.Lost || h.Quarantined {
		t.Fatalf("after Repair: %+v, %v", h, err)
	}
	r, err := n.Acquire(ctx, lockcore.NodeAcquire{Resource: "failover", Lease: lockcore.NewLeaseID(), TTL: time.Minute})
	if err != nil || r.Status == lockcore.StatusGranted && r.Token <= 1000 {
		t.Fatalf("Acquire after the repair: %+v, %v; want a token above the floor 1000", r, err)
	}
}

// checkWithin checks n until ok holds (a Cluster's view of a failover
// takes a moment to reach every node), failing t after 10 s.
func checkWithin(t *testing.T, n lockcore.Node, ok func(lockcore.NodeHealth) bool) lockcore.NodeHealth {
	t.Helper()
	var h lockcore.NodeHealth
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if h, err = n.Check(context.Background()); err == nil && ok(h) {
			return h
		}
	}
	t.Fatalf("Check never found what was expected: last %+v, %v", h, err)
	return h
}

// Locks and counters spread evenly over a Cluster node's shards: 3,000
// locks on a 3-shard Cluster leave each shard within 10% of a third of
// them, and each shard holds the counters of the slots it serves.
func TestClusterKeysSpreadEvenly(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	n := newClusterNode(t, c)
	ctx := context.Background()
	const locks = 3000
	for i := range locks {
		r := fmt.Sprintf("spread-%d", i)
		if _, err := n.Acquire(ctx, lockcore.NodeAcquire{Resource: r, Lease: lockcore.NewLeaseID(), TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range c.Primaries() {
		count := func(pattern string) int {
			total, cursor := 0, "0"
			for {
				out, err := p.Do("SCAN", cursor, "MATCH", pattern, "COUNT", "1000")
				if err != nil {
					t.Fatal(err)
				}
				lines := strings.Split(strings.TrimSpace(out), "\n")
				cursor, total = lines[0], total+len(lines)-1
				if cursor == "0" {
					return total
				}
			}
		}
		l, k := count("lockgate:{spread-*}:lock"), count("lockgate:{*}:tokens")
		t.Logf("shard %s: %d locks (%.1f%%), %d counters", p.Addr(), l, 100*float64(l)/locks, k)
		if l < locks/3*9/10 || l > locks/3*11/10 {
			t.Errorf("shard %s holds %d of %d locks, not within 10%% of a third", p.Addr(), l, locks)
		}
		if k < lockcore.FenceSlots/3-1 || k > lockcore.FenceSlots/3+1 {
			t.Errorf("shard %s holds %d counters, want a third of %d", p.Addr(), k, lockcore.FenceSlots)
		}
	}
}
