package redisnode_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
)

// A Cluster node lists the locks of every shard, and a walk that its slot
// map changes under begins again, so a lock held throughout is listed
// even when its slot moved to a shard already walked.
func TestClusterListsEveryShard(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	n := newClusterNode(t, c)
	ctx := context.Background()
	var want []string
	for i := range 30 {
		r := fmt.Sprintf("list-%d", i)
		if _, err := n.Acquire(ctx, lockcore.NodeAcquire{Resource: r, Lease: lockcore.NewLeaseID(), TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		want = append(want, r)
	}
	walk := func(between func(next string)) []string {
		var got []string
		cursor := ""
		for step := 0; ; step++ {
			names, next, err := n.ScanLocks(ctx, "list-", cursor, 5)
			if err != nil {
				t.Fatalf("ScanLocks step %d: %v", step, err)
			}
			got = append(got, names...)
			if next == "" {
				break
			}
			if step > 10000 {
				t.Fatal("the walk does not end")
			}
			between(next)
			cursor = next
		}
		slices.Sort(got)
		return slices.Compact(got)
	}
	if got := walk(func(string) {}); !slices.Equal(got, sortedCopy(want)) {
		t.Fatalf("listed %v, want %v", got, sortedCopy(want))
	}
	// A lock on the last shard moves to the first once the walk has left
	// the first (the cursor names the shard it is on).
	var moving string
	last, first := c.OwnerOf(lockcore.FenceSlots-1), c.OwnerOf(0)
	for _, r := range want {
		if c.OwnerOf(lockcore.FenceSlot(r)) == last {
			moving = r
			break
		}
	}
	if moving == "" {
		t.Fatal("no lock on the last shard")
	}
	moved := false
	got := walk(func(next string) {
		if !moved && strings.Contains(next, "@1:") {
			moved = true
			if err := c.MoveSlot(lockcore.FenceSlot(moving), last, first, 0); err != nil {
				t.Fatal(err)
			}
			c.WaitStable()
		}
	})
	if !moved {
		t.Fatal("the walk never reached the second shard")
	}
	if !slices.Equal(got, sortedCopy(want)) {
		t.Fatalf("listed %v while %s moved to the first shard, want %v", got, moving, sortedCopy(want))
	}
	locks, err := n.InspectLocks(ctx, want)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range locks {
		if !l.Found {
			t.Fatalf("InspectLocks: %s not found", want[i])
		}
	}
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
