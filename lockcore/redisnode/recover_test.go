package redisnode_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/faultproxy"
	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/redisnode"
)

// The data losses of real deployments (restores, failovers, everysec
// crashes, another node's data, eviction), each as one scenario: L1 holds R
// on A and B (C was down when it was granted), A loses what it knew of L1,
// B pauses, and L2 asks for R while L1's TTL runs. Protected, L2 is never
// granted (A must recover from B and C before it counts, and B does not
// answer); unprotected, A and C grant it: that run shows each scenario can
// catch the fault.

// recoverTTL is L1's TTL and the gateways' MaxTTL: long enough for the
// scenarios' restarts on a busy machine.
const recoverTTL = 6 * time.Second

// recoverOptions are a gateway's options for these scenarios.
func recoverOptions() *lockcore.Options {
	return &lockcore.Options{NodeTimeout: 200 * time.Millisecond, MinTTL: 400 * time.Millisecond,
		MaxTTL: recoverTTL, CheckInterval: 20 * time.Millisecond}
}

// recoverGateway is a gateway replica over urls, protected or not, with
// node i wrapped by wrap if it is not nil.
func recoverGateway(t *testing.T, urls []string, protect bool, wrap func(int, *redisnode.Node) lockcore.Node) *lockcore.Redlock {
	t.Helper()
	return gatewayOver(t, urls, protect, recoverOptions(), wrap)
}

func urlsOf(srvs []*redistest.Server) []string {
	urls := make([]string, len(srvs))
	for i, s := range srvs {
		urls[i] = s.URL()
	}
	return urls
}

// holdWithoutC grants L1 on R while c is down, so that it holds on A and B
// only, and brings c back: protected, once it recovered from A and B (a
// restart is a loss too).
func holdWithoutC(t *testing.T, rl *lockcore.Redlock, c *redistest.Server, res string, protect bool) *lockcore.Lease {
	t.Helper()
	c.Kill()
	l1 := acquireWithin(t, rl, lockcore.AcquireRequest{Resource: res, TTL: recoverTTL}, 3*time.Second)
	c.Restart()
	if protect {
		waitUntil(t, "the restarted node recovered", func() bool { return inService(health(t, c)) })
	}
	return l1
}

// holdWithCBehind grants L1 on R and takes it off c, as if c had missed it
// (a lagging node that never restarted): L1 holds on A and B only.
func holdWithCBehind(t *testing.T, rl *lockcore.Redlock, c *redistest.Server, res string) *lockcore.Lease {
	t.Helper()
	l1 := acquireWithin(t, rl, lockcore.AcquireRequest{Resource: res, TTL: recoverTTL}, 3*time.Second)
	rc := connect(t, c).Client()
	ctx := context.Background()
	waitUntil(t, "c's grant", func() bool { return rc.HGet(ctx, "lockgate:{"+res+"}:lock", "lease").Val() == l1.ID })
	if err := rc.Del(ctx, "lockgate:{"+res+"}:lock").Err(); err != nil {
		t.Fatal(err)
	}
	return l1
}

// inService reports whether h is a node in service.
func inService(h lockcore.NodeHealth) bool {
	return h.Initialized && !h.Lost && !h.Quarantined && h.Refusing == ""
}

// secondHolder asks for res while b is paused, for up to a second, and
// returns the lease granted, or nil. It stops once l1's validity is half
// gone, so that a grant is always one while L1 still holds.
func secondHolder(t *testing.T, rl *lockcore.Redlock, b *redistest.Server, res string, l1 *lockcore.Lease) *lockcore.Lease {
	t.Helper()
	b.Pause()
	defer b.Resume()
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) && time.Until(l1.Expires) > recoverTTL/2 {
		l2, err := rl.Acquire(context.Background(), lockcore.AcquireRequest{Resource: res, TTL: time.Second})
		if err == nil {
			return l2
		}
		time.Sleep(20 * time.Millisecond)
	}
	if time.Until(l1.Expires) <= 0 {
		t.Fatalf("set-up too slow: L1 expired before L2 could be asked for")
	}
	return nil
}

