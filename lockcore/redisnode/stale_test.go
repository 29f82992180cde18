package redisnode_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/nodetest"
	"github.com/lockgate/lockgate/lockcore/redisnode"
)

// epochRead picks a Repair's first command: repairEpoch's HMGET of the meta hash.
func epochRead(cmds []redis.Cmder) bool {
	if len(cmds) != 1 || cmds[0].Name() != "hmget" {
		return false
	}
	a := cmds[0].Args()
	return len(a) > 1 && a[1] == metaKey
}

// cutOff is a node whose lock calls fail while cut is set (the gateway's
// link to it is down).
type cutOff struct {
	*redisnode.Node
	cut *atomic.Bool
}

var errCut = errors.New("link down")

func (c cutOff) Acquire(ctx context.Context, req lockcore.NodeAcquire) (lockcore.NodeReply, error) {
	if c.cut.Load() {
		return lockcore.NodeReply{}, errCut
	}
	return c.Node.Acquire(ctx, req)
}

func (c cutOff) RaiseFence(ctx context.Context, resource, lease string, token int64) error {
	if c.cut.Load() {
		return errCut
	}
	return c.Node.RaiseFence(ctx, resource, lease, token)
}

// gatewayCutOff is a gateway whose link to node 1 is down while cut is set.
func gatewayCutOff(t *testing.T, srvs []*redistest.Server, opts *lockcore.Options, cut *atomic.Bool) *lockcore.Redlock {
	return gatewayWith(t, srvs, opts, cutNode1(cut))
}

// cutNode1 wraps node 1 so that its lock calls fail while cut is set.
func cutNode1(cut *atomic.Bool) func(int, *redisnode.Node) lockcore.Node {
	return func(i int, n *redisnode.Node) lockcore.Node {
		if i == 1 {
			return cutOff{n, cut}
		}
		return n
	}
}

// holdThenFlush takes and releases lock r three times through b (token 3
// on every node), then, with node 1 cut off, takes it for ttl on nodes 0
// and 2 (token 4) and flushes node 2: the live lock now stands on node 0
// alone, and only the counters of node 0 and node 1 (3) remember it.
func holdThenFlush(t *testing.T, b *lockcore.Redlock, srvs []*redistest.Server, cut *atomic.Bool, ttl time.Duration) *lockcore.Lease {
	t.Helper()
	ctx := context.Background()
	for range 3 {
		l := acquireWithin(t, b, lockcore.AcquireRequest{Resource: "r", TTL: 2 * time.Second}, 3*time.Second)
		if err := b.Release(ctx, lockcore.ReleaseRequest{Resource: "r", LeaseID: l.ID}); err != nil {
			t.Error(err)
		}
	}
	cut.Store(true)
	held := acquireWithin(t, b, lockcore.AcquireRequest{Resource: "r", TTL: ttl}, 3*time.Second)
	raw := connect(t, srvs[2])
	defer raw.Close()
	if err := raw.Client().FlushAll(ctx).Err(); err != nil {
		t.Error(err)
	}
	return held
}

// staleBootstrap: gateway A finds a new cluster, marks the nodes, and its
// Repair(zero) of node 2 starts late (A waited up to bulkTimeout for a slow
// node's mark, or was paused). Meanwhile gateway B initializes the cluster,
// a lock is held on nodes 0 and 2 (node 1 paused), node 2 is flushed and
// then meanwhile() runs. Then A's bootstrap Repair of node 2 goes on.
func staleBootstrap(t *testing.T, bInterval time.Duration, meanwhile func(srvs []*redistest.Server)) {
	staleBootstrapAt(t, epochRead, bInterval, meanwhile)
}

// bootMark picks a MarkInitializing: the only single script call on the
// meta hash a bootstrap sends before its marks (Check's goes in a
// pipeline with INFO).
func bootMark(cmds []redis.Cmder) bool {
	return len(cmds) == 1 && isScript(cmds[0]) && cmdKey(cmds[0]) == metaKey
}

