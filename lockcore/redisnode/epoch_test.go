package redisnode_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/redisnode"
)

// The epoch (quarantine.lua, boot.lua, mark.lua, qdone.lua, repair.lua,
// serve.lua): a repair puts a node in service only if the node is still in
// the state the repair was decided on (no quarantine began, no new mark,
// no loss of its data); a quarantine's marks and its qdone stand only for
// its own epoch. Each test below runs another gateway's
// step at one exact point of a repair or quarantine, through a hook on the
// client of the node that runs it.

const metaKey = "lockgate:{meta}:node"

func slotKey(i int) string { return "lockgate:{" + lockcore.SlotTag(i) + "}:tokens" }

// hooks calls before on each command or pipeline the client sends, once
// pick returns true of it.
type hooks struct {
	pick   func(cmds []redis.Cmder) bool
	before func()
	done   bool
}

func (h *hooks) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *hooks) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.maybe([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (h *hooks) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.maybe(cmds)
		return next(ctx, cmds)
	}
}

func (h *hooks) maybe(cmds []redis.Cmder) {
	if !h.done && h.pick(cmds) {
		h.done = true
		h.before()
	}
}

// slotPipeline picks the pipeline over every slot (a repair's or a
// quarantine's marks).
func slotPipeline(cmds []redis.Cmder) bool { return len(cmds) >= lockcore.FenceSlots }

// markedSlots counts the slots marked quarantined on the node.
func markedSlots(t *testing.T, rdb *redis.Client) int { return slotsWith(t, rdb, "q") }

// slotsWithCounters counts the slots that have a counter on the node.
func slotsWithCounters(t *testing.T, rdb *redis.Client) int { return slotsWith(t, rdb, "n") }

func slotsWith(t *testing.T, rdb *redis.Client, field string) int {
	t.Helper()
	pipe := rdb.Pipeline()
	cmds := make([]*redis.BoolCmd, lockcore.FenceSlots)
	for i := range cmds {
		cmds[i] = pipe.HExists(context.Background(), slotKey(i), field)
	}
	if _, err := pipe.Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range cmds {
		if c.Val() {
			n++
		}
	}
	return n
}

// quarantinedOnce leaves srv initialized, quarantined, its quarantine's
// marking done: ready for a repair.
func quarantinedOnce(t *testing.T, srv *redistest.Server) {
	t.Helper()
	initializeServer(t, srv)
	q := connect(t, srv)
	defer q.Close()
	if err := q.Quarantine(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestARepairDoesNotServeANodeThatChangedUnderIt: between the moment a
// repair reads the epoch and its slot writes, the node loses its data, or
// is quarantined by another gateway, or both. The repair must then leave it
// out of service, with every slot a quarantine marked still marked. With a
// count for an epoch (as before), a node that lost its data and was
// quarantined again had the same epoch as before the loss, and was put in
// service without any quarantine; with repair.lua writing the slots
// whatever the epoch, a quarantine's marks were cleared.
func TestARepairDoesNotServeANodeThatChangedUnderIt(t *testing.T) {
	for _, tc := range []struct {
		name             string
		flush, requarant bool
	}{
		{"lost its data", true, false},
		{"quarantined again", false, true},
		{"lost its data and quarantined again", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t, nil)
			ctx := context.Background()
			quarantinedOnce(t, srv)
			repairer, other := connect(t, srv), connect(t, srv)
			defer repairer.Close()
			defer other.Close()
			epoch := health(t, srv).Epoch // the check that decided the repair
			repairer.Client().AddHook(&hooks{pick: slotPipeline, before: func() {
				if tc.flush {
					if err := other.Client().FlushAll(ctx).Err(); err != nil {
						t.Error(err)
					}
				}
				if tc.requarant {
					if err := other.Quarantine(ctx); err != nil {
						t.Error(err)
					}
				}
			}})
			err := repairer.Repair(ctx, make([]int64, lockcore.FenceSlots), epoch)
			if !errors.Is(err, lockcore.ErrNodeChanged) {
				t.Errorf("Repair: %v, want ErrNodeChanged", err)
			}
			h := health(t, srv)
			if h.Initialized && !h.Quarantined && !h.Lost {
				t.Fatalf("the node is in service after %s during its repair: %+v", tc.name, h)
			}
			if tc.requarant {
				if m := markedSlots(t, other.Client()); m != lockcore.FenceSlots {
					t.Fatalf("quarantined, but %d slots of %d marked", m, lockcore.FenceSlots)
				}
			}
			if tc.flush && !tc.requarant {
				// Nothing written: a slot with a counter would serve locks
				// (guard.lua) to a gateway that still trusts the node.
				if n := slotsWithCounters(t, other.Client()); n != 0 {
					t.Fatalf("the repair wrote %d slot counters on a node that lost its data under it", n)
				}
			}
		})
	}
}

