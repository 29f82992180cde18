package lockcore_test

import (
	"context"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
)

// opsObserver records the node calls a Redlock makes, by operation.
type opsObserver struct {
	mu  sync.Mutex
	ops map[string]int
}

func (o *opsObserver) NodeCall(_, op string, _ time.Duration, _ error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ops == nil {
		o.ops = map[string]int{}
	}
	o.ops[op]++
}
func (o *opsObserver) QuorumFailed(string) {}
func (o *opsObserver) Fenced()             {}

// take returns the calls recorded since the last take.
func (o *opsObserver) take() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := o.ops
	o.ops = nil
	if out == nil {
		out = map[string]int{}
	}
	return out
}

// handOffCase parks one waiter behind a holder and releases the holder
// through rl, returning what the waiter got and the node calls the release
// and the waiter made from the release on.
func handOffCase(t *testing.T, c *cluster, obs *opsObserver, releaser *lockcore.Redlock, holder *lockcore.Lease) (acquired, map[string]int) {
	t.Helper()
	out := make(chan acquired, 1)
	startWaiter(context.Background(), c.rl, 0, lockcore.AcquireRequest{Resource: holder.Resource, LeaseID: waiterLease(0), TTL: holdTTL, Wait: longWait}, out)
	waitParked(t, 1)
	obs.take()
	mustRelease(t, releaser, holder)
	r := next(t, out, wakeBound)
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	if r.lease.Token <= holder.Token || r.lease.Reentered || r.lease.Validity <= 0 || r.lease.Validity > holdTTL {
		t.Fatalf("waiter got %+v; want a new lease with a token above %d", r.lease, holder.Token)
	}
	return r, obs.take()
}

func TestReleaseHandsTheLockToTheHeadOfTheQueue(t *testing.T) {
	// The release passes the lock to the waiting head in the same node
	// calls: the head makes no acquire round of its own.
	obs := &opsObserver{}
	c := newCluster(t, 3, &lockcore.Options{Observer: obs}, nil)
	holder := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "pass", TTL: holdTTL})
	r, ops := handOffCase(t, c, obs, c.rl, holder)
	if want := map[string]int{"handoff": 3}; !maps.Equal(ops, want) {
		t.Fatalf("node calls after the release: %v, want %v", ops, want)
	}
	for i, l := range c.holders(t, "pass") {
		if !l.Found || l.Lease != waiterLease(0) || l.Token != r.lease.Token {
			t.Fatalf("node %d holds %+v; want the waiter's lease with token %d", i, l, r.lease.Token)
		}
	}
}

func TestHandOffTokensFollowTheFencingRule(t *testing.T) {
	// Node 2's counter ran ahead (an acquisition only it granted, whose
	// token nobody was given). The next holder's token must be above every
	// token a holder was given, and a quorum must keep a counter at least
	// as high as the token it is given.
	//   - Nodes 0 and 1 answer first with the same token: that quorum is
	//     enough, and the head is answered with their token at once.
	//   - Node 0 answers last: the first two answers disagree, so the
	//     hand-off waits for all three, takes the highest token, and writes
	//     it back before answering, as an acquisition does.
	for _, tc := range []struct {
		name      string
		slow      int
		wantAhead bool // the token is node 2's counter + 1
		wantFence int
	}{
		{"a quorum agrees first", 2, false, 0},
		{"the first answers disagree", 0, true, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obs := &opsObserver{}
			c := newCluster(t, 3, &lockcore.Options{Observer: obs}, nil)
			holder := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "drift", TTL: holdTTL})
			if err := c.raw[2].RaiseFence(context.Background(), "drift", "someone-else-0123456789", holder.Token+50); err != nil {
				t.Fatal(err)
			}
			c.nodes[tc.slow].SetDelay(50 * time.Millisecond)
			r, ops := handOffCase(t, c, obs, c.rl, holder)
			want := holder.Token + 1
			if tc.wantAhead {
				want = holder.Token + 51
			}
			if r.lease.Token != want || ops["fence"] != tc.wantFence || ops["acquire"] != 0 {
				t.Fatalf("token %d, node calls %v; want token %d after %d fence calls", r.lease.Token, ops, want, tc.wantFence)
			}
			agree := 0
			for _, l := range c.holders(t, "drift") {
				if l.Token >= r.lease.Token {
					agree++
				}
			}
			if agree < c.rl.Quorum() {
				t.Fatalf("%d nodes keep a token ≥ %d, want a quorum", agree, r.lease.Token)
			}
		})
	}
}