// staleBootstrapAt is staleBootstrap with B's steps run before the command
// of A's on node 2 that pick picks.
func staleBootstrapAt(t *testing.T, pick func([]redis.Cmder) bool, bInterval time.Duration, meanwhile func(srvs []*redistest.Server)) {
	srvs := redistest.StartN(t, 3, nil)
	ctx := context.Background()
	opts := func(iv time.Duration) *lockcore.Options {
		return &lockcore.Options{NodeTimeout: itNodeTimeout, MinTTL: itMinTTL, CheckInterval: iv}
	}
	var b *lockcore.Redlock
	var held *lockcore.Lease
	var cut atomic.Bool
	// A works on the nodes in parallel. Its same step on nodes 0 and 1
	// waits for B's steps too, so B meets the cluster the scenario
	// describes however the goroutines are scheduled.
	bDone := make(chan struct{})
	a := gatewayWith(t, srvs, opts(time.Hour), func(i int, n *redisnode.Node) lockcore.Node {
		if i != 2 {
			n.Client().AddHook(&hooks{pick: pick, before: func() {
				select {
				case <-bDone:
				case <-time.After(20 * time.Second):
					t.Error("B's steps did not end")
				}
			}})
		}
		if i == 2 {
			n.Client().AddHook(&hooks{pick: pick, before: func() {
				defer close(bDone)
				b = gatewayCutOff(t, srvs, opts(bInterval), &cut)
				if err := b.Ready(ctx); err != nil {
					t.Error("B ready:", err)
				}
				held = holdThenFlush(t, b, srvs, &cut, 30*time.Second)
				meanwhile(srvs)
			}})
		}
		return n
	})
	_ = a.Ready(ctx)
	cut.Store(false)
	if held == nil {
		t.Fatal("set-up failed")
	}
	h := health(t, srvs[2])
	if h.Initialized && !h.Quarantined && !h.Lost {
		t.Errorf("node 2 lost its data at token %d and is in service at once (counter of r's slot: %d)", held.Token, counterOf(t, srvs[2], "r"))
	}
	t.Logf("node 2 after A's bootstrap: %+v", h)
	time.Sleep(300 * time.Millisecond)
	actx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	l, err := b.Acquire(actx, lockcore.AcquireRequest{Resource: "r", TTL: 5 * time.Second})
	if err == nil {
		t.Errorf("lock r held by %s with token %d (TTL 30 s, live) granted again with token %d", held.ID, held.Token, l.Token)
	} else {
		t.Logf("second acquire: %v", err)
	}
}

