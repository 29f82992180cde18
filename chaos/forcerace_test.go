package chaos

import (
	"context"
	"os"
	"sync"
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
}

func (g *gatedNode) RaiseFence(ctx context.Context, resource, lease string, token int64) error {
	g.mu.Lock()
	gate := g.gates[lease]
	g.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return g.Node.RaiseFence(ctx, resource, lease, token)
}

func (g *gatedNode) Acquire(ctx context.Context, req lockcore.NodeAcquire) (lockcore.NodeReply, error) {
	g.mu.Lock()
	mute := g.mute[req.Lease]
	g.mu.Unlock()
	if mute {
		<-ctx.Done()
		return lockcore.NodeReply{}, ctx.Err()
	}
	return g.Node.Acquire(ctx, req)
}

func (g *gatedNode) ForceRelease(ctx context.Context, resource string) (lockcore.NodeReply, error) {
	return g.Node.(lockcore.ForceReleaser).ForceRelease(ctx, resource)
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
// history. Skipped until the bug is fixed, unless LOCKGATE_CHAOS_FORCE_RACE=1.
func TestForceReleaseOfAGrantInFlightSchedule(t *testing.T) {
	if os.Getenv(ForceRaceEnv) != "1" {
		t.Skip("open bug 15 (RELIABILITY.md): fails; " + ForceRaceEnv + "=1 plays it")
	}
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
	f := Event{Client: 0, Op: OpForceRelease, Resource: "r", Invoke: rec.Now()}
	tok, err := rl.ForceRelease(ctx, "r")
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
