package lockcore_test

import (
	"context"
	"errors"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
)

// opsObserver records the node calls a Redlock makes, by operation.
type opsObserver struct {
	settle func() // set by cluster.replica: run before each take
	mu     sync.Mutex
	ops    map[string]int
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

// take returns the calls recorded since the last take, once the Redlocks
// that report to o have acted on their late answers (cluster.settle): a
// node slower than the grace may still be running a call.
func (o *opsObserver) take() map[string]int {
	if o.settle != nil {
		o.settle()
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	out := o.ops
	o.ops = nil
	if out == nil {
		out = map[string]int{}
	}
	return out
}

// takeWhen is take once the calls recorded satisfy cond, or after a second:
// calls that a round no longer waits for (see lockcore's round) may still
// be under way when it has answered.
func (o *opsObserver) takeWhen(cond func(map[string]int) bool) map[string]int {
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		o.mu.Lock()
		ok := cond(o.ops)
		o.mu.Unlock()
		if ok {
			break
		}
	}
	return o.take()
}

// handOffCase parks one waiter behind a holder and releases the holder
// through rl, returning what the waiter got and the node calls the release
// and the waiter made from the release on.
func handOffCase(t *testing.T, c *waitCluster, obs *opsObserver, releaser *lockcore.Redlock, holder *lockcore.Lease, beforeRelease ...func()) (acquired, map[string]int) {
	t.Helper()
	out := make(chan acquired, 1)
	startWaiter(context.Background(), c.rl, 0, lockcore.AcquireRequest{Resource: holder.Resource, LeaseID: waiterLease(0), TTL: holdTTL, Wait: longWait}, out)
	c.parked(t, 1)
	for _, f := range beforeRelease {
		f()
	}
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

func testReleaseHandsTheLockToTheHeadOfTheQueue(t *testing.T, b backend) {
	// The release passes the lock to the waiting head in the same node
	// calls: the head makes no acquire round of its own.
	obs := &opsObserver{}
	c := newWaitCluster(t, b, 3, &lockcore.Options{Observer: obs}, false)
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

func testHandOffTokensFollowTheFencingRule(t *testing.T, b backend) {
	// Node 2's counter ran ahead (an acquisition only it granted, whose
	// token nobody was given), and node 2 is slow. The hand-off is
	// answered at the first quorum (nodes 0 and 1), with the token they
	// granted: above every token a holder was given. Node 2's late grant
	// carries a token nobody was given, so the head, whose lease id was
	// minted, gives that copy back (as an acquisition's late grant, see
	// Redlock.lateAcquire): every copy of the lease carries the token its
	// holder has, which Extend reports.
	obs := &opsObserver{}
	c := newWaitCluster(t, b, 3, &lockcore.Options{Observer: obs}, false)
	holder := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "drift", TTL: holdTTL})
	if err := c.raw[2].RaiseFence(context.Background(), "drift", "someone-else-0123456789", holder.Token+50); err != nil {
		t.Fatal(err)
	}
	out := make(chan acquired, 1)
	startWaiter(context.Background(), c.rl, 0, lockcore.AcquireRequest{Resource: "drift", TTL: holdTTL, Wait: longWait}, out)
	c.parked(t, 1)
	c.nodes[2].SetDelay(200 * time.Millisecond)
	obs.take()
	mustRelease(t, c.rl, holder)
	r := next(t, out, wakeBound)
	if r.err != nil || r.lease.Token != holder.Token+1 || r.lease.Reentered {
		t.Fatalf("head: %+v, %v; want a new lease with token %d, answered before node 2", r.lease, r.err, holder.Token+1)
	}
	c.nodes[2].SetDelay(0)
	eventually(t, "node 2's late grant, with a token nobody was given, is given back", func() bool {
		return !c.holders(t, "drift")[2].Found
	})
	if ops := obs.take(); ops["handoff"] != 3 || ops["acquire"] != 0 {
		t.Fatalf("node calls %v; want the hand-off on every node and no acquisition", ops)
	}
	for i, l := range c.holders(t, "drift")[:2] {
		if l.Lease != r.lease.ID || l.Token != r.lease.Token {
			t.Fatalf("node %d holds %+v; want the head's lease with token %d", i, l, r.lease.Token)
		}
	}
	ext, err := c.rl.Extend(context.Background(), lockcore.ExtendRequest{Resource: "drift", LeaseID: r.lease.ID})
	if err != nil || ext.Token != r.lease.Token {
		t.Fatalf("extend: %+v, %v; want the token the head was given, %d", ext, err, r.lease.Token)
	}
}

func testALateHandOffGrantAfterTheHeadsReleaseIsReleased(t *testing.T, b backend) {
	// Node 2 runs the hand-off only after the head, answered by nodes 0
	// and 1, has released its lease (two connections, no order between
	// them). Its late grant to the head, whose lease id was minted, is
	// released too (see Redlock.lateAcquire): no copy stays behind until
	// its TTL runs out.
	c := newWaitCluster(t, b, 3, nil, false)
	holder := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "after", TTL: holdTTL})
	out := make(chan acquired, 1)
	startWaiter(context.Background(), c.rl, 0, lockcore.AcquireRequest{Resource: "after", TTL: holdTTL, Wait: longWait}, out)
	c.parked(t, 1)
	gate := make(chan struct{})
	ran := make(chan struct{})
	c.nodes[2].SetBeforeAcquire(func(lockcore.NodeAcquire) { <-gate })
	c.nodes[2].SetAfterAcquire(func(lockcore.NodeAcquire, lockcore.NodeReply) { close(ran) })
	mustRelease(t, c.rl, holder)
	r := next(t, out, wakeBound)
	if r.err != nil {
		t.Fatalf("head: %v", r.err)
	}
	mustRelease(t, c.rl, r.lease)
	close(gate)
	<-ran
	eventually(t, "node 2's late grant to the released head is released", func() bool {
		return !c.holders(t, "after")[2].Found
	})
}

