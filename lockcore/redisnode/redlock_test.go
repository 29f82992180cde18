package redisnode_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/goroutines"
	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/nodetest"
	"github.com/lockgate/lockgate/lockcore/redisnode"
)

// Integration tests of the Redlock over real redis-server processes. Node
// calls get far more time than the 50ms default: on a loaded machine
// running the race detector next to several servers, a healthy node can be
// slow to answer, and a spurious timeout would make these tests flaky.
const (
	itNodeTimeout = 500 * time.Millisecond
	itMinTTL      = 1500 * time.Millisecond
)

func itOptions() *lockcore.Options {
	return &lockcore.Options{NodeTimeout: itNodeTimeout, MinTTL: itMinTTL}
}

// newRedlock connects a fresh client to each server (as one gateway replica
// does) and returns a Redlock over them, closed when t ends.
func newRedlock(t *testing.T, srvs []*redistest.Server, opts *lockcore.Options) *lockcore.Redlock {
	t.Helper()
	nodes := make([]lockcore.Node, len(srvs))
	for i, s := range srvs {
		nodes[i] = newNode(t, s)
	}
	if opts == nil {
		opts = itOptions()
	}
	rl, err := lockcore.New(nodes, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rl.Close)
	return rl
}

// acquireWithin retries Acquire until it succeeds, failing t after d.
func acquireWithin(t *testing.T, rl *lockcore.Redlock, req lockcore.AcquireRequest, d time.Duration) *lockcore.Lease {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		l, err := rl.Acquire(context.Background(), req)
		if err == nil {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("acquire %s did not succeed within %v: %v", req.Resource, d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestRedlockBasics(t *testing.T) {
	for _, n := range []int{1, 3, 5} {
		t.Run(fmt.Sprintf("%d nodes", n), func(t *testing.T) {
			ctx := context.Background()
			srvs := redistest.StartN(t, n, nil)
			rl := newRedlock(t, srvs, nil)
			if err := rl.Ready(ctx); err != nil {
				t.Fatal(err)
			}
			const ttl = 10 * time.Second

			lease := nodetest.MustAcquire(t, rl, lockcore.AcquireRequest{Resource: "basics", TTL: ttl, Owner: "it-worker"})
			if lease.Token < 1 || lease.Reentered || lease.Validity <= 0 || lease.Validity >= ttl || !lockcore.ValidLeaseID(lease.ID) {
				t.Fatalf("lease = %+v", lease)
			}
			holdEverywhere(t, rl.Nodes(), "basics", lease.ID)
			for i, node := range rl.Nodes() {
				l, err := node.Inspect(ctx, "basics")
				if err != nil || !l.Found || l.Lease != lease.ID || l.Token != lease.Token || l.Owner != "it-worker" {
					t.Fatalf("node %d: %+v, %v", i, l, err)
				}
			}
			info, err := rl.Inspect(ctx, "basics")
			if err != nil || info.Token != lease.Token || info.Owner != "it-worker" || info.TTL != ttl || info.Remaining <= 0 || info.Remaining > ttl {
				t.Fatalf("inspect = %+v, %v", info, err)
			}

			retry := nodetest.MustAcquire(t, rl, lockcore.AcquireRequest{Resource: "basics", LeaseID: lease.ID, TTL: ttl})
			if !retry.Reentered || retry.Token != lease.Token {
				t.Fatalf("retry = %+v, want reentered with token %d", retry, lease.Token)
			}
			_, err = rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "basics", TTL: ttl})
			var te *lockcore.TakenError
			if !errors.As(err, &te) || te.RetryAfter <= 0 || te.RetryAfter > ttl {
				t.Fatalf("another lease: err = %v, want *TakenError", err)
			}

			ext, err := rl.Extend(ctx, lockcore.ExtendRequest{Resource: "basics", LeaseID: lease.ID, TTL: 2 * ttl, IfToken: lease.Token})
			if err != nil || ext.TTL != 2*ttl || ext.Token != lease.Token {
				t.Fatalf("extend = %+v, %v", ext, err)
			}
			if ext, err = rl.Extend(ctx, lockcore.ExtendRequest{Resource: "basics", LeaseID: lease.ID}); err != nil || ext.TTL != 2*ttl {
				t.Fatalf("extend with TTL 0 = %+v, %v; want the last TTL %v", ext, err, 2*ttl)
			}
			if _, err = rl.Extend(ctx, lockcore.ExtendRequest{Resource: "basics", LeaseID: lease.ID, IfToken: lease.Token + 1}); !errors.Is(err, lockcore.ErrTokenMismatch) {
				t.Fatalf("extend with a stale token: err = %v", err)
			}
			if err = rl.Release(ctx, lockcore.ReleaseRequest{Resource: "basics", LeaseID: lockcore.NewLeaseID()}); !errors.Is(err, lockcore.ErrHeldByOther) {
				t.Fatalf("release by another lease: err = %v", err)
			}

			if err = rl.Release(ctx, lockcore.ReleaseRequest{Resource: "basics", LeaseID: lease.ID}); err != nil {
				t.Fatal(err)
			}
			if _, err = rl.Inspect(ctx, "basics"); !errors.Is(err, lockcore.ErrNotHeld) {
				t.Fatalf("inspect after release: err = %v", err)
			}
			if err = rl.Release(ctx, lockcore.ReleaseRequest{Resource: "basics", LeaseID: lease.ID}); !errors.Is(err, lockcore.ErrNotHeld) {
				t.Fatalf("second release: err = %v", err)
			}
			next := nodetest.MustAcquire(t, rl, lockcore.AcquireRequest{Resource: "basics", TTL: ttl})
			if next.Token <= lease.Token {
				t.Fatalf("next token %d after %d", next.Token, lease.Token)
			}
		})
	}
}

// grant is one successful acquisition in a history.
type grant struct {
	resource  string
	token     int64
	invoked   time.Time // Acquire called
	acquired  time.Time // Acquire returned
	releasing time.Time // Release about to be called: held at least until then
	client    int
}

func TestRedlockTokensUnderContention(t *testing.T) {
	// 32 clients over three replicas race for four resources on five nodes.
	// Checked on the history: tokens are unique per resource; a grant
	// requested after another returned has a higher token; and no two
	// holders' windows [acquired, releasing] overlap.
	const (
		nodes     = 5
		replicas  = 3
		clients   = 32
		resources = 4
		perClient = 8
		ttl       = 10 * time.Second
	)
	srvs := redistest.StartN(t, nodes, nil)
	opts := &lockcore.Options{NodeTimeout: time.Second, MinTTL: 3 * time.Second}
	var rls []*lockcore.Redlock
	for range replicas {
		rls = append(rls, newRedlock(t, srvs, opts))
	}

	var mu sync.Mutex
	var history []grant
	retries := 0
	errc := make(chan error, clients)
	var wg sync.WaitGroup
	deadline := time.Now().Add(2 * time.Minute)
	for c := range clients {
		wg.Go(func() {
			rl := rls[c%replicas]
			rng := rand.New(rand.NewPCG(uint64(c), 1))
			for done := 0; done < perClient; {
				if time.Now().After(deadline) {
					errc <- fmt.Errorf("client %d: only %d of %d grants within 2 minutes", c, done, perClient)
					return
				}
				res := fmt.Sprintf("hot-%d", rng.IntN(resources))
				invoked := time.Now()
				lease, err := rl.Acquire(context.Background(), lockcore.AcquireRequest{Resource: res, TTL: ttl, Wait: 30 * time.Second})
				acquired := time.Now()
				if errors.Is(err, lockcore.ErrTaken) || errors.Is(err, lockcore.ErrNoQuorum) {
					mu.Lock()
					retries++
					mu.Unlock()
					continue // slow nodes or a long queue: not a violation
				}
				if err != nil {
					errc <- fmt.Errorf("client %d: acquire: %w", c, err)
					return
				}
				if lease.Reentered {
					errc <- fmt.Errorf("client %d: a fresh lease came back reentered: %+v", c, lease)
					return
				}
				if rng.IntN(4) == 0 {
					time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond) // some work
				}
				releasing := time.Now()
				mu.Lock()
				history = append(history, grant{resource: res, token: lease.Token, invoked: invoked, acquired: acquired, releasing: releasing, client: c})
				mu.Unlock()
				for try := 0; ; try++ {
					err := rl.Release(context.Background(), lockcore.ReleaseRequest{Resource: res, LeaseID: lease.ID})
					if err == nil {
						break
					}
					// A release that failed for want of a quorum may have
					// run on the nodes that did not answer in time: then the
					// lease holds nothing when it tries again.
					if try > 0 && (errors.Is(err, lockcore.ErrNotHeld) || errors.Is(err, lockcore.ErrHeldByOther)) {
						break
					}
					if !errors.Is(err, lockcore.ErrNoQuorum) {
						errc <- fmt.Errorf("client %d: release: %w", c, err)
						return
					}
				}
				done++
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	t.Logf("%d grants, %d retried attempts", len(history), retries)
	if len(history) != clients*perClient {
		t.Fatalf("%d grants recorded, want %d", len(history), clients*perClient)
	}

	byRes := map[string][]grant{}
	for _, g := range history {
		byRes[g.resource] = append(byRes[g.resource], g)
	}
	for res, gs := range byRes {
		seen := map[int64]grant{}
		for _, g := range gs {
			if prev, dup := seen[g.token]; dup {
				t.Errorf("%s: token %d granted twice (clients %d and %d)", res, g.token, prev.client, g.client)
			}
			seen[g.token] = g
		}
		for _, a := range gs {
			for _, b := range gs {
				if b.invoked.After(a.acquired) && b.token <= a.token {
					t.Errorf("%s: client %d requested after client %d's grant returned (token %d) but got token %d",
						res, b.client, a.client, a.token, b.token)
				}
			}
		}
		slices.SortFunc(gs, func(a, b grant) int { return a.acquired.Compare(b.acquired) })
		for i := 1; i < len(gs); i++ {
			if prev, cur := gs[i-1], gs[i]; cur.acquired.Before(prev.releasing) {
				t.Errorf("%s: client %d (token %d) acquired while client %d (token %d) still held it",
					res, cur.client, cur.token, prev.client, prev.token)
			}
		}
	}
}

func TestRedlockMinorityKilled(t *testing.T) {
	for _, tc := range []struct{ nodes, killed int }{{3, 1}, {5, 2}} {
		t.Run(fmt.Sprintf("%d of %d nodes killed", tc.killed, tc.nodes), func(t *testing.T) {
			ctx := context.Background()
			srvs := redistest.StartN(t, tc.nodes, nil)
			rl := newRedlock(t, srvs, nil)
			held := nodetest.MustAcquire(t, rl, lockcore.AcquireRequest{Resource: "minority", TTL: 10 * time.Second})
			for _, s := range srvs[tc.nodes-tc.killed:] {
				s.Kill()
			}
			if err := rl.Ready(ctx); err != nil {
				t.Fatalf("ready: %v", err)
			}
			if _, err := rl.Extend(ctx, lockcore.ExtendRequest{Resource: "minority", LeaseID: held.ID}); err != nil {
				t.Fatalf("extend: %v", err)
			}
			if info, err := rl.Inspect(ctx, "minority"); err != nil || info.Token != held.Token {
				t.Fatalf("inspect: %+v, %v", info, err)
			}
			if err := rl.Release(ctx, lockcore.ReleaseRequest{Resource: "minority", LeaseID: held.ID}); err != nil {
				t.Fatalf("release: %v", err)
			}
			next := nodetest.MustAcquire(t, rl, lockcore.AcquireRequest{Resource: "minority", TTL: 10 * time.Second})
			if next.Token <= held.Token {
				t.Fatalf("token %d after %d", next.Token, held.Token)
			}
			// A new name's token is above every token the survivors'
			// counters for its slot gave out.
			var prev int64
			for _, s := range srvs[:tc.nodes-tc.killed] {
				prev = max(prev, tokensOf(t, s, "minority-fresh"))
			}
			fresh := nodetest.MustAcquire(t, rl, lockcore.AcquireRequest{Resource: "minority-fresh", TTL: 10 * time.Second})
			if fresh.Token <= prev {
				t.Fatalf("fresh lease's token %d, want above the survivors' counters (%d)", fresh.Token, prev)
			}
		})
	}
}

// TestRedlockMajorityKilledRecovers: a majority of the nodes restarts from
// AOF files synced once a second (appendfsync everysec), which may lack the
// tail of their writes. No quorum of other nodes is left to recover them
// from, and they are not durable (rule 8 does not apply: see
// TestAMajorityRestartOfAlwaysNodes for nodes on appendfsync always), so
// they serve again only once their quarantine has outlasted every lock
// they may have held, and tokens keep growing.
func TestRedlockMajorityKilledRecovers(t *testing.T) {
	for _, tc := range []struct{ nodes, killed int }{{3, 2}, {5, 3}} {
		t.Run(fmt.Sprintf("%d of %d nodes killed", tc.killed, tc.nodes), func(t *testing.T) {
			ctx := context.Background()
			srvs := redistest.StartN(t, tc.nodes, &redistest.Options{AOF: true, Args: []string{"--appendfsync", "everysec"}})
			opts := itOptions()
			opts.MaxTTL, opts.CheckInterval = 3*time.Second, 50*time.Millisecond
			rl := newRedlock(t, srvs, opts)
			before := nodetest.MustAcquire(t, rl, lockcore.AcquireRequest{Resource: "majority", TTL: 2 * time.Second})
			if err := rl.Release(ctx, lockcore.ReleaseRequest{Resource: "majority", LeaseID: before.ID}); err != nil {
				t.Fatal(err)
			}
			killed := srvs[tc.nodes-tc.killed:]
			for _, s := range killed {
				s.Kill()
			}

			lease := lockcore.NewLeaseID()
			_, err := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "majority", LeaseID: lease, TTL: 2 * time.Second})
			var qe *lockcore.QuorumError
			if !errors.As(err, &qe) || !errors.Is(err, lockcore.ErrNoQuorum) || qe.Answered != tc.nodes-tc.killed || len(qe.Causes) != tc.killed {
				t.Fatalf("err = %v, want a QuorumError with %d answers", err, tc.nodes-tc.killed)
			}
			if err := rl.Ready(ctx); !errors.Is(err, lockcore.ErrNoQuorum) {
				t.Fatalf("ready with a majority down: %v", err)
			}
			// The survivors did grant; the failed attempt released them.
			for i, node := range rl.Nodes()[:tc.nodes-tc.killed] {
				if l, err := node.Inspect(ctx, "majority"); err != nil || l.Found {
					t.Fatalf("surviving node %d after the failed attempt: %+v, %v", i, l, err)
				}
			}

			for _, s := range killed {
				s.Restart()
			}
			restarted := time.Now()
			after := acquireWithin(t, rl, lockcore.AcquireRequest{Resource: "majority", TTL: 2 * time.Second}, 20*time.Second)
			if waited := time.Since(restarted); waited < opts.MaxTTL {
				t.Fatalf("granted %v after the restarts, before a quarantine of MaxTTL (%v)", waited, opts.MaxTTL)
			}
			if after.Token <= before.Token {
				t.Fatalf("token %d after recovery, %d before", after.Token, before.Token)
			}
		})
	}
}

func TestRedlockPausedNodes(t *testing.T) {
	ctx := context.Background()
	srvs := redistest.StartN(t, 3, nil)
	rl := newRedlock(t, srvs, nil)
	// A success costs one node timeout (500ms) on the paused node, a failure
	// two (the attempt, then the undo). 3s leaves room for a loaded machine
	// and stays below go-redis's 5s dial timeout, which a call that waited
	// for a dial instead of its own deadline would add.
	const bound = 3 * time.Second
	// The guard's first pass over the nodes is done before the pause, so
	// the bound measures the calls alone.
	if err := rl.Ready(ctx); err != nil {
		t.Fatal(err)
	}

	srvs[2].Pause()
	start := time.Now()
	lease, err := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "paused", TTL: 5 * time.Second})
	if err != nil {
		t.Fatalf("one of three nodes paused: %v", err)
	}
	if d := time.Since(start); d > bound {
		t.Fatalf("acquire took %v with a paused node", d)
	} else {
		t.Logf("acquire with one node paused: %v", d)
	}
	if _, err := rl.Extend(ctx, lockcore.ExtendRequest{Resource: "paused", LeaseID: lease.ID}); err != nil {
		t.Fatalf("extend: %v", err)
	}
	if err := rl.Release(ctx, lockcore.ReleaseRequest{Resource: "paused", LeaseID: lease.ID}); err != nil {
		t.Fatalf("release: %v", err)
	}

	srvs[1].Pause()
	start = time.Now()
	_, err = rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "paused-2", TTL: itMinTTL})
	if !errors.Is(err, lockcore.ErrNoQuorum) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("two of three nodes paused: err = %v, want ErrNoQuorum from node timeouts", err)
	}
	if d := time.Since(start); d > bound {
		t.Fatalf("failing took %v", d)
	} else {
		t.Logf("failing with two nodes paused: %v", d)
	}
	// Node 0 granted the failed attempt (then undid it): its counter moved.
	failed := tokensOf(t, srvs[0], "paused-2")

	srvs[1].Resume()
	srvs[2].Resume()
	// The resumed nodes may still run the failed attempt's acquire after its
	// undo; that lock is gone within its TTL at the latest.
	next := acquireWithin(t, rl, lockcore.AcquireRequest{Resource: "paused-2", TTL: 5 * time.Second}, 20*time.Second)
	again := nodetest.MustAcquire(t, rl, lockcore.AcquireRequest{Resource: "paused", TTL: 5 * time.Second})
	if again.Token <= lease.Token || next.Token <= failed {
		t.Fatalf("tokens after resume: %d (before %d), %d (node 0's counter after the failed attempt %d)", again.Token, lease.Token, next.Token, failed)
	}
}