func TestHandOffWithAMinorityDown(t *testing.T) {
	obs := &opsObserver{}
	c := newCluster(t, 3, &lockcore.Options{Observer: obs}, nil)
	holder := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "minority", TTL: holdTTL})
	c.down(true, 0)
	r, _ := handOffCase(t, c, obs, c.rl, holder)
	got := c.holders(t, "minority")
	if got[0].Lease != holder.ID {
		t.Fatalf("node 0 (down) holds %+v; it was never reached, want the old holder's copy", got[0])
	}
	for _, l := range got[1:] {
		if l.Lease != waiterLease(0) || l.Token != r.lease.Token {
			t.Fatalf("a live node holds %+v; want the waiter's lease with token %d", l, r.lease.Token)
		}
	}
}

func TestAReleaseThroughAnotherReplicaWakesTheHeadInstead(t *testing.T) {
	// The lock was granted through replica b and is released through it,
	// while the waiter queues on replica a: the nodes release without
	// passing the lock on (it was not granted for a), and a's head, woken
	// by the nodes' announcements, acquires by itself.
	obs := &opsObserver{}
	c := newCluster(t, 3, &lockcore.Options{Observer: obs}, nil)
	b := c.replica(t, nil)
	holder := mustAcquire(t, b, lockcore.AcquireRequest{Resource: "elsewhere", TTL: holdTTL})
	_, ops := handOffCase(t, c, obs, b, holder)
	if ops["acquire"] != 3 || ops["handoff"] != 0 {
		t.Fatalf("replica a's node calls after the release: %v; want its own acquire round (3)", ops)
	}
}

func TestAHandOffRefusedOnAQuorumLetsTheHeadTry(t *testing.T) {
	// The lock was granted through replica a, but released through a's
	// replica twin b, which has a head of its own: b's hand-off is refused
	// (granted for another replica), so b's head tries by itself and wins.
	obs := &opsObserver{}
	c := newCluster(t, 3, nil, nil)
	b := c.replica(t, &lockcore.Options{Observer: obs})
	holder := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "twin", TTL: holdTTL})
	out := make(chan acquired, 1)
	startWaiter(context.Background(), b, 0, lockcore.AcquireRequest{Resource: "twin", LeaseID: waiterLease(0), TTL: holdTTL, Wait: longWait}, out)
	waitParked(t, 1)
	obs.take()
	mustRelease(t, b, holder)
	r := next(t, out, wakeBound)
	if r.err != nil || r.lease.Token <= holder.Token {
		t.Fatalf("waiter: %+v, %v", r.lease, r.err)
	}
	if ops := obs.take(); ops["handoff"] != 3 || ops["acquire"] != 3 {
		t.Fatalf("node calls after the release: %v; want a refused hand-off (3) and the head's own round (3)", ops)
	}
}

func TestAQueueOnOneReplicaDoesNotStarveAnother(t *testing.T) {
	// Replica a has three contenders that hold for 1ms and ask again at
	// once, so its queue is never empty; replica b has one. Were a to pass
	// the lock among its own waiters forever, b would wait for the TTL (30s)
	// and never get it. A refusal for b marks the lock as wanted elsewhere,
	// the next release is not passed on within a, and a's head lets b's try
	// first. Nor may b's contender, asking again right after its release,
	// take the lock back ahead of a's waiters.
	c := newCluster(t, 3, nil, nil)
	b := c.replica(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var mu sync.Mutex
	count := map[string]int{}
	var wg sync.WaitGroup
	contend := func(name string, rl *lockcore.Redlock) {
		defer wg.Done()
		for ctx.Err() == nil {
			l, err := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "shared", TTL: holdTTL, Wait: longWait})
			if err != nil {
				if ctx.Err() == nil {
					t.Errorf("%s: %v", name, err)
				}
				return
			}
			mu.Lock()
			count[name]++
			mu.Unlock()
			time.Sleep(time.Millisecond)
			if err := rl.Release(context.Background(), lockcore.ReleaseRequest{Resource: "shared", LeaseID: l.ID}); err != nil {
				t.Errorf("%s: release: %v", name, err)
				return
			}
		}
	}
	wg.Add(4)
	for range 3 {
		go contend("a", c.rl)
	}
	go contend("b", b)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	total := count["a"] + count["b"]
	t.Logf("acquisitions in 1s: replica a (3 contenders) %d, replica b (1 contender) %d", count["a"], count["b"])
	if total < 20 || count["a"]*10 < total || count["b"]*10 < total {
		t.Fatalf("replica a got %d and replica b %d of %d acquisitions; want each at least a tenth", count["a"], count["b"], total)
	}
}