func testAReleaseByALeaseThatHoldsNothingLeavesTheHeadWaiting(t *testing.T, b backend) {
	// A stale release (a retry, another lease) claims the head but frees
	// nothing, even with a majority of nodes failing: the head goes on
	// waiting as before, nothing is undone, and the holder keeps its lock.
	obs := &opsObserver{}
	c := newWaitCluster(t, b, 3, &lockcore.Options{Observer: obs}, false)
	holder := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "stale", TTL: holdTTL})
	out := make(chan acquired, 1)
	startWaiter(context.Background(), c.rl, 0, lockcore.AcquireRequest{Resource: "stale", LeaseID: waiterLease(0), TTL: holdTTL, Wait: longWait}, out)
	c.parked(t, 1)
	c.down(true, 0, 1)
	obs.take()
	err := c.rl.Release(context.Background(), lockcore.ReleaseRequest{Resource: "stale", LeaseID: "stale-lease-0123456789"})
	if !errors.Is(err, lockcore.ErrNoQuorum) {
		t.Fatalf("release with 2 of 3 nodes down: %v, want ErrNoQuorum", err)
	}
	if ops := obs.take(); ops["handoff"] != 3 || len(ops) != 1 {
		t.Fatalf("node calls: %v; want the hand-off only (nothing to undo, no attempt by the head)", ops)
	}
	c.down(false, 0, 1)
	for i, l := range c.holders(t, "stale") {
		if l.Lease != holder.ID {
			t.Fatalf("node %d holds %+v; want the holder's lock untouched", i, l)
		}
	}
	mustRelease(t, c.rl, holder)
	if r := next(t, out, wakeBound); r.err != nil || r.lease.Token <= holder.Token {
		t.Fatalf("waiter: %+v, %v", r.lease, r.err)
	}
}

