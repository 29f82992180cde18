package redisnode_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/nodetest"
	"github.com/lockgate/lockgate/lockcore/redisnode"
)

// failBack makes srv a replica of a primary it cannot reach and then a
// primary again: the same server process (run id) with the data it had,
// and a new replication id. That is a primary failed over and back whose
// replica's writes never came back to it (an automatic failback before it
// caught up, or a Sentinel that promoted it again once the other died).
func failBack(t *testing.T, srv *redistest.Server) { failBackWith(t, srv, nil) }

// failBackWith is failBack, running between (when not nil) while srv is a
// replica.
func failBackWith(t *testing.T, srv *redistest.Server, between func()) {
	t.Helper()
	host, port, err := net.SplitHostPort(redistest.Unreachable(t)) // held by the test: no server takes it
	if err != nil {
		t.Fatal(err)
	}
	runID, replID := srv.Info("run_id"), srv.Info("master_replid")
	if _, err := srv.Do("REPLICAOF", host, port); err != nil {
		t.Fatal(err)
	}
	if between != nil {
		between()
	}
	if _, err := srv.Do("REPLICAOF", "NO", "ONE"); err != nil {
		t.Fatal(err)
	}
	if srv.Info("run_id") != runID || srv.Info("master_replid") == replID || srv.Info("role") != "master" {
		t.Fatalf("after the failback: run id %s (was %s), replication id %s (was %s), role %s; want the same process, a new replication id, a primary",
			srv.Info("run_id"), runID, srv.Info("master_replid"), replID, srv.Info("role"))
	}
}

// rrepl reads the node record's replication history (see check.lua).
func rrepl(t *testing.T, n *redisnode.Node) string {
	t.Helper()
	v, err := n.Client().HGet(context.Background(), "lockgate:{meta}:node", "rrepl").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	return v
}

// A primary that was a replica since its data was last recovered, and is
// a primary again, is the process the record names, with another
// replication history: it may lack what the other primary took meanwhile,
// so the node is lost until it recovers from the other nodes, however the
// gateway finds it (a Check, or a new connection before any Check), and
// also when a gateway from before the record kept replication histories
// last recovered it.
func TestAFailbackIsALoss(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		// before runs on the node in service, before the failback.
		before func(t *testing.T, srv *redistest.Server, n *redisnode.Node)
		// find is how the gateway finds the failback: it returns the
		// health found.
		find func(t *testing.T, srv *redistest.Server, n *redisnode.Node) lockcore.NodeHealth
	}{
		{"found by a Check", nil, checkLost},
		{"found by a new connection before a Check", nil, func(t *testing.T, srv *redistest.Server, n *redisnode.Node) lockcore.NodeHealth {
			if _, err := srv.Do("CLIENT", "KILL", "TYPE", "normal"); err != nil {
				t.Fatal(err)
			}
			wantStopped(t, n, lockcore.NodeAcquire{Resource: "failback", Lease: lockcore.NewLeaseID(), TTL: time.Minute}, "the failed-back primary")
			return checkLost(t, srv, n)
		}},
		{"recovered last by a gateway that kept no replication history", func(t *testing.T, srv *redistest.Server, n *redisnode.Node) {
			if err := n.Client().HDel(ctx, "lockgate:{meta}:node", "rrepl").Err(); err != nil {
				t.Fatal(err)
			}
			wantServing(t, n, "check of the record without rrepl")
			want := srv.Info("run_id") + "|" // never promoted: no replication id named (processOf)
			if strings.Trim(srv.Info("master_replid2"), "0") != "" {
				want += srv.Info("master_replid")
			}
			if got := rrepl(t, n); got != want {
				t.Fatalf("rrepl after the check: %q, want the process's %q taken in", got, want)
			}
		}, checkLost},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := redistest.Start(t, primaryOpts())
			n := newNode(t, srv)
			wantServing(t, n, "check before the failback")
			wantGranted(t, n, "before")
			if c.before != nil {
				c.before(t, srv, n)
			}
			failBack(t, srv)
			h := c.find(t, srv, n)
			t.Logf("after the failback: %s", h.Reason)
			if !strings.Contains(h.Reason, "failback") {
				t.Fatalf("Reason %q, want the failback named", h.Reason)
			}
			// It recovers as any lost node does, for the process's new
			// replication history, and then serves.
			if err := n.Quarantine(ctx); err != nil {
				t.Fatal(err)
			}
			if got := rrepl(t, n); got != "" {
				t.Fatalf("rrepl %q after Quarantine, want none", got)
			}
			if err := nodetest.RepairNow(ctx, n, make([]int64, lockcore.FenceSlots)); err != nil {
				t.Fatal(err)
			}
			wantServing(t, n, "check after the recovery")
			wantGranted(t, n, "after")
			// A replica's first SYNC then draws a new replication id
			// with no promotion: no loss, though the record names the
			// history the promotion drew.
			attachReplica(t, srv)
			wantNoPromotion(t, srv)
			wantServing(t, n, "check after a replica attached")
		})
	}
}