// TestAStaleBootstrapDoesNotEndAQuarantine: staleBootstrap where B has
// quarantined node 2 before A's late Repair goes on. A's Repair must do
// nothing: before Repair took the epoch of the mark, it read the node's
// epoch itself, adopted the quarantine's, and ended the quarantine at once
// with zero counters (the live lock's token 4 was granted again).
func TestAStaleBootstrapDoesNotEndAQuarantine(t *testing.T) {
	staleBootstrap(t, 20*time.Millisecond, func(srvs []*redistest.Server) {
		deadline := time.Now().Add(8 * time.Second)
		for {
			if h := health(t, srvs[2]); h.Quarantined && !h.Lost {
				return // B quarantined node 2 (marking done)
			}
			if time.Now().After(deadline) {
				t.Error("B did not quarantine node 2")
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// TestAStaleBootstrapDoesNotReinitializeALostNode: staleBootstrap where
// node 2 is flushed and A's Repair goes on before B's next check. The
// mark's epoch went with the data, so A's Repair must do nothing (when a
// bootstrap's epoch was "", so was the flushed node's, and A initialized
// it with zero counters).
func TestAStaleBootstrapDoesNotReinitializeALostNode(t *testing.T) {
	staleBootstrap(t, time.Hour, func([]*redistest.Server) {})
}

// TestALateBootstrapStopsOnceTheClusterIsInitialized: staleBootstrap with
// B's steps before A marks the nodes (A was paused between the check that
// found the cluster new and its marks). Node 2, flushed, is empty again, so
// A's mark on it takes; A must then find nodes 0 and 1 initialized when it
// checks again, and stop. Without that check, A initialized node 2 with
// zero counters under its own mark's epoch.
func TestALateBootstrapStopsOnceTheClusterIsInitialized(t *testing.T) {
	staleBootstrapAt(t, bootMark, time.Hour, func([]*redistest.Server) {})
}

func isScript(c redis.Cmder) bool { return c.Name() == "evalsha" || c.Name() == "eval" }

// cmdKey is a script call's first key.
func cmdKey(c redis.Cmder) string {
	if a := c.Args(); len(a) > 3 {
		if s, ok := a[3].(string); ok {
			return s
		}
	}
	return ""
}

func counterOf(t *testing.T, srv *redistest.Server, resource string) int64 {
	n := connect(t, srv)
	defer n.Close()
	v, _ := n.Client().HGet(context.Background(), slotKey(lockcore.FenceSlot(resource)), "n").Int64()
	return v
}

// TestAStaleRepairDoesNotEndALaterQuarantine: gateway A finds node 2's
// quarantine long enough and reads the other nodes' counters (floor F);
// its Repair reads the node's epoch only later. Meanwhile gateway B
// repairs node 2, locks are granted above F, node 2 is flushed and B
// quarantines it again (a new epoch). A's Repair then adopts the new
// epoch, writes the stale floor F and ends the new quarantine at once.
func TestAStaleRepairDoesNotEndALaterQuarantine(t *testing.T) {
	srvs := redistest.StartN(t, 3, nil)
	ctx := context.Background()
	for _, s := range srvs {
		initializeServer(t, s)
	}
	q := connect(t, srvs[2])
	if err := q.Quarantine(ctx); err != nil {
		t.Fatal(err)
	}
	q.Close()
	opts := func(iv time.Duration) *lockcore.Options {
		// MaxTTL 4 s: the lock B holds (4 s) must outlive B's repair of
		// node 2, its flush and B's new quarantine of 16,384 slots, which
		// take a while on a busy machine.
		return &lockcore.Options{NodeTimeout: itNodeTimeout, MinTTL: itMinTTL, MaxTTL: 4 * time.Second, CheckInterval: iv}
	}
	time.Sleep(5 * time.Second) // node 2's quarantine (MaxTTL, drift, node timeout) has lasted long enough
	var b *lockcore.Redlock
	var held *lockcore.Lease
	var cut atomic.Bool
	a := gatewayWith(t, srvs, opts(time.Hour), func(i int, n *redisnode.Node) lockcore.Node {
		if i == 2 {
			n.Client().AddHook(&hooks{pick: epochRead, before: func() {
				b = gatewayCutOff(t, srvs, opts(20*time.Millisecond), &cut)
				_ = b.Ready(ctx) // B repairs node 2
				held = holdThenFlush(t, b, srvs, &cut, 4*time.Second)
				for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(5 * time.Millisecond) {
					if h := health(t, srvs[2]); h.Quarantined && !h.Lost {
						return // B quarantined node 2 again
					}
					if time.Now().After(deadline) {
						t.Error("B did not quarantine node 2")
						return
					}
				}
			}})
		}
		return n
	})
	_ = a.Ready(ctx)
	cut.Store(false)
	if held == nil {
		t.Fatal("set-up failed")
	}
	if h := health(t, srvs[2]); h.Initialized && !h.Quarantined && !h.Lost {
		t.Errorf("node 2 lost its data at token %d, was quarantined, and is in service at once (counter of r's slot: %d)", held.Token, counterOf(t, srvs[2], "r"))
	}
	time.Sleep(100 * time.Millisecond) // B's next checks
	actx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if time.Until(held.Expires) <= 0 {
		t.Fatalf("the set-up took longer than r's lease (%v): the acquisition below would prove nothing", held.Validity)
	}
	if l, err := b.Acquire(actx, lockcore.AcquireRequest{Resource: "r", TTL: 2 * time.Second}); err == nil {
		if time.Now().After(held.Expires) {
			t.Fatalf("r's lease ran out during the acquisition below (granted token %d): it proves nothing", l.Token)
		}
		t.Errorf("lock r held with token %d (live) granted again with token %d", held.Token, l.Token)
	} else {
		t.Logf("second acquire: %v", err)
	}
}

// TestALateQuarantineDoesNotMarkARepairedNode: quarantine Q0 (gateway A) has
// run quarantine.lua, and its marks are late (A paused, or its pipeline
// slow, within bulkTimeout). The node was quarantined long ago (qsince is
// kept), so once another gateway's quarantine Q1 has finished, a repair may
// run at once and put the node in service. Q0's marks then land: plain
// HSETs that no epoch checks. The node is in service, every check finds it
// whole, and every marked slot refuses for good.
func TestALateQuarantineDoesNotMarkARepairedNode(t *testing.T) {
	srv := redistest.Start(t, nil)
	ctx := context.Background()
	quarantinedOnce(t, srv) // a quarantine that has lasted MaxTTL, say
	a, b, r := connect(t, srv), connect(t, srv), connect(t, srv)
	a.Client().AddHook(&hooks{pick: slotPipeline, before: func() {
		if err := b.Quarantine(ctx); err != nil { // B found the node lost too (a restart from everysec AOF)
			t.Error(err)
		}
		if err := nodetest.RepairNow(ctx, r, make([]int64, lockcore.FenceSlots)); err != nil { // the quarantine is long enough
			t.Error("repair:", err)
		}
	}})
	if err := a.Quarantine(ctx); err != nil {
		t.Fatal(err)
	}
	h := health(t, srv)
	m := markedSlots(t, r.Client())
	t.Logf("after A's late marks: %+v, %d slots marked", h, m)
	if h.Initialized && !h.Quarantined && !h.Lost && m > 0 {
		t.Errorf("the node is in service, every check finds it whole, and %d of %d slots refuse for good", m, lockcore.FenceSlots)
	}
}
