package redisnode_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
)

// primaryOpts are the options of a server that replicas attach to in a
// test, with args: it sends its data at once (repl-diskless-sync-delay
// 0; the default waits 5 s for more replicas).
func primaryOpts(args ...string) *redistest.Options {
	return &redistest.Options{Args: append([]string{"--repl-diskless-sync-delay", "0"}, args...)}
}

// attachReplica starts a server and makes it a replica of srv, and waits
// until it is in sync.
func attachReplica(t *testing.T, srv *redistest.Server) *redistest.Server {
	t.Helper()
	r := redistest.Start(t, nil)
	replicate(t, r, srv)
	waitInSync(t, r)
	return r
}

// replicate makes r a replica of srv.
func replicate(t *testing.T, r, srv *redistest.Server) {
	t.Helper()
	host, port, err := net.SplitHostPort(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Do("REPLICAOF", host, port); err != nil {
		t.Fatal(err)
	}
}

// waitInSync waits until the replica r is in sync with its primary.
func waitInSync(t *testing.T, r *redistest.Server) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); r.Info("master_link_status") != "up"; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("replica not in sync: %s", r.Info("master_link_status"))
		}
	}
}

// A primary in service keeps its data when a replica attaches to it for
// the first time, or when its replicas are gone for repl-backlog-ttl:
// neither is a failback, and neither loses a write, so the node stays in
// service. (Redis draws a new replication id for both: when it creates
// its backlog for the first replica, and when it frees it.)
func TestAHealthyPrimaryWhoseReplIDChangesServes(t *testing.T) {
	t.Run("a first replica attaches", func(t *testing.T) {
		srv := redistest.Start(t, primaryOpts())
		n := newNode(t, srv)
		wantServing(t, n, "check before")
		wantGranted(t, n, "before")
		id, repl := srv.Info("run_id"), srv.Info("master_replid")
		attachReplica(t, srv)
		t.Logf("run id %s -> %s, master_replid %s -> %s", id, srv.Info("run_id"), repl, srv.Info("master_replid"))
		wantServing(t, n, "check after a replica attached")
		wantGranted(t, n, "after")
	})
	t.Run("its replica is gone for repl-backlog-ttl", func(t *testing.T) {
		srv := redistest.Start(t, primaryOpts())
		r := attachReplica(t, srv)
		n := newNode(t, srv)
		wantServing(t, n, "check before")
		wantGranted(t, n, "before")
		freeBacklog(t, srv, r)
		wantServing(t, n, "check after the backlog was freed")
		wantGranted(t, n, "after")
	})
}

// Replicas attached to every primary of a Redlock in service (started
// after their primaries, or back after repl-backlog-ttl) lose no write:
// the lock service goes on granting. (Each primary draws a new
// replication id when the first replica's SYNC arrives: if that were a
// loss, every node would be lost at once, with no node in service to
// recover from, and nothing granted until the largest TTL has passed.)
func TestReplicasAttachedToEveryNodeKeepTheServiceUp(t *testing.T) {
	opts := primaryOpts()
	opts.AOF = true
	srvs := redistest.StartN(t, 3, opts)
	rl := recoverGateway(t, urlsOf(srvs), true, nil)
	cycle(t, rl, "before")
	replicas := redistest.StartN(t, len(srvs), nil)
	repls := make([]string, len(srvs))
	for i, s := range srvs {
		repls[i] = s.Info("master_replid")
		replicate(t, replicas[i], s) // within a check interval of each other
	}
	for i, s := range srvs {
		for deadline := time.Now().Add(5 * time.Second); s.Info("master_replid") == repls[i]; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no SYNC from the replica of node %d", i)
			}
		}
	}
	time.Sleep(10 * recoverOptions().CheckInterval) // every node checked since
	t.Logf("nodes: %+v", rl.NodeReports())
	for deadline := time.Now().Add(recoverTTL / 2); ; time.Sleep(20 * time.Millisecond) {
		l, err := rl.Acquire(context.Background(), lockcore.AcquireRequest{Resource: "after", TTL: time.Second})
		if err == nil {
			_ = rl.Release(context.Background(), lockcore.ReleaseRequest{Resource: "after", LeaseID: l.ID})
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing granted for %v after replicas attached: %v; nodes %+v", recoverTTL/2, err, rl.NodeReports())
		}
	}
}

// A Cluster shard's primary that frees its backlog (its replica gone for
// repl-backlog-ttl) draws a new replication id without a promotion: the
// node stays in service.
func TestClusterShardBacklogFreedIsNoLoss(t *testing.T) {
	c := redistest.StartCluster(t, 3, 1)
	n := newClusterNode(t, c)
	p, r := primaryWithReplica(t, c)
	freeBacklog(t, p, r)
	wantServing(t, n, "check after the backlog was freed")
}