// judgeScenario checks the outcome: protected, no second holder;
// unprotected, one (the scenario reaches the fault).
func judgeScenario(t *testing.T, protect bool, l1, l2 *lockcore.Lease) {
	t.Helper()
	switch {
	case protect && l2 != nil:
		t.Fatalf("L2 granted (token %d) while L1 (token %d) holds", l2.Token, l1.Token)
	case !protect && l2 == nil:
		t.Fatalf("unprotected, L2 was never granted: the scenario does not reach the fault")
	}
}

// protections runs fn protected and unprotected.
func protections(t *testing.T, fn func(t *testing.T, protect bool)) {
	for _, protect := range []bool{true, false} {
		name := "protected"
		if !protect {
			name = "unprotected"
		}
		t.Run(name, func(t *testing.T) { fn(t, protect) })
	}
}

// TestARestoreIsNotTrustedWhenItsQuarantineFails (scenario 1): A comes back
// from an older copy and every quarantine of it fails. The loss is not
// forgotten: A's record names another server process, so every check
// finds it again, and A never counts.
func TestARestoreIsNotTrustedWhenItsQuarantineFails(t *testing.T) {
	protections(t, func(t *testing.T, protect bool) {
		srvs := redistest.StartN(t, 3, &redistest.Options{AOF: true})
		a, b, c := srvs[0], srvs[1], srvs[2]
		rl := recoverGateway(t, urlsOf(srvs), protect, func(i int, n *redisnode.Node) lockcore.Node {
			if i == 0 {
				return noQuarantine{n}
			}
			return n
		})
		const res = "restore-quarantine-fails"
		cycle(t, rl, res)
		old := copyAOF(t, a)
		l1 := holdWithoutC(t, rl, c, res, protect)
		restoreAOF(t, a, old)
		time.Sleep(200 * time.Millisecond) // checks, each quarantine failing
		judgeScenario(t, protect, l1, secondHolder(t, rl, b, res, l1))
	})
}

// TestARestoreNoRunningGatewaySaw (scenario 2): every gateway restarts (a
// deploy) while A comes back from an older copy. The new gateway has
// never seen A; A's own record says it was recovered for another server
// process.
func TestARestoreNoRunningGatewaySaw(t *testing.T) {
	protections(t, func(t *testing.T, protect bool) {
		srvs := redistest.StartN(t, 3, &redistest.Options{AOF: true})
		a, b, c := srvs[0], srvs[1], srvs[2]
		first := recoverGateway(t, urlsOf(srvs), protect, nil)
		const res = "restore-new-gateway"
		cycle(t, first, res)
		old := copyAOF(t, a)
		l1 := holdWithoutC(t, first, c, res, protect)
		first.Close()
		restoreAOF(t, a, old)
		second := recoverGateway(t, urlsOf(srvs), protect, nil)
		judgeScenario(t, protect, l1, secondHolder(t, second, b, res, l1))
	})
}

// TestAnEverysecCrashLosesItsTail (scenario 3): A syncs its AOF once a
// second, and the host crashes: the AOF is cut back to what was synced
// before L1, and the new process starts from it.
func TestAnEverysecCrashLosesItsTail(t *testing.T) {
	protections(t, func(t *testing.T, protect bool) {
		srvs := redistest.StartN(t, 3, &redistest.Options{AOF: true})
		a, b, c := srvs[0], srvs[1], srvs[2]
		rl := recoverGateway(t, urlsOf(srvs), protect, nil)
		ctx := context.Background()
		if err := connect(t, a).Client().ConfigSet(ctx, "appendfsync", "everysec").Err(); err != nil {
			t.Fatal(err)
		}
		const res = "everysec-tail"
		cycle(t, rl, res)
		synced := aofSizes(t, a)
		l1 := holdWithoutC(t, rl, c, res, protect)
		a.Kill()
		for name, size := range synced {
			if err := os.Truncate(name, size); err != nil {
				t.Fatal(err)
			}
		}
		a.Restart()
		judgeScenario(t, protect, l1, secondHolder(t, rl, b, res, l1))
	})
}

