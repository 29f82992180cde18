package chaos

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
)

// steppedClock is a wall clock a schedule steps ahead.
type steppedClock struct{ ahead atomic.Int64 }

func (c *steppedClock) now() time.Time { return time.Now().Add(time.Duration(c.ahead.Load())) }

// TestAClockStepIsCountedApartSchedule plays what the clock-step kind can
// cause, on purpose: three in-process nodes; L1 is granted for 10 s, then
// the clocks of two nodes step 11 s ahead (far past the drift allowance:
// outside lockgate's stated model), so that they forget L1 and grant L2
// while L1's validity lasts. The mutex model rejects the history; with the
// step's window marked (a Fault with Outside set) the rejection is counted
// apart, and the history marked by rule M7 is accepted. Without the mark it
// fails, as any other history the model rejects.
func TestAClockStepIsCountedApartSchedule(t *testing.T) {
	ctx := context.Background()
	clocks := make([]*steppedClock, 3)
	var nodes []lockcore.Node
	for i := range clocks {
		clocks[i] = &steppedClock{}
		nodes = append(nodes, memnode.New(&memnode.Options{Now: clocks[i].now}))
	}
	rl, err := lockcore.New(nodes, &lockcore.Options{MaxTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()
	rec := NewRecorder()
	acquire := func(client int, lease string) {
		e := Event{Client: client, Op: OpAcquire, Resource: "r", Lease: lease, Invoke: rec.Now()}
		l, err := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "r", LeaseID: lease, TTL: 10 * time.Second})
		e.Complete, e.Outcome = rec.Now(), Fail
		if err == nil {
			e.Outcome, e.Token, e.ValidFor, e.Status = Ok, uint64(l.Token), l.Validity, 201
		}
		rec.Add(e)
		t.Logf("%v (%v)", e, err)
	}
	acquire(1, "schedule-lease-L1")
	step := Fault{Kind: kindClockStep, Target: "nodes 0, 1", Start: rec.Now(), Nodes: []int{0, 1}, Outside: true}
	for _, c := range clocks[:2] {
		c.ahead.Store(int64(11 * time.Second))
	}
	acquire(2, "schedule-lease-L2")
	step.End = rec.Now()
	events := rec.Events()
	if len(events) != 2 || events[1].Outcome != Ok {
		t.Fatalf("L2 was not granted beside L1: %v", events)
	}
	strict := CheckModels(events, 0)
	expectIllegal(t, strict, "mutex")
	res, outside := CheckModelsOutside(events, 0, Outside([]Fault{step}, settle))
	if len(outside) != 1 || outside[0].Verdict != "Illegal" {
		t.Errorf("counted outside the model: %v, want the strict rejection", outside)
	}
	reportModels(t, res)
}
