package chaos

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
)

// gatedNode is a lock node whose calls a schedule holds up: a RaiseFence
// for a lease in gates waits until its gate is closed, and an Acquire for
// a lease in mute is never answered (it waits out its node timeout).
type gatedNode struct {
	lockcore.Node
	mu    sync.Mutex
	gates map[string]chan struct{}
	mute  map[string]bool
	// noForce: the node does not answer a force release's BreakLock.
	noForce bool
	// forceGate, when set, holds up a RaiseFence for any lease not in
	// gates (a force release's raise, whose lease is its own).
	forceGate chan struct{}
	// atForceGate counts the RaiseFence calls forceGate held up, raised
	// those that ran after it.
	atForceGate, raised atomic.Int32
	// held holds up an Acquire for a lease in it until its gate closes;
	// ran is closed once that Acquire has run.
	held, ran map[string]chan struct{}
}

func (g *gatedNode) RaiseFence(ctx context.Context, resource, lease string, token int64) error {
	g.mu.Lock()
	gate, ok := g.gates[lease]
	if !ok && g.forceGate != nil {
		gate = g.forceGate
		g.atForceGate.Add(1)
	}
	g.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	err := g.Node.RaiseFence(ctx, resource, lease, token)
	if !ok && g.forceGate != nil {
		g.raised.Add(1)
	}
	return err
}

func (g *gatedNode) Acquire(ctx context.Context, req lockcore.NodeAcquire) (lockcore.NodeReply, error) {
	g.mu.Lock()
	mute, hold, ran := g.mute[req.Lease], g.held[req.Lease], g.ran[req.Lease]
	g.mu.Unlock()
	if mute {
		<-ctx.Done()
		return lockcore.NodeReply{}, ctx.Err()
	}
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return lockcore.NodeReply{}, ctx.Err()
		}
		defer close(ran)
	}
	return g.Node.Acquire(ctx, req)
}

func (g *gatedNode) BreakLock(ctx context.Context, resource, lease string, ttl time.Duration) (int64, int64, error) {
	if g.noForce {
		return 0, 0, errors.New("gated: no answer to the force release")
	}
	return g.Node.(lockcore.ForceReleaser).BreakLock(ctx, resource, lease, ttl)
}

// TestForceReleaseOfAGrantInFlightSchedule plays the schedule of bug 15
// (RELIABILITY.md), found by TestFaults's model check once force releases
// raced acquires: three in-process nodes, node C's fencing counter for the
// resource ahead of A's and B's (as after a split round). L1's acquire is
// granted by all three (tokens 1, 1 and 11: L1's token is 11) and, since
// only C answered 11, raises A's and B's counters before it answers;
// those raises are held up. Meanwhile a force release deletes L1's copies,
// and L2 is granted by A and B (C does not answer it) with token 2. Then
// the raises go through and L1 is answered token 11, which was broken
// before L2 was granted with a lower token: the broken holder's late
// writes win over the new holder's, and the mutex model rejects the
// history. The fix (rules FR1–FR4 of lockcore/doc.go): the force release reads
// every node's counter as it breaks the lock, and raises the counters to
// the highest before the lock is free; when a node does not answer it
// (the second case: C, whose counter is the highest), to the clock floor.
func TestForceReleaseOfAGrantInFlightSchedule(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cMissing bool // C does not answer the force release
	}{
		{"every node answers the force release", false},
		{"the node with the highest counter does not answer it", true},
	} {
		t.Run(tc.name, func(t *testing.T) { playForceRace(t, tc.cMissing) })
	}
}

// playForceRace plays TestForceReleaseOfAGrantInFlightSchedule's schedule.
func playForceRace(t *testing.T, cMissing bool) {
	ctx := context.Background()
	var nodes []lockcore.Node
	var gated []*gatedNode
	for range 3 {
		g := &gatedNode{Node: memnode.New(nil), gates: map[string]chan struct{}{}, mute: map[string]bool{}}
		gated = append(gated, g)
		nodes = append(nodes, g)
	}
	a, b, c := gated[0], gated[1], gated[2]
	rl, err := lockcore.New(nodes, &lockcore.Options{NodeTimeout: time.Second, MinTTL: 2 * time.Second, MaxTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()
	// The operator's gateway waits out node calls of 100 ms at most (rule
	// FR4), which L1's held-up raise outlasts, as a raise sent after a
	// pause of L1's gateway would.
	op, err := lockcore.New(nodes, &lockcore.Options{NodeTimeout: 100 * time.Millisecond, MaxNodeTimeout: 100 * time.Millisecond,
		MinTTL: 2 * time.Second, MaxTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	if err := c.Node.RaiseFence(ctx, "r", "skew", 10); err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	const l1, l2 = "schedule-lease-L1", "schedule-lease-L2"
	for _, g := range []*gatedNode{a, b} {
		g.gates[l1] = gate
	}
	c.mute[l2] = true
	rec := NewRecorder()
	acquire := func(client int, lease string) {
		e := Event{Client: client, Op: OpAcquire, Resource: "r", Lease: lease, Gateway: 0, Invoke: rec.Now()}
		l, err := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "r", LeaseID: lease, TTL: 10 * time.Second})
		e.Complete = rec.Now()
		if err != nil {
			e.Outcome = Fail
			t.Logf("%s: %v", lease, err)
		} else {
			e.Outcome, e.Token, e.ValidFor, e.Status = Ok, uint64(l.Token), l.Validity, 201
		}
		rec.Add(e)
	}
	done := make(chan struct{})
	go func() { acquire(1, l1); close(done) }()
	for end := time.Now().Add(5 * time.Second); !held(ctx, a, l1) || !held(ctx, b, l1); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			close(gate)
			t.Fatal("L1 was not granted by A and B within 5 s")
		}
	}
	c.noForce = cMissing
	f := Event{Client: 0, Op: OpForceRelease, Resource: "r", Invoke: rec.Now()}
	tok, err := op.ForceRelease(ctx, "r")
	f.Complete, f.Outcome, f.Status = rec.Now(), Ok, 204
	if err != nil {
		f.Outcome, f.Status = Fail, 503
	}
	rec.Add(f)
	t.Logf("force release: token %d, %v", tok, err)
	acquire(2, l2)
	close(gate)
	<-done
	for _, e := range rec.Events() {
		t.Logf("%v", e)
	}
	reportModels(t, CheckModels(rec.Events(), 0))
}

