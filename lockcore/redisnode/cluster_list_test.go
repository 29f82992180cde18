package redisnode_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/redisnode"
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

// A Cluster node whose slot migrates fails its listing steps
// (ErrMigrating), and lockcore.List lists through the other Redlock
// nodes: a lock a quorum holds is listed once, even though its keys moved
// to the Cluster's first shard, already walked, and the Cluster node is
// the first one scanned.
func TestClusterListingDuringAReshard(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	srvs := redistest.StartN(t, 2, nil)
	nodes := []lockcore.Node{newClusterNode(t, c), newNode(t, srvs[0]), newNode(t, srvs[1])}
	rl, err := lockcore.New(nodes, &lockcore.Options{NodeTimeout: time.Second, MinTTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rl.Close)
	ctx := context.Background()
	first, last := c.OwnerOf(0), c.OwnerOf(lockcore.FenceSlots-1)
	var moving string
	for i := 0; moving == ""; i++ {
		if r := fmt.Sprintf("mv-%d", i); c.OwnerOf(lockcore.FenceSlot(r)) == last {
			moving = r
		}
	}
	if _, err := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: moving, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	list := func() []string {
		t.Helper()
		var got []string
		cursor := ""
		for range 100 {
			page, err := rl.List(ctx, "mv-", 100, cursor)
			if err != nil {
				t.Fatalf("List: %v", err)
			}
			for _, l := range page.Locks {
				got = append(got, l.Resource)
			}
			if cursor = page.Next; cursor == "" {
				return got
			}
		}
		t.Fatal("the listing does not end")
		return nil
	}
	if got := list(); !slices.Equal(got, []string{moving}) {
		t.Fatalf("before the reshard: listed %v, want [%s]", got, moving)
	}
	slot := lockcore.FenceSlot(moving)
	reviewMigrate(t, slot, last, first)
	reviewMoveKeys(t, slot, last, first)
	defer reviewFinish(c, slot, first)
	if _, _, err := nodes[0].(lockcore.Lister).ScanLocks(ctx, "mv-", "", 1000); !errors.Is(err, redisnode.ErrMigrating) {
		t.Fatalf("a listing step of the Cluster node during the migration: %v, want ErrMigrating", err)
	}
	if got := list(); !slices.Equal(got, []string{moving}) {
		t.Fatalf("during the reshard: listed %v, want [%s] once", got, moving)
	}
}

// A slot that moves, whole, between a step's read of the slot map and its
// SCAN (here on the last shard's only step, so that no later step would
// notice) makes that step end the walk with a new beginning, not with the
// end: the lock moved to the first shard, already walked, is listed.
func TestClusterScanRestartsWhenTheMapChangesDuringItsLastStep(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	n := newClusterNode(t, c)
	ctx := context.Background()
	first, last := c.OwnerOf(0), c.OwnerOf(lockcore.FenceSlots-1)
	var moving string
	for i := 0; moving == ""; i++ {
		if r := fmt.Sprintf("mv-%d", i); c.OwnerOf(lockcore.FenceSlot(r)) == last {
			moving = r
		}
	}
	if _, err := n.Acquire(ctx, lockcore.NodeAcquire{Resource: moving, Lease: lockcore.NewLeaseID(), TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	moved := false
	n.SetBeforeScan(func(shard int) {
		if shard == 2 && !moved {
			moved = true
			if err := c.MoveSlot(lockcore.FenceSlot(moving), last, first, 0); err != nil {
				t.Error(err)
			}
			c.WaitStable()
		}
	})
	var got []string
	cursor := ""
	for step := 0; ; step++ {
		// A count far above the keys of a shard: one step per shard.
		names, next, err := n.ScanLocks(ctx, "mv-", cursor, 1_000_000)
		if err != nil {
			t.Fatalf("ScanLocks step %d: %v", step, err)
		}
		got = append(got, names...)
		if next == "" {
			break
		}
		if step > 100 {
			t.Fatal("the walk does not end")
		}
		cursor = next
	}
	if !moved {
		t.Fatal("the walk never reached the third shard")
	}
	if !slices.Contains(got, moving) {
		t.Fatalf("a walk during which %s moved to the first shard listed %v: the lock is missing", moving, got)
	}
}