// A node whose host drops packets (connection attempts hang) must not make
// a waiting acquire overrun its wait. It did: go-redis's pub/sub receive loop
// dials such a node with its 5 s dial timeout while holding the lock that
// SUBSCRIBE needs, so joining the queue took about 15 s, and the waiter then
// tried past its deadline and got a lock it had stopped waiting for.
func TestWaitEndsOnTimeWithAnUnreachableNode(t *testing.T) {
	srvs := redistest.StartN(t, 2, nil)
	nodes := []lockcore.Node{newNode(t, srvs[0]), newNode(t, srvs[1])}
	gone, err := redisnode.New("redis://" + redistest.Unreachable(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gone.Close() })
	rl, err := lockcore.New(append(nodes, gone), itOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rl.Close)
	ctx := context.Background()
	nodetest.MustAcquire(t, rl, lockcore.AcquireRequest{Resource: "unreachable", TTL: 30 * time.Second})

	const wait = time.Second
	// A try first, then a subscription to each node: each can take one
	// node timeout on the unreachable node; 4 s leaves room for a slow
	// machine and is far below what a dial timeout would add.
	const bound = 4 * time.Second
	for i := range 3 { // the first round creates the node's pub/sub connection
		start := time.Now()
		_, err := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "unreachable", TTL: 30 * time.Second, Wait: wait})
		d := time.Since(start)
		var taken *lockcore.TakenError
		if !errors.As(err, &taken) {
			t.Fatalf("round %d: err = %v, want ErrTaken after the wait", i, err)
		}
		if taken.RetryAfter < 20*time.Second {
			t.Fatalf("round %d: retry after %v, want the 30 s holder's time left", i, taken.RetryAfter)
		}
		t.Logf("round %d: %v", i, d)
		if d < wait || d > bound {
			t.Fatalf("round %d: a %v wait ended after %v, want between %v and %v", i, wait, d, wait, bound)
		}
	}
}