// aofSizes returns the size of each of srv's append-only files.
func aofSizes(t *testing.T, srv *redistest.Server) map[string]int64 {
	t.Helper()
	dir := filepath.Join(srv.Dir(), "appendonlydir")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Join(dir, e.Name())] = fi.Size()
	}
	return out
}

// TestARecoveryNeedsAllButAMinority: B is paused before A comes back from
// an older copy. C alone may not lack L1 (it was down when L1 was granted),
// so A may not recover from C alone: with 3 nodes a recovery reads both
// others (see recoverNeed), and A stays out of service.
func TestARecoveryNeedsAllButAMinority(t *testing.T) {
	srvs := redistest.StartN(t, 3, &redistest.Options{AOF: true})
	a, b, c := srvs[0], srvs[1], srvs[2]
	rl := recoverGateway(t, urlsOf(srvs), true, nil)
	const res = "recovery-needs"
	cycle(t, rl, res)
	old := copyAOF(t, a)
	l1 := holdWithCBehind(t, rl, c, res)
	b.Pause()
	defer b.Resume()
	restoreAOF(t, a, old)
	// Each pass waits out B's check (800 ms): give A's quarantine and a
	// recovery time to happen.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) && time.Until(l1.Expires) > time.Second {
		if l2, err := rl.Acquire(context.Background(), lockcore.AcquireRequest{Resource: res, TTL: time.Second}); err == nil {
			t.Fatalf("L2 granted (token %d) while L1 (token %d) holds: A recovered from C alone", l2.Token, l1.Token)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if h := health(t, a); inService(h) {
		t.Fatalf("A in service with only C to recover from: %+v", h)
	}
}

// TestAnotherNodesDataBehindAnAddress (scenario 4): L1 holds on A and C (B
// was down); A then restarts from a copy of B's data directory, which never
// had L1; C pauses. B's record names B's server process, not A's.
func TestAnotherNodesDataBehindAnAddress(t *testing.T) {
	protections(t, func(t *testing.T, protect bool) {
		srvs := redistest.StartN(t, 3, &redistest.Options{AOF: true})
		a, b, c := srvs[0], srvs[1], srvs[2]
		rl := recoverGateway(t, urlsOf(srvs), protect, nil)
		const res = "another-nodes-data"
		cycle(t, rl, res)
		l1 := holdWithoutC(t, rl, b, res, protect) // held on A and C
		restoreAOF(t, a, copyAOF(t, b))
		judgeScenario(t, protect, l1, secondHolder(t, rl, c, res, l1))
	})
}

// TestANodeThatMayEvictIsNotCounted (scenario 5): A is set to evict keys
// under memory pressure (volatile-lru) and evicts L1. A refuses to serve
// from the check that reads its policy on; once the policy is noeviction
// again, A recovers from B and C before it counts, and holds L1 again.
func TestANodeThatMayEvictIsNotCounted(t *testing.T) {
	protections(t, func(t *testing.T, protect bool) {
		srvs := redistest.StartN(t, 3, &redistest.Options{AOF: true})
		a, b, c := srvs[0], srvs[1], srvs[2]
		rl := recoverGateway(t, urlsOf(srvs), protect, nil)
		ctx := context.Background()
		const res = "evicting"
		var err error
		cycle(t, rl, res)
		l1 := holdWithCBehind(t, rl, c, res)
		ra := connect(t, a).Client()
		if err := ra.ConfigSet(ctx, "maxmemory-policy", "volatile-lru").Err(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)                                   // the gateway's checks read the policy
		if err := ra.Del(ctx, "lockgate:{"+res+"}:lock").Err(); err != nil { // what an eviction does
			t.Fatal(err)
		}
		judgeScenario(t, protect, l1, secondHolder(t, rl, b, res, l1))
		if !protect {
			return
		}
		if err := ra.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
			t.Fatal(err)
		}
		var h lockcore.NodeHealth
		var v string
		if !poll(10*time.Second, func() bool {
			h = health(t, a)
			v, err = ra.HGet(ctx, "lockgate:{"+res+"}:lock", "lease").Result()
			return h.Initialized && !h.Lost && !h.Quarantined && h.Refusing == "" && err == nil && v == l1.ID
		}) {
			t.Fatalf("A not recovered with L1 (%v left): %+v, holds %q, %v", time.Until(l1.Expires), h, v, err)
		}
	})
}