// held reports whether lease holds resource r on node g.
func held(ctx context.Context, g *gatedNode, lease string) bool {
	l, err := g.Node.Inspect(ctx, "r")
	return err == nil && l.Found && l.Lease == lease
}

// TestAGrantDuringAForceReleaseIsRefusedSchedule (rules FR1 and FR4): L1's
// acquire is granted by A (token 1), B never answers it, and its request
// to C (whose counter is at 10) is held up; a force release breaks L1, and
// C's grant to L1 then arrives, in the first case before the force release
// has raised the counters (FR1, the hold), in the second after it (FR4,
// the wait: the holds stay until no call of L1's round can be answered).
// Either way a hold refuses it: L1 has one grant of three and fails, and
// L2 gets token 11. Were the lock simply deleted, or the holds freed once
// raised, C would grant L1 token 11, L1's raise of A and B would be held
// up while L2 took them with token 11, and L1 would be answered 11 as
// well: two holders with one token.
func TestAGrantDuringAForceReleaseIsRefusedSchedule(t *testing.T) {
	for _, tc := range []struct {
		name       string
		afterRaise bool
	}{
		{"the grant arrives while the counters are raised", false},
		{"the grant arrives after the counters were raised", true},
	} {
		t.Run(tc.name, func(t *testing.T) { playGrantDuringForce(t, tc.afterRaise) })
	}
}

// playGrantDuringForce plays TestAGrantDuringAForceReleaseIsRefusedSchedule.
func playGrantDuringForce(t *testing.T, afterRaise bool) {
	ctx := context.Background()
	var nodes []lockcore.Node
	var gated []*gatedNode
	for range 3 {
		g := &gatedNode{Node: memnode.New(nil), gates: map[string]chan struct{}{}, mute: map[string]bool{},
			held: map[string]chan struct{}{}, ran: map[string]chan struct{}{}}
		gated = append(gated, g)
		nodes = append(nodes, g)
	}
	a, b, c := gated[0], gated[1], gated[2]
	rl, err := lockcore.New(nodes, &lockcore.Options{NodeTimeout: 2 * time.Second, MaxNodeTimeout: 2 * time.Second,
		MinTTL: 4 * time.Second, MaxTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()
	if err := c.Node.RaiseFence(ctx, "r", "skew", 10); err != nil {
		t.Fatal(err)
	}
	const l1, l2 = "schedule-lease-L1", "schedule-lease-L2"
	l1Raise, cGrant, forceRaise := make(chan struct{}), make(chan struct{}), make(chan struct{})
	cRan := make(chan struct{})
	for _, g := range []*gatedNode{a, b} {
		g.gates[l1] = l1Raise
		g.gates[l2] = nil
	}
	c.gates[l2] = nil
	b.mute[l1] = true
	c.held[l1], c.ran[l1] = cGrant, cRan
	for _, g := range gated {
		g.forceGate = forceRaise
	}
	rec := NewRecorder()
	acquire := func(client int, lease string) {
		e := Event{Client: client, Op: OpAcquire, Resource: "r", Lease: lease, Gateway: 0, Invoke: rec.Now()}
		l, err := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "r", LeaseID: lease, TTL: 20 * time.Second})
		e.Complete = rec.Now()
		if err != nil {
			e.Outcome = Fail
			t.Logf("%s: %v", lease, err)
		} else {
			e.Outcome, e.Token, e.ValidFor, e.Status = Ok, uint64(l.Token), l.Validity, 201
			t.Logf("%s: token %d", lease, l.Token)
		}
		rec.Add(e)
	}
	l1Done := make(chan struct{})
	go func() { acquire(1, l1); close(l1Done) }()
	waitUntil(t, "L1 granted by A", 5*time.Second, func() bool { return held(ctx, a, l1) })
	f := Event{Client: 0, Op: OpForceRelease, Resource: "r", Invoke: rec.Now()}
	forced := make(chan struct{})
	go func() {
		tok, err := rl.ForceRelease(ctx, "r")
		f.Complete, f.Outcome, f.Status = rec.Now(), Ok, 204
		if err != nil {
			f.Outcome, f.Status = Fail, 503
		}
		t.Logf("force release: token %d, %v", tok, err)
		close(forced)
	}()
	waitUntil(t, "the force release raising the counters", 5*time.Second, func() bool {
		return a.atForceGate.Load() > 0 && c.atForceGate.Load() > 0
	})
	if afterRaise {
		close(forceRaise)
		waitUntil(t, "the force release's raise", 5*time.Second, func() bool {
			return a.raised.Load() > 0 && b.raised.Load() > 0 && c.raised.Load() > 0
		})
		time.Sleep(100 * time.Millisecond) // a release of the holds would be done by now
		close(cGrant)
		<-cRan
	} else {
		close(cGrant) // C's grant to L1 arrives while the force release is under way
		<-cRan
		close(forceRaise)
	}
	<-forced
	rec.Add(f)
	acquire(2, l2)
	close(l1Raise)
	<-l1Done
	for _, e := range rec.Events() {
		t.Logf("%v", e)
	}
	reportModels(t, CheckModels(rec.Events(), 0))
}