func TestRedlockExpiredLeaseCannotTouchTheNextHolder(t *testing.T) {
	ctx := context.Background()
	srvs := redistest.StartN(t, 3, nil)
	rl := newRedlock(t, srvs, nil)
	old := nodetest.MustAcquire(t, rl, lockcore.AcquireRequest{Resource: "expire", TTL: itMinTTL})
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := rl.Inspect(ctx, "expire")
		if errors.Is(err, lockcore.ErrNotHeld) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lock did not expire: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := rl.Extend(ctx, lockcore.ExtendRequest{Resource: "expire", LeaseID: old.ID}); !errors.Is(err, lockcore.ErrNotHeld) {
		t.Fatalf("extend an expired, free lock: err = %v, want ErrNotHeld", err)
	}

	newer := nodetest.MustAcquire(t, rl, lockcore.AcquireRequest{Resource: "expire", TTL: 20 * time.Second, Owner: "newer"})
	if newer.Token <= old.Token {
		t.Fatalf("token %d after %d", newer.Token, old.Token)
	}
	if _, err := rl.Extend(ctx, lockcore.ExtendRequest{Resource: "expire", LeaseID: old.ID, TTL: time.Hour}); !errors.Is(err, lockcore.ErrHeldByOther) {
		t.Fatalf("old lease extends: err = %v, want ErrHeldByOther", err)
	}
	if err := rl.Release(ctx, lockcore.ReleaseRequest{Resource: "expire", LeaseID: old.ID}); !errors.Is(err, lockcore.ErrHeldByOther) {
		t.Fatalf("old lease releases: err = %v, want ErrHeldByOther", err)
	}
	holdEverywhere(t, rl.Nodes(), "expire", newer.ID)
	for i, node := range rl.Nodes() {
		l, err := node.Inspect(ctx, "expire")
		if err != nil || l.Lease != newer.ID || l.Token != newer.Token || l.TTL != 20*time.Second || l.Remaining < 10*time.Second {
			t.Fatalf("node %d: the newer holder was touched: %+v, %v", i, l, err)
		}
	}
	if _, err := rl.Extend(ctx, lockcore.ExtendRequest{Resource: "expire", LeaseID: newer.ID}); err != nil {
		t.Fatalf("the newer holder extends: %v", err)
	}
}

