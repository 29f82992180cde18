package redisnode_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/internal/faultproxy"
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
	n := checked(t, connectCluster(t, c))
	if h, err := n.Check(context.Background()); err != nil || h.Lost || h.Quarantined || !h.Initialized {
		t.Fatalf("after initialization: %+v, %v", h, err)
	}
	return n
}

// checked puts n in service: a Check, and initialization when the Cluster
// holds no lockgate data yet.
func checked(t testing.TB, n *redisnode.ClusterNode) *redisnode.ClusterNode {
	t.Helper()
	h, err := n.Check(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !h.Initialized {
		if err := nodetest.Initialize(context.Background(), n); err != nil {
			t.Fatal(err)
		}
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

func TestClusterRWConformance(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	nodetest.RunRW(t, func(t *testing.T) lockcore.Node { return connectCluster(t, c) },
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
	wantStopped(t, n, req, "the promoted replica")
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

// A lock script whose reply is lost after it ran (its connection closed,
// as a network cut leaves it) is not sent again by a Cluster node: the
// call fails, unknown, and the shard ran the script once. go-redis's
// ClusterClient sends a command again after such an error unless the
// command says NoRetry; sent again, a first grant would have come back
// as a re-entry.
func TestClusterLostReplyIsNotSentAgain(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	proxies := map[*redistest.Server]*faultproxy.Proxy{}
	for _, p := range c.Primaries() {
		px, err := faultproxy.Start(p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { px.Close() })
		proxies[p] = px
		_, port, _ := net.SplitHostPort(px.Addr())
		_, own, _ := net.SplitHostPort(p.Addr())
		ownPort, _ := strconv.Atoi(own)
		for _, kv := range [][2]string{{"cluster-announce-bus-port", strconv.Itoa(ownPort + 10000)}, {"cluster-announce-port", port}} {
			if _, err := p.Do("CONFIG", "SET", kv[0], kv[1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Every node must route clients to the proxies before the node is
	// made (its URL names the proxies only).
	seeds := make([]string, 0, len(proxies))
	for _, px := range proxies {
		seeds = append(seeds, px.Addr())
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		out, err := c.Servers[0].Do("CLUSTER", "SLOTS")
		if err == nil && strings.Count(out, "\n") > 0 && allIn(out, seeds) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Cluster does not announce the proxies: %q, %v", out, err)
		}
	}
	n, err := redisnode.NewCluster("redis-cluster://" + seeds[0] + "?addr=" + seeds[1] + "&addr=" + seeds[2])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	ctx := context.Background()
	if err := nodetest.Initialize(ctx, n); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Check(ctx); err != nil {
		t.Fatal(err)
	}
	const r = "lost-reply"
	warm := lockcore.NodeAcquire{Resource: r, Lease: lockcore.NewLeaseID(), TTL: time.Minute}
	if _, err := n.Acquire(ctx, warm); err != nil { // loads the script on the shard
		t.Fatal(err)
	}
	if _, err := n.Release(ctx, r, warm.Lease, 0); err != nil {
		t.Fatal(err)
	}
	owner := c.OwnerOf(lockcore.FenceSlot(r))
	before := evalshaCalls(t, owner)
	proxies[owner].DropNextReply()
	req := lockcore.NodeAcquire{Resource: r, Lease: lockcore.NewLeaseID(), TTL: time.Minute}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	got, err := n.Acquire(cctx, req)
	cancel()
	if err == nil {
		t.Fatalf("Acquire whose reply was lost answered %+v: the script was sent again", got)
	}
	if calls := evalshaCalls(t, owner) - before; calls != 1 {
		t.Fatalf("the shard ran %d scripts for one Acquire whose reply was lost, want 1", calls)
	}
	if lease, _ := owner.Do("HGET", "lockgate:{"+r+"}:lock", "lease"); strings.TrimSpace(lease) != req.Lease {
		t.Fatalf("the lock is held by %q, want the lost reply's lease: its script ran", lease)
	}
	t.Logf("lost reply: %v; the shard ran the script once", err)
}

// allIn reports whether every address in addrs appears in the CLUSTER
// SLOTS reply out (host and port on separate lines).
func allIn(out string, addrs []string) bool {
	for _, a := range addrs {
		_, port, _ := net.SplitHostPort(a)
		if !strings.Contains(out, "\n"+port+"\n") {
			return false
		}
	}
	return true
}

// evalshaCalls reads how many EVALSHA calls s has run.
func evalshaCalls(t *testing.T, s *redistest.Server) int {
	t.Helper()
	v := s.Info("cmdstat_evalsha") // calls=N,usec=...
	calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
	n, err := strconv.Atoi(calls)
	if err != nil {
		t.Fatalf("cmdstat_evalsha %q: %v", v, err)
	}
	return n
}

// A Cluster node one of whose shards may evict keys refuses to serve, and
// loses its record, so that once the policy is fixed it recovers before
// it serves again: the shard may have evicted locks.
func TestClusterNodeWithAnEvictingShardRefuses(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	n := newClusterNode(t, c)
	ctx := context.Background()
	shard := c.Primaries()[1]
	if _, err := shard.Do("CONFIG", "SET", "maxmemory-policy", "allkeys-lru"); err != nil {
		t.Fatal(err)
	}
	h, err := n.Check(ctx)
	if err != nil || !strings.Contains(h.Refusing, "evicts keys") {
		t.Fatalf("Check with an evicting shard: %+v, %v; want refusing", h, err)
	}
	var re *redisnode.RefusingError
	if _, err := n.Acquire(ctx, lockcore.NodeAcquire{Resource: "evict", Lease: lockcore.NewLeaseID(), TTL: time.Minute}); !errors.As(err, &re) {
		t.Fatalf("Acquire while a shard evicts: %v, want a RefusingError", err)
	}
	if _, err := shard.Do("CONFIG", "SET", "maxmemory-policy", "noeviction"); err != nil {
		t.Fatal(err)
	}
	if h, err := n.Check(ctx); err != nil || !h.Lost {
		t.Fatalf("Check once the policy is fixed: %+v, %v; want lost (no recovery record)", h, err)
	}
}

// A shard's replica that missed the primary's last writes and is then
// promoted holds an older copy of the slot: its counter is behind and a
// lock granted since is not there. The Cluster node must not serve it:
// the next Acquire fails with ErrQuarantined (the connection to the new
// primary finds a process no check named) and Check finds the node lost.
// Served, the node would grant the resource again with a token that was
// already handed out.
func TestClusterLaggingReplicaIsNotServed(t *testing.T) {
	c := redistest.StartCluster(t, 3, 1)
	n := newClusterNode(t, c)
	ctx := context.Background()
	const r = "lagging"
	p := c.OwnerOf(lockcore.FenceSlot(r))
	rep := c.ReplicaOf(p)
	grant := func() lockcore.NodeReply {
		t.Helper()
		lease := lockcore.NewLeaseID()
		g, err := n.Acquire(ctx, lockcore.NodeAcquire{Resource: r, Lease: lease, TTL: time.Minute})
		if err != nil || g.Status != lockcore.StatusGranted {
			t.Fatalf("Acquire: %+v, %v", g, err)
		}
		if _, err := n.Release(ctx, r, lease, 0); err != nil {
			t.Fatal(err)
		}
		return g
	}
	grant()
	if _, err := p.Do("WAIT", "1", "5000"); err != nil { // the replica has the first grant
		t.Fatal(err)
	}
	// The replica stops reading, then its link is cut: whatever the
	// primary writes next never reaches it.
	rep.Pause()
	if _, err := p.Do("CLIENT", "KILL", "TYPE", "replica"); err != nil {
		rep.Resume()
		t.Fatal(err)
	}
	var last int64
	for range 3 {
		last = grant().Token
	}
	p.Kill()
	rep.Resume()
	c.KillAndPromote(p, rep)
	counter, err := rep.Do("HGET", slotKey(lockcore.FenceSlot(r)), "n")
	if err != nil {
		t.Fatal(err)
	}
	behind, _ := strconv.ParseInt(strings.TrimSpace(counter), 10, 64)
	t.Logf("the promoted replica's counter is %d; the primary had handed out %d", behind, last)
	if behind >= last {
		t.Fatalf("the promoted replica's counter %d is not behind the primary's %d: the test proves nothing", behind, last)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		g, err := n.Acquire(ctx, lockcore.NodeAcquire{Resource: r, Lease: lockcore.NewLeaseID(), TTL: time.Minute})
		if err == nil {
			t.Fatalf("the lagging replica served: %+v (the primary had handed out token %d)", g, last)
		}
		if errors.Is(err, lockcore.ErrQuarantined) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Acquire after the failover: %v, want ErrQuarantined", err)
		}
	}
	h := checkWithin(t, n, func(h lockcore.NodeHealth) bool { return h.Lost })
	t.Logf("Check: %s", h.Reason)
}
