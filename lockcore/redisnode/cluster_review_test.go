package redisnode_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
)

// reviewMigrate puts slot in MIGRATING on src and IMPORTING on dst (the
// first half of a reshard, redis-cli --cluster reshard's order).
func reviewMigrate(t *testing.T, slot int, src, dst *redistest.Server) {
	t.Helper()
	sl := strconv.Itoa(slot)
	if _, err := dst.Do("CLUSTER", "SETSLOT", sl, "IMPORTING", src.NodeID()); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Do("CLUSTER", "SETSLOT", sl, "MIGRATING", dst.NodeID()); err != nil {
		t.Fatal(err)
	}
}

// reviewMoveKeys MIGRATEs every key of slot from src to dst.
func reviewMoveKeys(t *testing.T, slot int, src, dst *redistest.Server) {
	t.Helper()
	out, err := src.Do("CLUSTER", "GETKEYSINSLOT", strconv.Itoa(slot), "100")
	if err != nil {
		t.Fatal(err)
	}
	keys := strings.Fields(out)
	if len(keys) == 0 {
		t.Fatal("no key in the slot")
	}
	host, port, _ := net.SplitHostPort(dst.Addr())
	if _, err := src.Do(append([]string{"MIGRATE", host, port, "", "0", "5000", "REPLACE", "KEYS"}, keys...)...); err != nil {
		t.Fatal(err)
	}
}

// reviewFinish ends the migration: SETSLOT NODE on every primary.
func reviewFinish(c *redistest.Cluster, slot int, dst *redistest.Server) {
	for _, p := range c.Primaries() {
		_, _ = p.Do("CLUSTER", "SETSLOT", strconv.Itoa(slot), "NODE", dst.NodeID())
	}
	c.WaitStable()
}

// TestReviewClusterScanMissesALockMovedDuringTheWalk is a review finding:
// ScanLocks's cursor restarts the walk only when the slot map (CLUSTER
// SLOTS) changes, and the map changes at SETSLOT NODE, at the end of a
// slot's migration. While the slot is MIGRATING its keys move one MIGRATE
// at a time from the source to the target: a lock whose key moves from a
// shard not yet walked to one already walked is returned by no step, so a
// lock held for the whole walk is not listed (lockcore.Lister's contract).
// lockcore.List then misses it too: it lists a lock only at the first
// scanned node that holds it, and this node holds it.
func TestReviewClusterScanMissesALockMovedDuringTheWalk(t *testing.T) {
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
	slot := lockcore.FenceSlot(moving)
	reviewMigrate(t, slot, last, first)
	defer reviewFinish(c, slot, first)
	var got []string
	cursor, moved := "", false
	for step := 0; ; step++ {
		names, next, err := n.ScanLocks(ctx, "mv-", cursor, 1000)
		if err != nil {
			t.Fatalf("ScanLocks step %d: %v", step, err)
		}
		got = append(got, names...)
		if next == "" {
			break
		}
		if !moved && !strings.Contains(next, "@0:") {
			// The first shard is walked: the lock's keys move to it now.
			reviewMoveKeys(t, slot, last, first)
			moved = true
		}
		cursor = next
	}
	if !moved {
		t.Fatal("the walk never left the first shard")
	}
	if l, err := n.Inspect(ctx, moving); err != nil || !l.Found {
		t.Fatalf("the lock is not held after the move: %+v, %v", l, err)
	}
	if !slices.Contains(got, moving) {
		t.Fatalf("a walk during which %s was held throughout listed %v: the lock is missing", moving, got)
	}
}

// TestReviewClusterReleaseRefusedForAWholeMigration is a review finding:
// release.lua (and handoff.lua, force.lua) declare the release channel
// lockgate:{r}:released as KEYS[3], but it is never a key. While the
// lock's slot is MIGRATING, Redis counts declared keys that do not exist:
// a script with some keys present and one missing gets TRYAGAIN on the
// source, and on the target (ASKING) too, so a release is refused for the
// whole migration of the slot, even while every real key of the lock is
// still on the source and nothing has moved. The doc says TRYAGAIN lasts
// "a moment", while the slot's keys are split between two shards.
func TestReviewClusterReleaseRefusedForAWholeMigration(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	n := newClusterNode(t, c)
	ctx := context.Background()
	r, lease := "rel-1", lockcore.NewLeaseID()
	if _, err := n.Acquire(ctx, lockcore.NodeAcquire{Resource: r, Lease: lease, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	slot := lockcore.FenceSlot(r)
	src := c.OwnerOf(slot)
	var dst *redistest.Server
	for _, p := range c.Primaries() {
		if p != src {
			dst = p
			break
		}
	}
	reviewMigrate(t, slot, src, dst)
	defer reviewFinish(c, slot, dst)
	// Nothing has moved: an extend (its keys all exist) runs on the source.
	if _, err := n.Extend(ctx, r, lease, time.Minute, 0); err != nil {
		t.Fatalf("extend while the slot is migrating, no key moved: %v", err)
	}
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	before := n.Resent()
	rep, err := n.Release(rctx, r, lease, 0)
	if err != nil {
		t.Fatalf("release while the slot is migrating, no key moved: %v (sent again %d times)", err, n.Resent()-before)
	}
	t.Logf("released: %+v", rep)
}