// goroutineIn reports whether some goroutine in state (as a dump shows it)
// has fn in its stack.
func goroutineIn(state, fn string) bool { return goroutines.Count(state, fn) > 0 }

func TestRedlockWaitAcrossReplicas(t *testing.T) {
	// Two gateway replicas share three nodes. A waiter on one replica learns
	// of a release on the other only through the nodes' pub/sub announcements.
	// Both replicas wait on one fake clock, frozen: only an announcement
	// can wake the waiter, and a waiter that sleeps has one timer set on it.
	ctx := context.Background()
	srvs := redistest.StartN(t, 3, nil)
	clock := nodetest.NewClock(time.Unix(1_700_000_000, 0))
	opts := itOptions()
	opts.Clock = clock
	replicas := []*lockcore.Redlock{newRedlock(t, srvs, opts), newRedlock(t, srvs, opts)}
	probe := make([]*redisnode.Node, len(srvs))
	for i, s := range srvs {
		probe[i] = newNode(t, s)
	}
	const holdTTL = 30 * time.Second

	for round := range 4 {
		holderRL, waiterRL := replicas[round%2], replicas[1-round%2]
		res := fmt.Sprintf("replicas-%d", round%2) // reused: subscriptions come and go
		holder := nodetest.MustAcquire(t, holderRL, lockcore.AcquireRequest{Resource: res, TTL: holdTTL})
		// It was answered at a quorum: on a loaded machine the third node
		// can answer after the grace. Wait until it holds it too, or the
		// waiter's first attempt may get that node's grant, a split vote,
		// after which it tries again on the (frozen) clock.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			held := 0
			for _, p := range probe {
				if l, err := p.Inspect(ctx, res); err == nil && l.Lease == holder.ID {
					held++
				}
			}
			if held == len(probe) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %d of %d nodes hold the holder's lock after 10s", round, held, len(probe))
			}
		}

		type result struct {
			lease *lockcore.Lease
			err   error
		}
		out := make(chan result, 1)
		go func() {
			l, err := waiterRL.Acquire(ctx, lockcore.AcquireRequest{Resource: res, TTL: holdTTL, Wait: 25 * time.Second})
			out <- result{l, err}
		}()
		// Wait until the waiter sleeps, subscribed on every node.
		deadline := time.Now().Add(10 * time.Second)
		for {
			subscribed := 0
			for _, p := range probe {
				n, err := p.Client().PubSubNumSub(ctx, "lockgate:{"+res+"}:released").Result()
				if err == nil && n["lockgate:{"+res+"}:released"] >= 1 {
					subscribed++
				}
			}
			if subscribed == len(probe) && len(clock.Sleepers()) == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: waiter not parked and subscribed after 10s (%d of %d nodes subscribed)", round, subscribed, len(probe))
			}
			time.Sleep(5 * time.Millisecond)
		}

		released := time.Now()
		if err := holderRL.Release(ctx, lockcore.ReleaseRequest{Resource: res, LeaseID: holder.ID}); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-out:
			if r.err != nil {
				t.Fatalf("round %d: waiter: %v", round, r.err)
			}
			if r.lease.Token <= holder.Token {
				t.Fatalf("round %d: waiter token %d, holder %d", round, r.lease.Token, holder.Token)
			}
			if err := waiterRL.Release(ctx, lockcore.ReleaseRequest{Resource: res, LeaseID: r.lease.ID}); err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: the waiter on the other replica was not woken within 10s of the release (TTL %v, at %v)", round, holdTTL, released)
		}
	}
}

