package lockcore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
	"github.com/lockgate/lockgate/lockcore/nodetest"
)

func setMemNodes(n int) func(t *testing.T) []lockcore.Node {
	return func(t *testing.T) []lockcore.Node {
		nodes := make([]lockcore.Node, n)
		for i := range nodes {
			nodes[i] = memnode.New(nil)
		}
		return nodes
	}
}

func TestLockSetsOverMemoryNodes(t *testing.T) { nodetest.RunSets(t, setMemNodes(3)) }

// A set names 1 to 64 valid resources, none twice; its members are put in
// the canonical order.
func TestSetMembersChecksTheSet(t *testing.T) {
	many := make([]string, lockcore.MaxSetMembers+1)
	for i := range many {
		many[i] = fmt.Sprintf("m%02d", i)
	}
	for _, tt := range []struct {
		name    string
		members []string
		want    string // the reason's start, "" for a valid set
	}{
		{"one member is a set", []string{"a"}, ""},
		{"64 members are a set", many[:64], ""},
		{"no member is not", nil, "a lock set has 1 to 64 members"},
		{"65 are not", many, "a lock set has 1 to 64 members"},
		{"a member named twice is refused", []string{"a", "b", "a"}, `member "a" is named twice`},
		{"a member outside the alphabet is refused", []string{"a", "b,c"}, `member "b,c"`},
		{"an empty member is refused", []string{"a", ""}, `member ""`},
	} {
		got, err := lockcore.SetMembers(tt.members)
		if tt.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tt.name, err)
			}
			continue
		}
		inv, ok := errors.AsType[*lockcore.InvalidError](err)
		if !ok || inv.Field != "resources" || !strings.HasPrefix(inv.Reason, tt.want) {
			t.Errorf("%s: %v, %v; want an *InvalidError on resources: %s...", tt.name, got, err, tt.want)
		}
	}
	if got, _ := lockcore.SetMembers([]string{"c", "a", "b"}); lockcore.SetName(got) != "a,b,c" {
		t.Errorf("canonical order: %v", got)
	}
}

// Without the canonical order (rule S2) two sets queued in opposite orders
// deadlock until the first one's wait runs out: the check of
// nodetest.OverlappingSets fails for sets taken in the order asked.
func TestSetsTakenOutOfOrderDeadlock(t *testing.T) {
	rl, err := lockcore.New(setMemNodes(3)(t), nodetest.SetOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rl.Close)
	const wait = time.Second
	err2, err1, after := nodetest.OverlappingSets(t, rl, "ooo-a", "ooo-b", wait,
		func(ctx context.Context, rl *lockcore.Redlock, req lockcore.SetAcquireRequest) (*lockcore.SetLease, error) {
			return lockcore.AcquireSetInOrder(ctx, rl, req)
		})
	if !errors.Is(err2, lockcore.ErrTaken) || after < wait*9/10 {
		t.Fatalf("out of order: S2 %v after %v; want its wait to run out in the deadlock", err2, after)
	}
	t.Logf("out of order: S2 %v after %v (deadlocked until its wait ran out), then S1 %v", err2, after, err1)
}

// TestOverlappingSetsUnderLoad: 16 clients take random overlapping sets
// of 2 to 8 of 20 names, with waits, for 5 s (LOCKGATE_SET_SOAK=60s for
// longer): no member is held by two sets at once, tokens per member grow,
// every request is answered within its wait (and the undo or extend that
// follows it), and hardly any runs out of its wait: a deadlock would make
// most of them run out.
func TestOverlappingSetsUnderLoad(t *testing.T) {
	d := nodetest.SoakFor(t)
	rl, err := lockcore.New(setMemNodes(3)(t), nodetest.SetOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rl.Close)
	nodetest.SoakSets(t, rl, func(ctx context.Context, rl *lockcore.Redlock, req lockcore.SetAcquireRequest) (*lockcore.SetLease, error) {
		return rl.AcquireSet(ctx, req)
	}, d)
}

// A set refused because nodes failed (no quorum for its second member)
// undoes its first member on the nodes it reaches; the members left on
// nodes that did not answer are released again once they are back, for a
// lease the gateway minted, long before their TTL (rule S3).
func TestASetRefusedByFailedNodesIsUndoneWhenTheyAreBack(t *testing.T) {
	rl, fs := faultyCluster(t, 3)
	ctx := context.Background()
	down := func(err error) {
		fs[1].SetDown(err)
		fs[2].SetDown(err)
	}
	for _, f := range fs {
		f.SetBeforeAcquire(func(req lockcore.NodeAcquire) {
			if req.Resource == "undo-b" {
				down(errOff) // nodes 1 and 2 fail from the set's second member on
			}
		})
	}
	_, err := rl.AcquireSet(ctx, lockcore.SetAcquireRequest{Resources: []string{"undo-a", "undo-b"}, TTL: time.Minute})
	if serr, ok := errors.AsType[*lockcore.SetError](err); !ok || serr.Resource != "undo-b" || !errors.Is(err, lockcore.ErrNoQuorum) {
		t.Fatalf("a set whose second member finds no quorum: %v", err)
	}
	for _, f := range fs {
		f.SetBeforeAcquire(nil)
	}
	// undo-a is still held on nodes 1 and 2, a quorum, that did not hear
	// the undo.
	if l, err := fs[1].Inner().Inspect(ctx, "undo-a"); err != nil || !l.Found {
		t.Fatalf("node 1 lost undo-a without hearing the undo: %+v, %v", l, err)
	}
	down(nil)
	back := time.Now()
	for {
		_, err := rl.Inspect(ctx, "undo-a")
		if errors.Is(err, lockcore.ErrNotHeld) {
			break
		}
		if time.Since(back) > 5*time.Second {
			t.Fatalf("undo-a still held (%v) 5 s after the nodes came back; its TTL is a minute", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("undo-a released %v after the nodes came back", time.Since(back).Round(time.Millisecond))
}