// TestAFailoverToALaggingReplica (scenario 8): A is a primary with an
// asynchronous replica, behind a fixed address (a proxy standing in for a
// cloud endpoint). The replica misses L1 (its link is stalled), A dies, the
// replica is promoted and the address points at it. Its data carries A's
// recovery record, which names A's server process, not the replica's.
func TestAFailoverToALaggingReplica(t *testing.T) {
	protections(t, func(t *testing.T, protect bool) {
		srvs := redistest.StartN(t, 3, &redistest.Options{AOF: true})
		a, b, c := srvs[0], srvs[1], srvs[2]
		replica := redistest.Start(t, &redistest.Options{AOF: true})
		ctx := context.Background()
		rr := connect(t, replica).Client()
		link, err := faultproxy.Start(a.Addr()) // the replication link, to stall
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = link.Close() })
		if err := rr.ReplicaOf(ctx, "127.0.0.1", portOf(link.Addr())).Err(); err != nil {
			t.Fatal(err)
		}
		px, err := faultproxy.Start(a.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = px.Close() })
		urls := urlsOf(srvs)
		urls[0] = "redis://" + px.Addr()
		rl := recoverGateway(t, urls, protect, nil)
		const res = "failover"
		cycle(t, rl, res)
		waitUntil(t, "the replica in sync", func() bool {
			return rr.Exists(ctx, "lockgate:{meta}:node").Val() == 1 && strings.Contains(rr.Info(ctx, "replication").Val(), "master_link_status:up")
		})
		link.SetDelay(3 * time.Second) // the replica lags from here on
		l1 := holdWithoutC(t, rl, c, res, protect)
		a.Kill()
		link.Cut() // what A had sent and the replica had not applied is gone
		if err := rr.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
			t.Fatal(err)
		}
		if v, err := rr.Exists(ctx, "lockgate:{"+res+"}:lock").Result(); err != nil || v != 0 {
			t.Fatalf("set-up: the promoted replica has L1 (%d, %v): it did not lag", v, err)
		}
		px.SetTarget(replica.Addr())
		judgeScenario(t, protect, l1, secondHolder(t, rl, b, res, l1))
	})
}

func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}

// TestAnEmptyRestartRecoversFromTheOthers: with both other nodes answering,
// a node that restarted empty is back in service long before its
// quarantine (MaxTTL) would end, with every counter and held lock of the
// others, and it grants above every earlier token.
func TestAnEmptyRestartRecoversFromTheOthers(t *testing.T) {
	srvs := redistest.StartN(t, 3, &redistest.Options{AOF: true})
	a, b := srvs[0], srvs[1]
	opts := recoverOptions()
	opts.MaxTTL = time.Minute
	nodes := make([]lockcore.Node, 3)
	for i, s := range srvs {
		nodes[i] = newNode(t, s)
	}
	rl, err := lockcore.New(nodes, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rl.Close)
	top := cycle(t, rl, "empty-restart")
	held := acquireWithin(t, rl, lockcore.AcquireRequest{Resource: "held-across", TTL: time.Minute}, 3*time.Second)
	restartEmpty(t, a)
	restarted := time.Now()
	waitUntil(t, "A back in service", func() bool {
		h := health(t, a)
		return h.Initialized && !h.Lost && !h.Quarantined && h.Refusing == ""
	})
	t.Logf("an empty restart of one of 3 nodes: back in service %v after the restart", time.Since(restarted).Round(time.Millisecond))
	if v, err := connect(t, a).Client().HGet(context.Background(), "lockgate:{held-across}:lock", "lease").Result(); err != nil || v != held.ID {
		t.Fatalf("A after its recovery holds %q (%v), want the lease that held across it", v, err)
	}
	b.Pause()
	defer b.Resume()
	l := acquireWithin(t, rl, lockcore.AcquireRequest{Resource: "empty-restart", TTL: time.Second}, 3*time.Second)
	if l.Token <= top {
		t.Fatalf("token %d after %d", l.Token, top)
	}
	if _, err := rl.Acquire(context.Background(), lockcore.AcquireRequest{Resource: "held-across", TTL: time.Second}); err == nil {
		t.Fatal("held-across granted again while its lease holds, by A (recovered) and C")
	}
}