func TestWatchStartedAsTheLastOneStopsStillHears(t *testing.T) {
	// A queue empties (its watch stops, the last on the channel) just as a
	// new one starts watching the same resource: the new watch must not be
	// undone by the old one's UNSUBSCRIBE.
	ctx := context.Background()
	srv := redistest.Start(t, nil)
	n, pub := newNode(t, srv), newNode(t, srv)
	const lease = "lease-churn-0123456789"
	for i := range 300 {
		stop1, err := n.Watch(ctx, "churn", func() {})
		if err != nil {
			t.Fatal(err)
		}
		heard := make(chan struct{}, 8)
		stopped := make(chan struct{})
		go func() { stop1(); close(stopped) }()
		stop2, err := n.Watch(ctx, "churn", func() {
			select {
			case heard <- struct{}{}:
			default:
			}
		})
		<-stopped
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if _, err := pub.Acquire(ctx, lockcore.NodeAcquire{Resource: "churn", Lease: lease, TTL: 10 * time.Second}); err != nil {
			t.Fatal(err)
		}
		// The round's release is the only one announced while the new watch
		// is registered (the previous round's was heard before its stop).
		if rep, err := pub.Release(ctx, "churn", lease, 0); err != nil || rep.Status != lockcore.StatusOK {
			t.Fatalf("round %d: release: %+v, %v", i, rep, err)
		}
		select {
		case <-heard:
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: the new watch heard nothing: the old watch's stop unsubscribed it", i)
		}
		stop2()
	}
}