func testHandOffWithAMinorityDown(t *testing.T, b backend) {
	obs := &opsObserver{}
	c := newWaitCluster(t, b, 3, &lockcore.Options{Observer: obs}, false)
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

func testAReleaseThroughAnotherReplicaWakesTheHeadInstead(t *testing.T, b backend) {
	// The lock was granted through replica b and is released through it,
	// while the waiter queues on replica a: the nodes release without
	// passing the lock on (it was not granted for a), and a's head, woken
	// by the nodes' announcements, acquires by itself.
	obs := &opsObserver{}
	c := newWaitCluster(t, b, 3, &lockcore.Options{Observer: obs}, false)
	rb := c.replica(t, nil)
	holder := mustAcquire(t, rb, lockcore.AcquireRequest{Resource: "elsewhere", TTL: holdTTL})
	_, ops := handOffCase(t, c, obs, rb, holder)
	// The head's round answers at a quorum; its third call may follow, and
	// so may the third call of its first attempt, refused by a quorum.
	for k, v := range obs.takeWhen(func(m map[string]int) bool { return ops["acquire"]+m["acquire"] >= 3 }) {
		ops[k] += v
	}
	if ops["acquire"] < 3 || ops["acquire"] > 4 || ops["handoff"] != 0 {
		t.Fatalf("replica a's node calls after the release: %v; want its own acquire round (3)", ops)
	}
}

func testAHandOffRefusedOnAQuorumLetsTheHeadTry(t *testing.T, b backend) {
	// The lock was granted through replica a, but released through a's
	// replica twin b, which has a head of its own: b's hand-off is refused
	// (granted for another replica), so b's head tries by itself and wins.
	obs := &opsObserver{}
	c := newWaitCluster(t, b, 3, nil, false)
	rb := c.replica(t, &lockcore.Options{Observer: obs})
	holder := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "twin", TTL: holdTTL})
	out := make(chan acquired, 1)
	startWaiter(context.Background(), rb, 0, lockcore.AcquireRequest{Resource: "twin", LeaseID: waiterLease(0), TTL: holdTTL, Wait: longWait}, out)
	c.parked(t, 1)
	obs.take()
	mustRelease(t, rb, holder)
	// The refusal marked the lock wanted by another replica, so rb's head
	// yields before it tries.
	c.parked(t, 1)
	c.clock.Advance(time.Second)
	r := next(t, out, wakeBound)
	if r.err != nil || r.lease.Token <= holder.Token {
		t.Fatalf("waiter: %+v, %v", r.lease, r.err)
	}
	// At least: the head's first attempt, refused by a quorum, may have
	// answered before its third node, whose call then counts here.
	if ops := obs.take(); ops["handoff"] != 3 || ops["acquire"] < 3 || ops["acquire"] > 4 {
		t.Fatalf("node calls after the release: %v; want a refused hand-off (3) and the head's own round (3)", ops)
	}
}