// TestANewerDataFormatIsRefused: a node written by a later lockgate (its
// data format above this gateway's) refuses this gateway, so that a
// gateway rolled back never mints tokens from keys it does not know.
func TestANewerDataFormatIsRefused(t *testing.T) {
	srvs := redistest.StartN(t, 1, nil)
	rl := recoverGateway(t, urlsOf(srvs), true, nil)
	cycle(t, rl, "format")
	rdb := connect(t, srvs[0]).Client()
	if err := rdb.HSet(context.Background(), "lockgate:{meta}:node", "fmt", 99).Err(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the node refusing", func() bool { return health(t, srvs[0]).Refusing != "" })
	var re *redisnode.RefusingError
	waitUntil(t, "acquisitions refused", func() bool {
		_, err := rl.Acquire(context.Background(), lockcore.AcquireRequest{Resource: "format", TTL: time.Second})
		return err != nil && errors.As(err, &re)
	})
	t.Logf("refused: %v", re)
}

// TestASentinelFailoverIsALossRecoveredFrom: node A is a primary that a
// real Redis Sentinel manages, named by a redis-sentinel:// URL, with a
// replica. A dies; the Sentinel promotes the replica and the gateway's
// client follows it. The promoted replica carries A's record, which names
// A's server process, so it does not count (B is paused: it cannot
// recover) until B answers again; then it recovers from B and C and
// serves, and tokens keep growing. (A replica that lags behind a fixed
// address is TestAFailoverToALaggingReplica: the Sentinel would repoint a
// replica that replicates through a stalled link.)
func TestASentinelFailoverIsALossRecoveredFrom(t *testing.T) {
	srvs := redistest.StartN(t, 3, &redistest.Options{AOF: true})
	a, b := srvs[0], srvs[1]
	replica := redistest.Start(t, &redistest.Options{AOF: true})
	ctx := context.Background()
	rr := connect(t, replica).Client()
	if err := rr.ReplicaOf(ctx, "127.0.0.1", portOf(a.Addr())).Err(); err != nil {
		t.Fatal(err)
	}
	sentinel := redistest.StartSentinel(t, a, "node-a")
	urls := urlsOf(srvs)
	urls[0] = "redis-sentinel://" + sentinel.Addr() + "/node-a"
	rl := recoverGateway(t, urls, true, nil)
	top := cycle(t, rl, "sentinel")
	waitUntil(t, "the replica in sync", func() bool {
		return rr.Exists(ctx, "lockgate:{meta}:node").Val() == 1 && strings.Contains(rr.Info(ctx, "replication").Val(), "master_link_status:up")
	})
	b.Pause()
	a.Kill()
	if !poll(20*time.Second, func() bool { return strings.Contains(rr.Info(ctx, "replication").Val(), "role:master") }) {
		b.Resume()
		t.Fatal("the Sentinel did not promote the replica within 20 s")
	}
	// The gateway reaches the promoted replica through the Sentinel, and
	// does not count it: it cannot recover without B.
	// For a second, well within the quarantine (a failing majority makes
	// each attempt last up to the largest node timeout, 10 × NodeTimeout).
	var err error
	for start := time.Now(); time.Since(start) < time.Second; {
		if _, err = rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "sentinel", TTL: time.Second}); err == nil {
			b.Resume()
			t.Fatalf("granted by the promoted replica, not recovered, and C: %+v", rl.NodeReports())
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.Resume()
	l := acquireWithin(t, rl, lockcore.AcquireRequest{Resource: "sentinel", TTL: time.Second}, 10*time.Second)
	if l.Token <= top {
		t.Fatalf("token %d after %d", l.Token, top)
	}
	// The grant may have come from B and C before the promoted replica's
	// recovery was written: wait for it.
	named := func() bool {
		v, err := rr.HGet(ctx, "lockgate:{meta}:node", "rid").Result()
		return err == nil && strings.Contains(rr.Info(ctx, "server").Val(), "run_id:"+v)
	}
	if !poll(10*time.Second, named) {
		v, err := rr.HGet(ctx, "lockgate:{meta}:node", "rid").Result()
		t.Fatalf("the promoted replica's record names %q (%v), not its own server process", v, err)
	}
}

// TestARollingRestartOfEverysecNodes restarts three nodes that sync their
// AOF once a second, one at a time, each once the previous one serves
// again, while four clients acquire and release. Each restarted node
// recovers from the other two, so acquisitions go on; tokens of every
// name keep growing. The share of attempts that found no quorum is logged.
func TestARollingRestartOfEverysecNodes(t *testing.T) {
	srvs := redistest.StartN(t, 3, &redistest.Options{AOF: true, Args: []string{"--appendfsync", "everysec"}})
	rl := recoverGateway(t, urlsOf(srvs), true, nil)
	ctx, stop := context.WithCancel(context.Background())
	type tally struct{ ok, failed int }
	results := make(chan tally, 4)
	errs := make(chan error, 4)
	for w := range 4 {
		go func() {
			var n tally
			var last int64
			res := "rolling-" + string(rune('a'+w))
			for ctx.Err() == nil {
				l, err := rl.Acquire(context.Background(), lockcore.AcquireRequest{Resource: res, TTL: time.Second})
				if err != nil {
					n.failed++
					time.Sleep(10 * time.Millisecond)
					continue
				}
				if l.Token <= last {
					errs <- fmt.Errorf("%s: token %d after %d", res, l.Token, last)
				}
				last = l.Token
				n.ok++
				_ = rl.Release(context.Background(), lockcore.ReleaseRequest{Resource: res, LeaseID: l.ID})
			}
			results <- n
		}()
	}
	for i, s := range srvs {
		time.Sleep(500 * time.Millisecond)
		s.Restart()
		restarted := time.Now()
		// Generous: under -race and the four clients, a recovery's 16,384
		// slot writes and reads take seconds on a busy 2-core machine.
		if !poll(60*time.Second, func() bool { return inService(health(t, s)) }) {
			t.Fatalf("node %d not back in service 60 s after its restart: %+v", i, rl.NodeReports())
		}
		t.Logf("node %d back in service %v after its restart", i, time.Since(restarted).Round(time.Millisecond))
	}
	time.Sleep(500 * time.Millisecond)
	stop()
	var total tally
	for range 4 {
		n := <-results
		total.ok += n.ok
		total.failed += n.failed
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("rolling restart of 3 everysec nodes: %d acquisitions granted, %d found no quorum (%.2f %%)",
		total.ok, total.failed, 100*float64(total.failed)/float64(total.ok+total.failed))
	if total.ok == 0 {
		t.Fatal("nothing granted during the rolling restart")
	}
}

// TestAMissingSlotCounterIsRepaired: one slot's counter is deleted on A
// (by hand, or evicted before the policy was fixed). A's record is whole,
// so its checks find it in service, but its scripts refuse every lock of
// that slot. A lock operation that meets the refusal has the guard audit
// A's slots: A is quarantined and recovers from B and C, counter included,
// and serves the slot again.
func TestAMissingSlotCounterIsRepaired(t *testing.T) {
	srvs := redistest.StartN(t, 3, nil)
	rl := recoverGateway(t, urlsOf(srvs), true, nil)
	const res = "slot-counter"
	top := cycle(t, rl, res)
	ra := connect(t, srvs[0]).Client()
	ctx := context.Background()
	key := slotKey(lockcore.FenceSlot(res))
	if err := ra.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	// A copy of the lease can reach A by recovery's adoption before the
	// recovery's last step repairs the counters; A is repaired once it
	// holds the lease with its counter back and no quarantine mark.
	var l *lockcore.Lease
	var counter []any
	if !poll(10*time.Second, func() bool {
		l = acquireWithin(t, rl, lockcore.AcquireRequest{Resource: res, TTL: time.Second}, 3*time.Second)
		held := ra.HGet(ctx, "lockgate:{"+res+"}:lock", "lease").Val() == l.ID
		counter = ra.HMGet(ctx, key, "n", "q").Val()
		_ = rl.Release(ctx, lockcore.ReleaseRequest{Resource: res, LeaseID: l.ID})
		return held && len(counter) == 2 && counter[0] != nil && counter[1] == nil
	}) {
		t.Fatalf("A still refuses %s 10 s after its slot counter was deleted (counter n, q: %v)", res, counter)
	}
	if n, err := strconv.ParseInt(fmt.Sprint(counter[0]), 10, 64); err != nil || n < top {
		t.Fatalf("A's counter for the slot: %v, %v; want at least %d", counter[0], err, top)
	}
	if l.Token <= top {
		t.Fatalf("token %d after %d", l.Token, top)
	}
}

// TestAnUpgradeFromTheHeartbeatRecordKeepsServing: nodes that an earlier
// lockgate kept in service carry no record of a server process (data
// format 1). A gateway of this version takes them over at its first check
// instead of finding all of them lost at once, which would leave no node
// to recover from and stop the cluster for a quarantine (MaxTTL).
func TestAnUpgradeFromTheHeartbeatRecordKeepsServing(t *testing.T) {
	srvs := redistest.StartN(t, 3, nil)
	ctx := context.Background()
	for _, s := range srvs {
		initializeServer(t, s)
		if err := connect(t, s).Client().HDel(ctx, "lockgate:{meta}:node", "rid", "fmt").Err(); err != nil { // as format 1 left it
			t.Fatal(err)
		}
	}
	opts := recoverOptions()
	opts.MaxTTL = time.Minute
	nodes := make([]lockcore.Node, 3)
	for i, s := range srvs {
		nodes[i] = connect(t, s)
	}
	rl, err := lockcore.New(nodes, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rl.Close)
	acquireWithin(t, rl, lockcore.AcquireRequest{Resource: "upgraded", TTL: time.Second}, 3*time.Second)
	for i, s := range srvs {
		if h := health(t, s); !inService(h) {
			t.Fatalf("node %d after the upgrade: %+v", i, h)
		}
	}
}

// TestAListingCountsOnlyNodesInService: node 0 restarted empty and cannot
// recover (node 2 is down); node 1 holds three locks. A listing needs a
// quorum of nodes in service, as every lock operation does: node 0's
// empty answer must not make up a quorum with node 1 and list nothing
// while three locks are held.
func TestAListingCountsOnlyNodesInService(t *testing.T) {
	srvs := redistest.StartN(t, 3, &redistest.Options{AOF: true})
	rl := recoverGateway(t, urlsOf(srvs), true, nil)
	for i := range 3 {
		acquireWithin(t, rl, lockcore.AcquireRequest{Resource: fmt.Sprintf("listed-%d", i), TTL: recoverTTL}, 3*time.Second)
	}
	srvs[2].Kill()
	restartEmpty(t, srvs[0])
	time.Sleep(200 * time.Millisecond) // the guard's checks find node 0 lost
	page, err := rl.List(context.Background(), "", 0, "")
	if err == nil {
		t.Fatalf("listed %d locks with node 0 out of service and node 2 down; want no quorum", len(page.Locks))
	}
	if !errors.Is(err, lockcore.ErrNoQuorum) {
		t.Fatalf("err %v, want ErrNoQuorum", err)
	}
}