// TestAnEarlierQuarantineDoesNotEndALaterOnesMarking: two quarantines of
// one node overlap (a check during the first one's marking found qdone
// missing and quarantined again). The first one's last step comes while
// the second is still marking: it must not record the marking done, or a
// repair could begin, clear the marks and put the node in service, and the
// second quarantine's remaining marks would then land on a node in service
// that no check finds anything wrong with. (Before qdone.lua, the first
// quarantine set qdone unconditionally.)
func TestAnEarlierQuarantineDoesNotEndALaterOnesMarking(t *testing.T) {
	srv := redistest.Start(t, nil)
	ctx := context.Background()
	quarantinedOnce(t, srv)
	first, repairer := connect(t, srv), connect(t, srv)
	defer first.Close()
	defer repairer.Close()
	raw := connect(t, srv).Client()
	defer raw.Close()
	half := lockcore.FenceSlots / 2
	mark := func(from, to int) {
		pipe := raw.Pipeline()
		for i := from; i < to; i++ {
			pipe.HSet(ctx, slotKey(i), "q", "1")
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Error(err)
		}
	}
	// The second quarantine's first step (as quarantine.lua does it: a new
	// epoch, qdone cleared) and half its marks run just before the first
	// quarantine's last step, the first command it sends after its marks.
	seenMarks := false
	first.Client().AddHook(&hooks{pick: func(cmds []redis.Cmder) bool {
		if slotPipeline(cmds) {
			seenMarks = true
			return false
		}
		return seenMarks
	}, before: func() {
		if err := raw.HSet(ctx, metaKey, "qepoch", "second-quarantine").Err(); err != nil {
			t.Error(err)
		}
		if err := raw.HDel(ctx, metaKey, "qdone").Err(); err != nil {
			t.Error(err)
		}
		mark(0, half)
	}})
	if err := first.Quarantine(ctx); err != nil {
		t.Fatal(err)
	}
	// A repairer that checks now finds the second quarantine's epoch, and
	// qdone missing.
	if err := repairer.Repair(ctx, make([]int64, lockcore.FenceSlots), "second-quarantine"); !errors.Is(err, redisnode.ErrQuarantining) {
		t.Errorf("a repair while the second quarantine marks: %v, want ErrQuarantining", err)
	}
	mark(half, lockcore.FenceSlots) // the second quarantine's other marks
	h := health(t, srv)
	if m := markedSlots(t, raw); h.Initialized && !h.Quarantined && !h.Lost && m > 0 {
		t.Fatalf("the node is in service with %d marked slots, and every check finds it whole: %+v", m, h)
	}
}

// TestAQuarantineUnderWayGoesOnWithItsEpoch: gateways that find a
// quarantine of the node's process still marking its slots (its gateway
// slow, or several gateways finding the same loss at once) quarantine it
// too. They must go on with its epoch: each new epoch voided the marks of
// the one before (mark.lua acts only under the node's epoch), so with
// three gateways the quarantines replaced each other for seconds before
// one finished (35 quarantines in 5 s, and 13.8 s before the node served).
func TestAQuarantineUnderWayGoesOnWithItsEpoch(t *testing.T) {
	srv := redistest.Start(t, nil)
	ctx := context.Background()
	initializeServer(t, srv)
	first, second := connect(t, srv), connect(t, srv)
	defer first.Close()
	defer second.Close()
	var before, during string
	first.Client().AddHook(&hooks{pick: slotPipeline, before: func() {
		before = health(t, srv).Epoch // the first quarantine's, its marks about to go
		if err := second.Quarantine(ctx); err != nil {
			t.Error(err)
		}
		during = health(t, srv).Epoch
	}})
	if err := first.Quarantine(ctx); err != nil {
		t.Fatal(err)
	}
	h := health(t, srv)
	if before == "" || during != before || h.Epoch != before {
		t.Errorf("epochs: first quarantine %q, after the second %q, at the end %q; want one", before, during, h.Epoch)
	}
	if !h.Quarantined || h.Lost {
		t.Errorf("after both quarantines: %+v, want quarantined, every slot marked", h)
	}
	if m := markedSlots(t, first.Client()); m != lockcore.FenceSlots {
		t.Errorf("%d of %d slots marked", m, lockcore.FenceSlots)
	}
}