func testAQueueOnOneReplicaDoesNotStarveAnother(t *testing.T, b backend) {
	// Replica a has three contenders that hold for 1ms and ask again at
	// once, so its queue is never empty; replica b has one. Were a to pass
	// the lock among its own waiters forever, b would wait for the TTL (30s)
	// and never get it. A refusal for b marks the lock as wanted elsewhere,
	// the next release is not passed on within a, and a's head lets b's try
	// first. Nor may b's contender, asking again right after its release,
	// take the lock back ahead of a's waiters.
	// The clock runs through yields (3 ms) as they come; everything else
	// here is far off.
	//
	// What is judged is each replica's share of the first `want`
	// acquisitions, not how many fit in some span of real time: a loaded
	// machine makes fewer, not fewer for one replica. Both replicas have
	// acquired once before the count starts, so that what a replica does
	// on first use (its guard's first pass over the nodes, which on a new
	// cluster initializes them) does not hold its contenders back while
	// the other's run alone.
	//
	// Without the nodes' wanted mark b gets almost nothing; without only
	// the yield, the shares stay even (each replica's head races the
	// other's on every release), so the yield itself is checked on the
	// fake clock by waitroom's TestAYieldingReplicaLetsTheOtherTryFirst.
	const want = 100
	c := newWaitCluster(t, b, 3, nil, false)
	c.drive(t)
	rb := c.replica(t, nil)
	for _, rl := range []*lockcore.Redlock{c.rl, rb} {
		mustRelease(t, rl, mustAcquire(t, rl, lockcore.AcquireRequest{Resource: "shared", TTL: holdTTL}))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	count := map[string]int{}
	var wg sync.WaitGroup
	contend := func(name string, rl *lockcore.Redlock) {
		defer wg.Done()
		for ctx.Err() == nil {
			l, err := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "shared", TTL: holdTTL, Wait: longWait})
			if err != nil {
				if ctx.Err() == nil { // not the end of the count
					t.Errorf("%s: %v", name, err)
					cancel()
				}
				return
			}
			mu.Lock()
			count[name]++
			if count["a"]+count["b"] >= want {
				cancel()
			}
			mu.Unlock()
			time.Sleep(time.Millisecond)
			if err := rl.Release(context.Background(), lockcore.ReleaseRequest{Resource: "shared", LeaseID: l.ID}); err != nil {
				t.Errorf("%s: release: %v", name, err)
				cancel()
				return
			}
		}
	}
	start := time.Now()
	wg.Add(4)
	for range 3 {
		go contend("a", c.rl)
	}
	go contend("b", rb)
	select {
	case <-ctx.Done():
	case <-time.After(wakeBound):
		// A starved replica does not stop the other; this is a stall of
		// both (or a machine too slow to tell).
		cancel()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	total := count["a"] + count["b"]
	t.Logf("acquisitions in %v: replica a (3 contenders) %d, replica b (1 contender) %d",
		time.Since(start).Round(time.Millisecond), count["a"], count["b"])
	if t.Failed() {
		return // a contender's wait ran out (starved) or a call failed: said above
	}
	if total < want {
		t.Fatalf("only %d of %d acquisitions within %v of real time: the contenders stalled", total, want, wakeBound)
	}
	if count["a"]*10 < total || count["b"]*10 < total {
		t.Fatalf("replica a got %d and replica b %d of %d acquisitions; want each at least a tenth", count["a"], count["b"], total)
	}
}

func testAClaimedHeadSleepsUntilTheHandOffEnds(t *testing.T, b backend) {
	// The head's retry time (the holder's expiry, as its attempt learnt
	// it) passes while a hand-off to it is under way. It must not try by
	// itself, nor loop: it wakes once, for the retry time, and sleeps again
	// until its deadline, unless the hand-off's answer wakes it first. The
	// nodes' locks run on real time here, so the holder's lock is still
	// there to hand off when the clock has passed its TTL.
	c := newWaitCluster(t, b, 3, nil, true)
	holder := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "slow", TTL: holdTTL})
	out := make(chan acquired, 1)
	const wait = time.Minute
	startWaiter(context.Background(), c.rl, 0, lockcore.AcquireRequest{Resource: "slow", LeaseID: waiterLease(0), TTL: holdTTL, Wait: wait}, out)
	c.parked(t, 1)
	if s := c.clock.Sleepers(); len(s) != 1 || !s[0].Before(fakeStart.Add(wait)) {
		t.Fatalf("the head sleeps until %v; want the holder's expiry, before its deadline", s)
	}

	// The hand-off stops in the nodes until the gate opens.
	gate := make(chan struct{})
	reached := make(chan struct{}, len(c.nodes))
	for _, n := range c.nodes {
		n.SetBeforeAcquire(func(req lockcore.NodeAcquire) {
			if req.Lease == waiterLease(0) {
				reached <- struct{}{}
				<-gate
			}
		})
	}
	released := make(chan error, 1)
	go func() {
		released <- c.rl.Release(context.Background(), lockcore.ReleaseRequest{Resource: "slow", LeaseID: holder.ID})
	}()
	for range c.nodes {
		<-reached // the head is claimed and the hand-off under way
	}
	calls, timers := c.nodes[0].Acquires(), c.clock.TimersSet()
	c.clock.Advance(holdTTL + time.Second) // the head's retry time passes
	c.parked(t, 1)
	if s := c.clock.Sleepers(); len(s) != 1 || !s[0].Equal(fakeStart.Add(wait)) {
		t.Fatalf("the claimed head sleeps until %v, want its deadline %v", s, fakeStart.Add(wait))
	}
	if n := c.clock.TimersSet() - timers; n != 1 {
		t.Fatalf("the claimed head went to sleep %d times after its retry time passed, want once", n)
	}
	if n := c.nodes[0].Acquires() - calls; n != 0 {
		t.Fatalf("the claimed head made %d acquisitions of its own during the hand-off", n)
	}
	close(gate)
	if err := <-released; err != nil {
		t.Fatalf("release: %v", err)
	}
	r := next(t, out, wakeBound)
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	if r.lease.Token <= holder.Token {
		t.Fatalf("waiter token %d, holder had %d", r.lease.Token, holder.Token)
	}
}