// wantNoPromotion fails t unless srv's replication id shows no promotion
// since it made or freed its backlog (master_replid2 all zeros).
func wantNoPromotion(t *testing.T, srv *redistest.Server) {
	t.Helper()
	if r2 := srv.Info("master_replid2"); strings.Trim(r2, "0") != "" {
		t.Fatalf("master_replid2 %q: the backlog change did not clear it", r2)
	}
}

// wantStopped acquires req on n until it fails with ErrQuarantined, for
// up to 10 s (earlier calls may fail on connections the server closed):
// a new connection found what the last Check did not, and the node stops
// serving before any Check. A grant fails t: what (the process behind the
// node) served before any check judged it.
func wantStopped(t *testing.T, n lockcore.Node, req lockcore.NodeAcquire, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		r, err := n.Acquire(context.Background(), req)
		if err == nil {
			t.Fatalf("%s served before any check: %+v", what, r)
		}
		if errors.Is(err, lockcore.ErrQuarantined) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Acquire on %s: %v, want ErrQuarantined", what, err)
		}
	}
}

// A lock script that meets the node's process as a replica (READONLY)
// stops the node until a Check: once the process is promoted again, over
// the connections already open (no onConnect sees it), nothing is served
// before a Check finds the failback. (go-redis closes the connection that
// got READONLY; the pool's other connections stay open.)
func TestLockTrafficOnAReplicaStopsTheNodeUntilACheck(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t, primaryOpts())
	n := newNode(t, srv)
	wantServing(t, n, "check before")
	wantGranted(t, n, "before")
	idle := make([]*redis.Conn, 4) // the pool keeps 4 connections more
	for i := range idle {
		idle[i] = n.Client().Conn()
		if err := idle[i].Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range idle {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	req := lockcore.NodeAcquire{Resource: "during", Lease: lockcore.NewLeaseID(), TTL: time.Minute}
	failBackWith(t, srv, func() {
		if r, err := n.Acquire(ctx, req); err == nil {
			t.Fatalf("granted by a replica: %+v", r)
		}
	})
	if r, err := n.Acquire(ctx, req); !errors.Is(err, lockcore.ErrQuarantined) {
		t.Fatalf("Acquire on the failed-back process before a check: %+v, %v; want ErrQuarantined", r, err)
	}
	checkLost(t, srv, n)
}

// wantServing runs a Check (what names it) and wants the node in service.
func wantServing(t *testing.T, n lockcore.Node, what string) {
	t.Helper()
	if h, err := n.Check(context.Background()); err != nil || h.Lost || h.Quarantined || !h.Initialized {
		t.Fatalf("%s: %+v, %v; want in service", what, h, err)
	}
}

// freeBacklog has primary free its replication backlog: its replica is
// killed, and with repl-backlog-ttl 1 the primary frees the backlog a
// second later, drawing a new replication id with no promotion (waited
// for, up to 10 s, and checked: master_replid2 all zeros).
func freeBacklog(t *testing.T, primary, replica *redistest.Server) {
	t.Helper()
	if _, err := primary.Do("CONFIG", "SET", "repl-backlog-ttl", "1"); err != nil {
		t.Fatal(err)
	}
	repl := primary.Info("master_replid")
	replica.Kill()
	for deadline := time.Now().Add(10 * time.Second); primary.Info("master_replid") == repl; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the primary kept its replication id")
		}
	}
	t.Logf("master_replid %s -> %s", repl, primary.Info("master_replid"))
	wantNoPromotion(t, primary)
	// Back to the setting a node needs to serve (see settingsRefusal).
	if _, err := primary.Do("CONFIG", "SET", "repl-backlog-ttl", "0"); err != nil {
		t.Fatal(err)
	}
}