func TestWatchThatFailsLeavesNoSubscription(t *testing.T) {
	// A watch that gives up waiting for Redis to confirm the subscription
	// returns an error and must not stay registered: lockcore drops the stop
	// function of a failed Watch.
	ctx := context.Background()
	srv := redistest.Start(t, nil)
	n, probe := newNode(t, srv), newNode(t, srv)
	const channel = "lockgate:{failing}:released"

	// Connect the node's pub/sub hub first: its handshake would time out
	// on a paused server.
	warm, err := n.Watch(ctx, "warm-up", func() {})
	if err != nil {
		t.Fatal(err)
	}
	defer warm()

	srv.Pause()
	type watched struct {
		stop func()
		err  error
	}
	first := make(chan watched, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		stop, err := n.Watch(wctx, "failing", func() {})
		first <- watched{stop, err}
	}()
	// Once the first waits for its confirmation, a second watch joins its
	// unconfirmed subscription and gives up first.
	deadline := time.Now().Add(10 * time.Second)
	for !goroutineIn(" [select", "redisnode.(*Node).Watch(") {
		if time.Now().After(deadline) {
			t.Fatal("the first watch is not waiting for its confirmation")
		}
		time.Sleep(time.Millisecond)
	}
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	var stop func()
	stop, err = n.Watch(wctx, "failing", func() {})
	cancel()
	if err == nil {
		stop()
		t.Fatal("a watch on a paused server succeeded")
	}
	if stop != nil {
		t.Error("a failed Watch returned a stop function")
	}
	srv.Resume()
	w := <-first
	if w.err != nil {
		t.Fatalf("first watch: %v", w.err)
	}
	w.stop()
	deadline = time.Now().Add(10 * time.Second)
	for {
		subs, err := probe.Client().PubSubNumSub(ctx, channel).Result()
		if err == nil && subs[channel] == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %d subscribers after every watch stopped or failed (%v)", subs[channel], err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