func testAFailedHandOffLeavesTheNextRoundAFirstGrant(t *testing.T, b backend) {
	// A client-chosen lease joins a queue behind others, so it does not try
	// on arrival; its retry check (is it the holder already?) finds it
	// holds nothing. The first round it takes part in is a hand-off, which
	// fails: node 1 grants it but its answer is lost, node 2 is down. Its
	// own round next, with node 2 still down, finds its copy on node 1
	// ("re-entered") and a grant on node 0: a quorum. The lease held
	// nothing before this request, so that is a first grant, answered as
	// one (201 over HTTP), not "the same lease again" (200). Without the
	// retry check's finding kept for the later rounds, two nodes out of
	// three that either re-entered or did not answer made the round read
	// as a retry.
	c := newWaitCluster(t, b, 3, nil, true) // the nodes' locks expire in real time: not during the test
	holder := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "first", TTL: holdTTL})
	out := make(chan acquired, 2)
	startWaiter(context.Background(), c.rl, 0, lockcore.AcquireRequest{Resource: "first", LeaseID: waiterLease(0), TTL: holdTTL, Wait: longWait}, out)
	c.parked(t, 1)
	startWaiter(context.Background(), c.rl, 1, lockcore.AcquireRequest{Resource: "first", LeaseID: waiterLease(1), TTL: 10 * holdTTL, Wait: 10 * longWait}, out)
	c.parked(t, 2)
	mustRelease(t, c.rl, holder) // handed to waiter 0
	w0 := next(t, out, wakeBound)
	if w0.err != nil || w0.i != 0 {
		t.Fatalf("after the holder's release: waiter %d, %v; want waiter 0's lease", w0.i, w0.err)
	}
	c.parked(t, 1) // waiter 1, the head now, sleeps until waiter 0's lock runs out

	c.nodes[1].SetLateGrant(true)
	c.down(true, 2)
	err := c.rl.Release(context.Background(), lockcore.ReleaseRequest{Resource: "first", LeaseID: w0.lease.ID})
	if !errors.Is(err, lockcore.ErrNoQuorum) {
		t.Fatalf("release with the hand-off failing: %v, want ErrNoQuorum (one node confirmed it)", err)
	}
	c.nodes[1].SetLateGrant(false)
	if got := c.holders(t, "first"); got[1].Lease != waiterLease(1) {
		t.Fatalf("node 1 holds %+v; want the copy of waiter 1's lost grant", got[1])
	}
	c.parked(t, 1)
	c.clock.Advance(holdTTL) // waiter 0's lock has run out for the waiters: waiter 1 tries
	r := next(t, out, wakeBound)
	if r.err != nil || r.i != 1 {
		t.Fatalf("waiter %d: %v; want waiter 1's lease", r.i, r.err)
	}
	if r.lease.Reentered {
		t.Fatalf("waiter 1's first acquisition answered as re-entered (%+v); want a first grant", r.lease)
	}
}
