package redisnode_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/internal/faultproxy"
	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/internal/unprotected"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/nodetest"
	"github.com/lockgate/lockgate/lockcore/redisnode"
)

// The two scenarios of the data-loss issue, each run with the protection on
// (it must hold) and off (it must break as the issue measured it, which
// shows that the scenario can catch the fault).

// lossRedlock is a gateway replica over srvs with a short maximum TTL (so a
// quarantine ends within the test) and a fast guard.
func lossRedlock(t *testing.T, srvs []*redistest.Server, protect bool) *lockcore.Redlock {
	t.Helper()
	urls := make([]string, len(srvs))
	for i, s := range srvs {
		urls[i] = s.URL()
	}
	return lossRedlockAt(t, urls, protect)
}

// lossRedlockAt is lossRedlock over Redis URLs (a proxy's, say).
func lossRedlockAt(t *testing.T, urls []string, protect bool) *lockcore.Redlock {
	t.Helper()
	return gatewayOver(t, urls, protect, &lockcore.Options{NodeTimeout: 200 * time.Millisecond, MinTTL: 400 * time.Millisecond,
		MaxTTL: lossMaxTTL, CheckInterval: 20 * time.Millisecond}, nil)
}

// gatewayOver is a gateway replica over urls with opts, protected or not,
// with node i wrapped by wrap if it is not nil; closed when t ends.
func gatewayOver(t *testing.T, urls []string, protect bool, opts *lockcore.Options, wrap func(int, *redisnode.Node) lockcore.Node) *lockcore.Redlock {
	t.Helper()
	nodes := make([]lockcore.Node, len(urls))
	for i, u := range urls {
		n, err := redisnode.New(u)
		if err != nil {
			t.Fatal(err)
		}
		if !protect {
			// The Redlock runs unprotected too when every node is
			// (internal/unprotected): wrap must keep the mark.
			n.Unprotect(unprotected.Key{})
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

const lossMaxTTL = 1500 * time.Millisecond

// restartEmpty kills srv, deletes its data (AOF and snapshot) and starts it
// again: a node that lost everything it had.
func restartEmpty(t *testing.T, srv *redistest.Server) {
	t.Helper()
	srv.Kill()
	for _, name := range []string{"appendonlydir", "dump.rdb"} {
		if err := os.RemoveAll(filepath.Join(srv.Dir(), name)); err != nil {
			t.Fatal(err)
		}
	}
	srv.Restart()
}

// cycle acquires and releases resource once and returns the token.
func cycle(t *testing.T, rl *lockcore.Redlock, resource string) int64 {
	t.Helper()
	l := acquireWithin(t, rl, lockcore.AcquireRequest{Resource: resource, TTL: time.Second}, 3*time.Second)
	deadline := time.Now().Add(3 * time.Second)
	for {
		err := rl.Release(context.Background(), lockcore.ReleaseRequest{Resource: resource, LeaseID: l.ID})
		if err == nil || errors.Is(err, lockcore.ErrNotHeld) { // NotHeld: an earlier try released it
			return l.Token
		}
		if time.Now().After(deadline) {
			t.Fatalf("release: %v", err)
		}
	}
}

// freeEverywhere waits until no server holds resource: a release is
// answered at a quorum, and a node slower than the grace (a loaded
// machine) may still be releasing it.
func freeEverywhere(t *testing.T, srvs []*redistest.Server, resource string) {
	t.Helper()
	nodes := make([]lockcore.Node, len(srvs))
	for i, s := range srvs {
		nodes[i] = newNode(t, s)
	}
	holdEverywhere(t, nodes, resource, "")
}

// holdEverywhere waits, for up to 10 s, until every node holds resource for
// lease, or holds it for nobody when lease is "": a call is answered at the
// first quorum, and a node slower than the grace may still be doing its
// part.
func holdEverywhere(t *testing.T, nodes []lockcore.Node, resource, lease string) {
	t.Helper()
	for i, n := range nodes {
		var l lockcore.NodeLock
		var err error
		if !poll(10*time.Second, func() bool {
			l, err = n.Inspect(context.Background(), resource)
			return err == nil && l.Found == (lease != "") && l.Lease == lease
		}) {
			t.Fatalf("node %d (%s) after 10 s: %s %+v, %v; want it held by %q", i, n, resource, l, err, lease)
		}
	}
}

// TestALaggingNodeThenAnEmptyRestart: C misses five grants while down and
// comes back; then A restarts empty while B is paused. Unprotected, the
// next grant (A and C) repeats an old token: A starts again at 1, C lags.
// Protected, C caught up with the first grant after its return, and A is
// quarantined: no grant at all until B is back, then a higher token.
func TestALaggingNodeThenAnEmptyRestart(t *testing.T) {
	for _, protect := range []bool{true, false} {
		t.Run(map[bool]string{true: "protected", false: "unprotected"}[protect], func(t *testing.T) {
			srvs := redistest.StartN(t, 3, &redistest.Options{AOF: true})
			a, b, c := srvs[0], srvs[1], srvs[2]
			rl := lossRedlock(t, srvs, protect)
			const res = "lagging"
			var top int64
			c.Kill()
			for range 5 {
				top = max(top, cycle(t, rl, res))
			}
			c.Restart()
			// Protected, these grants catch C up. Unprotected, C stays behind
			// only while it is never among the first nodes heard, since a
			// grant heard from C and one other node makes the gateway write
			// the token back to all three (fencing, step 3): which nodes
			// answer first is up to the machine, so the unprotected run
			// goes on at once, with C as far behind as its downtime left it.
			for range map[bool]int{true: 3}[protect] {
				top = max(top, cycle(t, rl, res))
			}
			// C restarted: a new process, so it serves again only once the
			// guard recovered it from A and B. A restart of A before that
			// leaves no two nodes to recover either from.
			if protect && !poll(10*time.Second, func() bool {
				h := health(t, c)
				return h.Initialized && !h.Quarantined && !h.Lost
			}) {
				t.Fatalf("C not back in service 10 s after its restart: %+v", health(t, c))
			}
			restartEmpty(t, a)
			b.Pause()
			l, err := rl.Acquire(context.Background(), lockcore.AcquireRequest{Resource: res, TTL: time.Second})
			b.Resume()
			if !protect {
				if err != nil || l.Token > top {
					t.Fatalf("unprotected: got %+v, %v; the scenario should repeat a token ≤ %d", l, err, top)
				}
				t.Logf("unprotected: token %d granted after token %d, as the issue found", l.Token, top)
				return
			}
			if !errors.Is(err, lockcore.ErrNoQuorum) {
				t.Fatalf("with A lost and B paused: %+v, %v; want ErrNoQuorum", l, err)
			}
			if next := cycle(t, rl, res); next <= top {
				t.Fatalf("token %d after %d", next, top)
			}
		})
	}
}

// TestAnEmptyRestartUnderALiveHolder: L1 holds on A and B (C was down
// when it acquired); A restarts empty, B pauses, C is back. Unprotected, L2
// is granted by A and C while L1 still holds, with L1's token. Protected, A
// is quarantined and L2 gets nothing.
func TestAnEmptyRestartUnderALiveHolder(t *testing.T) {
	for _, protect := range []bool{true, false} {
		t.Run(map[bool]string{true: "protected", false: "unprotected"}[protect], func(t *testing.T) {
			srvs := redistest.StartN(t, 3, &redistest.Options{AOF: true})
			a, b, c := srvs[0], srvs[1], srvs[2]
			rl := lossRedlock(t, srvs, protect)
			const res = "live-holder"
			for range 3 {
				cycle(t, rl, res)
			}
			freeEverywhere(t, srvs, res) // a node may still have the last release in flight
			c.Kill()                     // paused, it would run L1's request once resumed
			l1 := nodetest.MustAcquire(t, rl, lockcore.AcquireRequest{Resource: res, TTL: lossMaxTTL})
			c.Restart()
			restartEmpty(t, a)
			b.Pause()
			l2, err := rl.Acquire(context.Background(), lockcore.AcquireRequest{Resource: res, TTL: time.Second})
			b.Resume()
			live := time.Until(l1.Expires) > 0
			if !protect {
				if err != nil || !live || l2.Token > l1.Token {
					t.Fatalf("unprotected: L2 got %+v, %v (L1 live: %v, token %d); the scenario should grant L2 "+
						"L1's token or lower while L1 holds", l2, err, live, l1.Token)
				}
				t.Logf("unprotected: L2 granted token %d while L1 holds token %d, as the issue found", l2.Token, l1.Token)
				return
			}
			if err == nil {
				t.Fatalf("L2 granted %+v while L1 (token %d) holds", l2, l1.Token)
			}
		})
	}
}

// TestALostNodeIsRepairedAfterItsQuarantine: A restarts empty, is
// quarantined, and once its quarantine (longer than the largest TTL) ends
// it is repaired from B and C: with C down, A and B grant a token above
// every earlier one.
func TestALostNodeIsRepairedAfterItsQuarantine(t *testing.T) {
	srvs := redistest.StartN(t, 3, &redistest.Options{AOF: true})
	a, c := srvs[0], srvs[2]
	rl := lossRedlock(t, srvs, true)
	const res = "repaired"
	var top int64
	for range 4 {
		top = max(top, cycle(t, rl, res))
	}
	restartEmpty(t, a)
	lost := time.Now()                // A's quarantine begins after this, when a check finds the loss
	top = max(top, cycle(t, rl, res)) // B and C, while A is out
	c.Kill()
	deadline := lost.Add(lossMaxTTL + 3*time.Second)
	for {
		l, err := rl.Acquire(context.Background(), lockcore.AcquireRequest{Resource: res, TTL: time.Second})
		if err == nil {
			if since := time.Since(lost); since < lossMaxTTL {
				t.Fatalf("A served %v after its loss, before its quarantine (≥ %v) ended", since, lossMaxTTL)
			}
			if l.Token <= top {
				t.Fatalf("token %d after repair, want above %d", l.Token, top)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("A was not back in service %v after its loss: %v", time.Since(lost), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// tokensOf reads the counter of resource's slot on srv, as stored.
func tokensOf(t *testing.T, srv *redistest.Server, resource string) int64 {
	t.Helper()
	key := "lockgate:{" + lockcore.SlotTag(lockcore.FenceSlot(resource)) + "}:tokens"
	v, err := connect(t, srv).Client().HGet(context.Background(), key, "n").Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	return v
}

// TestALaggingNodeCatchesUp: a node that missed grants while down is raised
// to the current token by the grants after its return, in the background
// (the first one normally; a later one if that raise failed on a loaded
// machine); unprotected it stays behind whatever the number of grants.
func TestALaggingNodeCatchesUp(t *testing.T) {
	for _, protect := range []bool{true, false} {
		t.Run(map[bool]string{true: "protected", false: "unprotected"}[protect], func(t *testing.T) {
			// Node 2 is reached through a proxy that delays its replies
			// from its return on: it is never among the first two nodes
			// heard, so only the catch-up of late answers can raise it
			// (a grant heard from it early would be fenced up anyway).
			srvs := redistest.StartN(t, 3, &redistest.Options{AOF: true})
			px, err := faultproxy.Start(srvs[2].Addr())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { px.Close() })
			rl := lossRedlockAt(t, []string{srvs[0].URL(), srvs[1].URL(), "redis://" + px.Addr()}, protect)
			const res = "catch-up"
			// Every node initialized first: node 2 then restarts from its
			// AOF (appendfsync always) with its data, only behind.
			if err := rl.Ready(context.Background()); err != nil {
				t.Fatal(err)
			}
			srvs[2].Kill()
			for range 4 {
				cycle(t, rl, res)
			}
			srvs[2].Restart()
			px.SetDelay(30 * time.Millisecond)
			// The new server process serves once checked (the guard checks
			// every 20 ms here; readiness checks at once).
			if err := rl.Ready(context.Background()); err != nil {
				t.Fatal(err)
			}
			var tok, got int64
			for range 10 {
				tok = cycle(t, rl, res)
				deadline := time.Now().Add(500 * time.Millisecond)
				for got = tokensOf(t, srvs[2], res); got < tok && time.Now().Before(deadline); got = tokensOf(t, srvs[2], res) {
					time.Sleep(10 * time.Millisecond)
				}
				if got >= tok {
					break
				}
			}
			if protect != (got >= tok) {
				t.Fatalf("after 10 grants the returned node's counter is %d, the last token %d (protected: %v)", got, tok, protect)
			}
		})
	}
}

// TestANodeBackFromAnOlderCopyIsQuarantined: A's data files are copied,
// more grants follow, and A restarts from the old copy (a restore from
// backup, or a disk that lost its last writes). Its record names the
// server process before the restart: it is quarantined, cannot recover
// with B paused, and nothing is granted.
func TestANodeBackFromAnOlderCopyIsQuarantined(t *testing.T) {
	srvs := redistest.StartN(t, 3, &redistest.Options{AOF: true})
	a, b := srvs[0], srvs[1]
	rl := lossRedlock(t, srvs, true)
	const res = "older-copy"
	cycle(t, rl, res)
	old := copyAOF(t, a)
	var top int64
	for range 3 {
		top = max(top, cycle(t, rl, res))
	}
	restoreAOF(t, a, old)
	b.Pause()
	time.Sleep(200 * time.Millisecond) // several guard passes
	l, err := rl.Acquire(context.Background(), lockcore.AcquireRequest{Resource: res, TTL: time.Second})
	b.Resume()
	if err == nil {
		t.Fatalf("granted %+v (after token %d) by A, back from an older copy, and C", l, top)
	}
	if !errors.Is(err, lockcore.ErrNoQuorum) {
		t.Fatalf("err %v, want ErrNoQuorum", err)
	}
}

// TestRestartsAndQuarantine: a restarted node is a new server process,
// whatever its persistence: with both other nodes answering it recovers
// from them at once; with one of them paused it cannot, and stays out.
func TestRestartsAndQuarantine(t *testing.T) {
	for _, tc := range []struct {
		name      string
		fsync     string
		recovered bool
	}{
		{"appendfsync always, others up: recovers", "always", true},
		{"appendfsync everysec, others up: recovers", "everysec", true},
		{"appendfsync always, one other paused: stays out", "always", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srvs := redistest.StartN(t, 3, &redistest.Options{AOF: true, Args: []string{"--appendfsync", tc.fsync}})
			a, b := srvs[0], srvs[1]
			rl := lossRedlock(t, srvs, true)
			const res = "restarts"
			top := cycle(t, rl, res)
			freeEverywhere(t, srvs, res) // before A restarts with what it holds
			if !tc.recovered {
				b.Pause()
				defer b.Resume()
			}
			a.Restart()
			if tc.recovered {
				waitUntil(t, "A recovered", func() bool { return inService(health(t, a)) })
				b.Pause()
				defer b.Resume()
			}
			deadline := time.Now().Add(lossMaxTTL / 2)
			var err error
			for time.Now().Before(deadline) {
				var l *lockcore.Lease
				if l, err = rl.Acquire(context.Background(), lockcore.AcquireRequest{Resource: res, TTL: time.Second}); err == nil {
					if !tc.recovered {
						t.Fatalf("granted %+v by A, restarted and not recovered, and C", l)
					}
					if l.Token <= top {
						t.Fatalf("token %d after %d", l.Token, top)
					}
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
			if tc.recovered {
				t.Fatalf("A, recovered, did not serve within %v: %v", lossMaxTTL/2, err)
			}
		})
	}
}

// TestAnUpgradeKeepsTokensGrowing: a node of an earlier lockgate holds
// per-resource counters (lockgate:{resource}:fence). The gateway finds a
// new cluster (no node record) and initializes it: the next tokens are
// above those counters, and the old keys are gone.
func TestAnUpgradeKeepsTokensGrowing(t *testing.T) {
	srvs := redistest.StartN(t, 3, &redistest.Options{AOF: true})
	ctx := context.Background()
	old := map[string]int64{"upgraded-a": 41, "upgraded-b": 7}
	for _, s := range srvs {
		rdb := connect(t, s).Client()
		for res, v := range old {
			if err := rdb.Set(ctx, "lockgate:{"+res+"}:fence", v, 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	rl := lossRedlock(t, srvs, true)
	for res, v := range old {
		if tok := cycle(t, rl, res); tok <= v {
			t.Fatalf("%s: token %d after the old counter %d", res, tok, v)
		}
	}
	for _, s := range srvs {
		if n, err := connect(t, s).Client().Exists(ctx, "lockgate:{upgraded-a}:fence", "lockgate:{upgraded-b}:fence").Result(); err != nil || n != 0 {
			t.Fatalf("old counters left: %d, %v", n, err)
		}
	}
}

// TestANewServerProcessIsNotCountedBeforeItIsChecked: the guard checks once
// an hour here, so only the connection hook stands between a node restarted
// from an older copy and the next grant. L1 holds on A and B (C was down);
// A comes back from a copy made before L1; B pauses. L2 must not be
// granted by A and C while L1 holds.
func TestANewServerProcessIsNotCountedBeforeItIsChecked(t *testing.T) {
	srvs := redistest.StartN(t, 3, &redistest.Options{AOF: true})
	a, b, c := srvs[0], srvs[1], srvs[2]
	nodes := make([]lockcore.Node, 3)
	for i, s := range srvs {
		nodes[i] = connectURL(t, s.URL())
	}
	rl, err := lockcore.New(nodes, &lockcore.Options{NodeTimeout: 200 * time.Millisecond, MinTTL: 400 * time.Millisecond,
		MaxTTL: time.Minute, CheckInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rl.Close)
	const res = "new-process"
	cycle(t, rl, res)
	old := copyAOF(t, a)
	c.Kill()
	l1 := nodetest.MustAcquire(t, rl, lockcore.AcquireRequest{Resource: res, TTL: time.Minute})
	c.Restart()
	restoreAOF(t, a, old)
	b.Pause()
	defer b.Resume()
	l2, err := rl.Acquire(context.Background(), lockcore.AcquireRequest{Resource: res, TTL: time.Second})
	if err == nil {
		t.Fatalf("L2 granted %+v while L1 (token %d) holds: A, back from an older copy, was counted unchecked", l2, l1.Token)
	}
}