// checkLost runs a Check and wants the node lost.
func checkLost(t *testing.T, _ *redistest.Server, n *redisnode.Node) lockcore.NodeHealth {
	t.Helper()
	h, err := n.Check(context.Background())
	if err != nil || !h.Lost || !h.Initialized {
		t.Fatalf("check after the failback: %+v, %v; want lost", h, err)
	}
	return h
}

// wantGranted acquires resource on n for a new lease, and wants it granted.
func wantGranted(t *testing.T, n lockcore.Node, resource string) {
	t.Helper()
	r, err := n.Acquire(context.Background(), lockcore.NodeAcquire{Resource: resource, Lease: lockcore.NewLeaseID(), TTL: time.Minute})
	if err != nil || r.Status != lockcore.StatusGranted {
		t.Fatalf("Acquire %s: %+v, %v; want granted", resource, r, err)
	}
}

// A Cluster shard failed over and back between two Checks has the
// primaries the record names, by run id, but one with another replication
// history: the node is lost until it recovers, as for any shard failover.
// (A manual failover, as here, loses nothing; an automatic one may, and
// the node cannot tell them apart.)
func TestClusterShardFailbackIsALoss(t *testing.T) {
	c := redistest.StartCluster(t, 3, 1)
	n := newClusterNode(t, c)
	p, r := primaryWithReplica(t, c)
	runIDs := func() string {
		ids := []string{}
		for _, s := range c.Primaries() {
			ids = append(ids, s.Info("run_id"))
		}
		slices.Sort(ids)
		return strings.Join(ids, ",")
	}
	before := runIDs()
	promote(t, c, r)
	promote(t, c, p)
	if after := runIDs(); after != before {
		t.Fatalf("primaries after the failback: %s, want the same processes as before: %s", after, before)
	}
	h := checkWithin(t, n, func(lockcore.NodeHealth) bool { return true })
	t.Logf("after the failback: %s", h.Reason)
	if !h.Lost || !h.Initialized {
		t.Fatalf("check after the failback: %+v; want lost", h)
	}
	ctx := context.Background()
	if err := n.Quarantine(ctx); err != nil {
		t.Fatal(err)
	}
	if err := nodetest.RepairNow(ctx, n, make([]int64, lockcore.FenceSlots)); err != nil {
		t.Fatal(err)
	}
	wantServing(t, n, "check after the recovery")
	// The promoted primary's replica then stays away for repl-backlog-ttl:
	// it frees its backlog and draws a new replication id with no
	// promotion. No loss, though the record names the promotion's.
	freeBacklog(t, p, c.ReplicaOf(p))
	wantServing(t, n, "check after the backlog was freed")
}

// primaryWithReplica is c's first primary and a running replica of it.
func primaryWithReplica(t *testing.T, c *redistest.Cluster) (p, r *redistest.Server) {
	t.Helper()
	p = c.Primaries()[0]
	if r = c.ReplicaOf(p); r == nil {
		t.Fatalf("no replica of %s", p.Addr())
	}
	return p, r
}

// promote makes replica r its shard's primary by a manual failover
// (CLUSTER FAILOVER: it waits for r to catch up) and waits until the
// Cluster is stable and the demoted primary replicates from r. A primary
// votes for one failover of a shard per twice cluster-node-timeout, so a
// failback right after a failover is refused at first: the request is
// sent again until r is promoted, for up to 30 s.
func promote(t *testing.T, c *redistest.Cluster, r *redistest.Server) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for r.Info("role") != "master" {
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(r.Dir(), "redis.log"))
			t.Fatalf("%s not promoted after 30s; its log:\n%s", r.Addr(), log[max(0, len(log)-3000):])
		}
		if _, err := r.Do("CLUSTER", "FAILOVER"); err != nil {
			t.Fatal(err)
		}
		// A manual failover ends within 5 s (promoted, or timed out).
		for wait := time.Now().Add(6 * time.Second); r.Info("role") != "master" && time.Now().Before(wait); {
			time.Sleep(20 * time.Millisecond)
		}
	}
	c.WaitStable()
	for old := c.ReplicaOf(r); old == nil || old.Info("master_link_status") != "up"; old = c.ReplicaOf(r) {
		if time.Now().After(deadline) {
			t.Fatalf("no replica of %s in sync after 30s", r.Addr())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
