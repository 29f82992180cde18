package redisnode_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/nodetest"
	"github.com/lockgate/lockgate/lockcore/redisnode"
)

// health checks srv with a Node of its own, as a gateway that never saw it
// would.
func health(t *testing.T, srv *redistest.Server) lockcore.NodeHealth {
	t.Helper()
	n := connect(t, srv)
	defer n.Close()
	h, err := n.Check(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// gateway is a Redlock over srvs with nodes as a gateway replica makes them
// (nothing initialized beforehand), closed when t ends.
func gateway(t *testing.T, srvs []*redistest.Server, opts *lockcore.Options) *lockcore.Redlock {
	return gatewayWith(t, srvs, opts, nil)
}

// gatewayWith is gateway with node i replaced by wrap(i, node) if wrap is
// not nil.
func gatewayWith(t *testing.T, srvs []*redistest.Server, opts *lockcore.Options, wrap func(int, *redisnode.Node) lockcore.Node) *lockcore.Redlock {
	t.Helper()
	nodes := make([]lockcore.Node, len(srvs))
	for i, s := range srvs {
		n, err := redisnode.New(s.URL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		nodes[i] = n
		if wrap != nil {
			nodes[i] = wrap(i, n)
		}
	}
	rl, err := lockcore.New(nodes, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rl.Close)
	return rl
}

// initializeServer puts srv's node in service with zero counters, as the
// bootstrap of a new cluster does.
func initializeServer(t *testing.T, srv *redistest.Server) {
	t.Helper()
	n := connect(t, srv)
	defer n.Close()
	if err := nodetest.Initialize(context.Background(), n); err != nil {
		t.Fatal(err)
	}
}

// markInitializing marks srv's node as being initialized, as the bootstrap
// of a new cluster does first.
func markInitializing(t *testing.T, srv *redistest.Server) {
	t.Helper()
	n := connect(t, srv)
	defer n.Close()
	if _, err := n.MarkInitializing(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestANodeAnotherGatewayIsInitializingIsNotQuarantined: a gateway that
// starts while another is initializing a new cluster node by node finds
// some nodes initialized and the others marked as being initialized. It
// must not quarantine those (for MaxTTL: two of three would stop the
// cluster for as long), and must use them once they are initialized.
func TestANodeAnotherGatewayIsInitializingIsNotQuarantined(t *testing.T) {
	srvs := redistest.StartN(t, 3, nil)
	for _, s := range srvs {
		markInitializing(t, s)
	}
	initializeServer(t, srvs[0])
	initializeServer(t, srvs[1]) // the other gateway has not reached node 2 yet
	rl := gateway(t, srvs, &lockcore.Options{NodeTimeout: itNodeTimeout, MinTTL: itMinTTL, CheckInterval: 20 * time.Millisecond})
	if err := rl.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // a few more passes of the guard
	if h := health(t, srvs[2]); h.Initialized || h.Quarantined {
		t.Fatalf("node 2, not initialized yet, after the new gateway's passes: %+v; want it left alone", h)
	}
	initializeServer(t, srvs[2])
	// Take the lock on a quorum that must include node 2: node 0 down.
	srvs[0].Pause()
	defer srvs[0].Resume()
	acquireWithin(t, rl, lockcore.AcquireRequest{Resource: "boot", TTL: 5 * time.Second}, 2*time.Second)
}

// TestAMarkedNodeThatRestartedIsNotKeptWaiting: a node that restarted
// with the bootstrap's mark but not its initialization (its AOF lost the
// tail) is no node a gateway is initializing: it is found lost at once and
// recovers from the other nodes, instead of waiting bootGrace (20 s).
func TestAMarkedNodeThatRestartedIsNotKeptWaiting(t *testing.T) {
	srvs := redistest.StartN(t, 3, &redistest.Options{AOF: true})
	initializeServer(t, srvs[0])
	initializeServer(t, srvs[1])
	markInitializing(t, srvs[2])
	srvs[2].Restart()
	rl := gateway(t, srvs, &lockcore.Options{NodeTimeout: itNodeTimeout, MinTTL: itMinTTL, CheckInterval: 20 * time.Millisecond})
	_ = rl.Ready(context.Background())
	if !poll(5*time.Second, func() bool { return inService(health(t, srvs[2])) }) {
		t.Fatalf("node 2, marked then restarted, not in service within 5 s: %+v", health(t, srvs[2]))
	}
}

// TestAnEmptyNodeIsLeftAloneOnlyWhileMarked: in a cluster whose other nodes
// are initialized, an empty node is left alone only while it carries a
// mark of the bootstrap younger than bootGrace (20 s), made on the server
// process that answers. A node that restarted empty has no mark (it goes
// with the data), and one that restarted since it was marked is not being
// initialized by anyone: both are quarantined at once (and then recover
// from the two others): left alone, they could be initialized with zero
// counters by a gateway that takes the cluster for a new one
// (TestALostMajorityIsNotInitializedAsNew).
func TestAnEmptyNodeIsLeftAloneOnlyWhileMarked(t *testing.T) {
	for _, tc := range []struct {
		name      string
		markedAgo time.Duration // < 0: no mark
		otherRun  bool          // the mark names another server process
		leftAlone bool
	}{
		{"no mark (restarted empty)", -1, false, false},
		{"marked just now", 0, false, true},
		{"marked 19 s ago", 19 * time.Second, false, true},
		{"marked 21 s ago", 21 * time.Second, false, false},
		{"marked just now, another process since", 0, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srvs := redistest.StartN(t, 3, nil)
			initializeServer(t, srvs[0])
			initializeServer(t, srvs[1])
			if tc.markedAgo >= 0 {
				n := connect(t, srvs[2])
				ctx := context.Background()
				now, err := n.Client().Time(ctx).Result()
				if err != nil {
					t.Fatal(err)
				}
				brid := infoRunID(t, n.Client())
				if tc.otherRun {
					brid = "another-server-process"
				}
				if err := n.Client().HSet(ctx, metaKey, "boot", now.Add(-tc.markedAgo).UnixMilli(), "brid", brid).Err(); err != nil {
					t.Fatal(err)
				}
				n.Close()
			}
			rl := gateway(t, srvs, &lockcore.Options{NodeTimeout: itNodeTimeout, MinTTL: itMinTTL, CheckInterval: 20 * time.Millisecond})
			if err := rl.Ready(context.Background()); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
			// Not left alone: quarantined, and by now maybe recovered.
			if h := health(t, srvs[2]); h.Initialized == tc.leftAlone {
				t.Fatalf("node 2 after the gateway's passes: %+v; want left alone %v", h, tc.leftAlone)
			}
		})
	}
}

// TestALostMajorityIsNotInitializedAsNew: every gateway restarts and two
// nodes of three restart empty while a lock is held. A new gateway finds
// node 0 initialized: it must quarantine the two empty nodes at once, so
// that when node 0 then misses some of its checks, the two do not look like
// a new cluster and get zero counters (the lock would then be granted again
// with a lower token while its holder still holds it), neither for it nor
// for another gateway that starts while node 0 is unreachable. While an
// empty node was left alone for bootGrace whether marked or not, this
// happened.
func TestALostMajorityIsNotInitializedAsNew(t *testing.T) {
	srvs := redistest.StartN(t, 3, nil)
	opts := func() *lockcore.Options {
		return &lockcore.Options{NodeTimeout: itNodeTimeout, MinTTL: itMinTTL, CheckInterval: 20 * time.Millisecond}
	}
	a := gateway(t, srvs, opts())
	var held *lockcore.Lease
	for i := range 4 {
		l := acquireWithin(t, a, lockcore.AcquireRequest{Resource: "r", TTL: 30 * time.Second}, 3*time.Second)
		if i < 3 {
			if err := a.Release(context.Background(), lockcore.ReleaseRequest{Resource: "r", LeaseID: l.ID}); err != nil {
				t.Fatal(err)
			}
		}
		held = l
	}
	a.Close() // the lock stays held on the nodes for 30 s
	srvs[1].RestartEmpty()
	srvs[2].RestartEmpty()
	b := gateway(t, srvs, opts())
	_ = b.Ready(context.Background()) // node 0 initialized, nodes 1 and 2 empty
	srvs[0].Pause()                   // node 0 misses some of b's checks,
	c := gateway(t, srvs, opts())     // and every check of a gateway that starts now
	_ = c.Ready(context.Background())
	time.Sleep(500 * time.Millisecond)
	for g, rl := range []*lockcore.Redlock{b, c} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		l, err := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "r", TTL: 5 * time.Second})
		cancel()
		if err == nil {
			t.Errorf("gateway %d: lock r, held with token %d (TTL 30 s, still live), granted again with token %d", g, held.Token, l.Token)
		}
	}
	srvs[0].Resume()
	for i := 1; i < 3; i++ {
		if h := health(t, srvs[i]); !h.Quarantined {
			t.Errorf("node %d: %+v, want quarantined", i, h)
		}
	}
}

// noQuarantine is a node whose Quarantine always fails (a node too slow
// for it, say).
type noQuarantine struct{ *redisnode.Node }

func (noQuarantine) Quarantine(context.Context) error { return errors.New("quarantine failed") }

// TestAGatewayThatSawTheClusterNeverInitializesItAsNew: a gateway found
// node 0 initialized and two empty nodes, which it could not quarantine.
// When node 0 then misses its checks, the two empty nodes answer alone,
// as a new cluster would: the gateway must remember that the cluster is
// not new, and not initialize them with zero counters.
func TestAGatewayThatSawTheClusterNeverInitializesItAsNew(t *testing.T) {
	srvs := redistest.StartN(t, 3, nil)
	initializeServer(t, srvs[0])
	rl := gatewayWith(t, srvs, &lockcore.Options{NodeTimeout: itNodeTimeout, MinTTL: itMinTTL, CheckInterval: 20 * time.Millisecond},
		func(i int, n *redisnode.Node) lockcore.Node {
			if i == 0 {
				return n
			}
			return noQuarantine{n}
		})
	_ = rl.Ready(context.Background())
	srvs[0].Pause()
	time.Sleep(3 * time.Second) // passes with node 0 unreachable (its check times out in 2 s)
	srvs[0].Resume()
	for i := 1; i < 3; i++ {
		if h := health(t, srvs[i]); h.Initialized && !h.Quarantined {
			t.Errorf("node %d was initialized as a node of a new cluster: %+v", i, h)
		}
	}
}

// TestGatewaysStartingTogetherOnANewCluster starts three gateways at once
// on a new three-node cluster, fifteen times. Every time, every node must
// end in service, and a lock must be granted at once. Before bootGrace,
// about one start in four quarantined two of the three nodes: no quorum for
// the length of a quarantine.
func TestGatewaysStartingTogetherOnANewCluster(t *testing.T) {
	srvs := redistest.StartN(t, 3, nil)
	for round := range 15 {
		for _, s := range srvs {
			n := connect(t, s)
			if err := n.Client().FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			n.Close()
		}
		var rls []*lockcore.Redlock
		for range 3 {
			rls = append(rls, gateway(t, srvs, &lockcore.Options{NodeTimeout: itNodeTimeout, MinTTL: itMinTTL, CheckInterval: 50 * time.Millisecond}))
		}
		var wg sync.WaitGroup
		for g, rl := range rls {
			wg.Go(func() {
				// Rounds stagger the starts by 0 to 80 ms.
				time.Sleep(time.Duration(g*(round%5)) * 20 * time.Millisecond)
				_ = rl.Ready(context.Background())
			})
		}
		wg.Wait()
		for i, s := range srvs {
			if h := health(t, s); !h.Initialized || h.Quarantined || h.Lost {
				t.Errorf("round %d: node %d after the starts: %+v; want it in service", round, i, h)
			}
		}
		for g, rl := range rls {
			l := acquireWithin(t, rl, lockcore.AcquireRequest{Resource: "together", TTL: 2 * time.Second}, 2*time.Second)
			if err := rl.Release(context.Background(), lockcore.ReleaseRequest{Resource: "together", LeaseID: l.ID}); err != nil {
				t.Errorf("round %d gateway %d: release: %v", round, g, err)
			}
		}
		for _, rl := range rls {
			rl.Close()
		}
	}
}

// TestARepairAndAQuarantineAtOnceLeaveTheNodeWhole: one gateway repairs a
// node (here, initializes it) while another quarantines it, both thousands
// of pipelined commands that interleave on the server. Whatever the order,
// the node must end either quarantined with every slot marked (a gateway
// that still trusts the node must find every slot refusing), or in service
// with no slot marked: a node in service with marked slots refuses those
// slots' locks for good, since no check finds anything to repair. Before serve.lua checked the
// quarantine epoch, most rounds ended that way.
func TestARepairAndAQuarantineAtOnceLeaveTheNodeWhole(t *testing.T) {
	srv := redistest.Start(t, nil)
	repairer, quarantiner := connect(t, srv), connect(t, srv)
	outcomes := map[string]int{}
	for round := range 12 {
		if err := repairer.Client().FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		epoch, err := repairer.MarkInitializing(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var rerr, qerr error
		wg.Go(func() { rerr = repairer.Repair(context.Background(), make([]int64, lockcore.FenceSlots), epoch) })
		wg.Go(func() {
			time.Sleep(time.Duration(round%4) * 2 * time.Millisecond) // vary the overlap
			qerr = quarantiner.Quarantine(context.Background())
		})
		wg.Wait()
		if qerr != nil {
			t.Fatalf("round %d: quarantine: %v", round, qerr)
		}
		h := health(t, srv)
		switch {
		case h.Quarantined:
			// Every slot marked: the repair's writes stop once the
			// quarantine's epoch is on the node, and its marks come after.
			if m := markedSlots(t, repairer.Client()); m != lockcore.FenceSlots {
				t.Errorf("round %d: quarantined with %d of %d slots marked (repair: %v)", round, m, lockcore.FenceSlots, rerr)
			}
			outcomes["quarantined"]++
		case !h.Initialized || h.Lost:
			t.Errorf("round %d: the node is %+v (repair: %v)", round, h, rerr)
		default:
			c := connect(t, srv)
			if _, err := c.Check(context.Background()); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Counters(context.Background()); err != nil {
				t.Errorf("round %d: the node is in service but its counters read %v (repair: %v)", round, err, rerr)
			} else {
				outcomes["in service"]++
			}
			c.Close()
		}
	}
	t.Logf("outcomes: %v", outcomes)
}

// TestARepairDuringAQuarantinesMarkingIsRefused: a repair that begins while
// a quarantine is still marking the slots (qsince set, qdone not yet) must
// not run: it would clear marks the quarantine then sets again, and put the
// node in service with them.
func TestARepairDuringAQuarantinesMarkingIsRefused(t *testing.T) {
	srv := redistest.Start(t, nil)
	n := connect(t, srv)
	ctx := context.Background()
	runID := infoRunID(t, n.Client())
	if err := n.Client().HSet(ctx, "lockgate:{meta}:node", "init", "1", "qsince", "1", "qepoch", "e1", "qrid", runID).Err(); err != nil {
		t.Fatal(err)
	}
	if err := n.Repair(ctx, make([]int64, lockcore.FenceSlots), "e1"); !errors.Is(err, redisnode.ErrQuarantining) {
		t.Fatalf("Repair during the marking: %v, want ErrQuarantining", err)
	}
	if h := health(t, srv); !h.Quarantined {
		t.Fatalf("after the refused repair: %+v, want still quarantined", h)
	}
	if err := n.Client().HSet(ctx, "lockgate:{meta}:node", "qdone", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := n.Repair(ctx, make([]int64, lockcore.FenceSlots), "e1"); err != nil {
		t.Fatalf("Repair once the marking is done: %v", err)
	}
	if h := health(t, srv); h.Quarantined || !h.Initialized {
		t.Fatalf("after the repair: %+v, want in service", h)
	}
}

// infoRunID is the run id of the server rdb talks to.
func infoRunID(t *testing.T, rdb *redis.Client) string {
	t.Helper()
	for line := range strings.Lines(rdb.Info(context.Background(), "server").Val()) {
		if v, ok := strings.CutPrefix(line, "run_id:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatal("no run_id in INFO server")
	return ""
}
