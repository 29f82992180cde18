package redisnode_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/redisnode"
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
// ScanLocks's cursor restarted the walk only when the slot map (CLUSTER
// SLOTS) changed, and the map changes at SETSLOT NODE, at the end of a
// slot's migration. While the slot is MIGRATING its keys move one MIGRATE
// at a time from the source to the target: a lock whose key moves from a
// shard not yet walked to one already walked was returned by no step, so
// a lock held for the whole walk was not listed (lockcore.Lister's
// contract), and lockcore.List missed it too.
//
// A walk cannot list such a lock from this node alone: its key is on a
// shard already walked. So a step that ends while a slot migrates fails
// (ErrMigrating), and lockcore.List lists through the other Redlock nodes
// (TestClusterListingDuringAReshard). The test pins that: the walk fails
// once the migration has begun, never ends without the lock, and a walk
// after the migration lists it.
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
	walk := func(between func(next string)) ([]string, error) {
		var got []string
		cursor := ""
		for step := 0; step < 1000; step++ {
			names, next, err := n.ScanLocks(ctx, "mv-", cursor, 1000)
			if err != nil {
				return got, err
			}
			got = append(got, names...)
			if next == "" {
				return got, nil
			}
			between(next)
			cursor = next
		}
		t.Fatal("the walk does not end")
		return nil, nil
	}
	moved := false
	got, err := walk(func(next string) {
		if !moved && !strings.Contains(next, "@0:") {
			// The first shard is walked: the lock's keys move to it now,
			// and the slot stays MIGRATING.
			reviewMigrate(t, slot, last, first)
			reviewMoveKeys(t, slot, last, first)
			moved = true
		}
	})
	if !moved {
		t.Fatal("the walk never left the first shard")
	}
	if l, err := n.Inspect(ctx, moving); err != nil || !l.Found {
		t.Fatalf("the lock is not held after the move: %+v, %v", l, err)
	}
	if err == nil {
		t.Fatalf("a walk during which %s moved to a shard already walked ended, listing %v; want ErrMigrating", moving, got)
	}
	if !errors.Is(err, redisnode.ErrMigrating) {
		t.Fatalf("the walk during the migration: %v; want ErrMigrating", err)
	}
	t.Logf("the walk during the migration: %v", err)
	reviewFinish(c, slot, first)
	if got, err := walk(func(string) {}); err != nil || !slices.Contains(got, moving) {
		t.Fatalf("a walk after the migration listed %v, %v; want %s", got, err, moving)
	}
}

// TestReviewClusterReleaseRefusedForAWholeMigration is a review finding:
// release.lua, handoff.lua and force.lua declared the release channel
// lockgate:{r}:released as a key, but it is never one. While the lock's
// slot is MIGRATING, Redis counts declared keys that do not exist: a
// script with some keys present and one missing gets TRYAGAIN on the
// source, and on the target (ASKING) too, so a release was refused for the
// whole migration of the slot, even while every real key of the lock was
// still on the source. The scripts now build the channel from KEYS[1] and
// declare only the lock and its slot's counter: a release, a hand-off and
// a force-release run while the slot migrates and nothing of it has moved.
//
// A free lock's acquisition declares its lock key, which does not exist,
// beside the counter, which does: Redis Cluster's multi-key rule refuses it
// (TRYAGAIN) until the slot's migration ends, and the test pins that (see
// lockcore's doc, "A node that is a Redis Cluster").
func TestReviewClusterReleaseRefusedForAWholeMigration(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	n := newClusterNode(t, c)
	ctx := context.Background()
	// Three locks of one slot: released, handed off, force-released.
	names := []string{"rel-0"}
	slot := lockcore.FenceSlot(names[0])
	for i := 1; len(names) < 3; i++ {
		if r := fmt.Sprintf("rel-%d", i); lockcore.FenceSlot(r) == slot {
			names = append(names, r)
		}
	}
	leases := map[string]string{}
	for _, r := range names {
		leases[r] = lockcore.NewLeaseID()
		if _, err := n.Acquire(ctx, lockcore.NodeAcquire{Resource: r, Lease: leases[r], TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
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
	if _, err := n.Extend(ctx, names[0], leases[names[0]], time.Minute, 0); err != nil {
		t.Fatalf("extend while the slot is migrating, no key moved: %v", err)
	}
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	before := n.Resent()
	rep, err := n.Release(rctx, names[0], leases[names[0]], 0)
	if err != nil || rep.Status != lockcore.StatusOK {
		t.Fatalf("release while the slot is migrating, no key moved: %+v, %v (sent again %d times)", rep, err, n.Resent()-before)
	}
	next := lockcore.NodeAcquire{Resource: names[1], Lease: lockcore.NewLeaseID(), TTL: time.Minute}
	if rel, _, err := n.HandOff(rctx, leases[names[1]], 0, next); err != nil || rel.Status != lockcore.StatusOK {
		t.Fatalf("hand-off while the slot is migrating, no key moved: %+v, %v", rel, err)
	}
	if broken, _, err := n.BreakLock(rctx, names[2], lockcore.NewLeaseID(), time.Second); err != nil || broken == 0 {
		t.Fatalf("force-release while the slot is migrating, no key moved: broke token %d, %v", broken, err)
	}
	// The documented limit: a free lock's acquisition waits for the end of
	// the migration (TRYAGAIN, sent again until its deadline).
	actx, cancel2 := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel2()
	before = n.Resent()
	if r, err := n.Acquire(actx, lockcore.NodeAcquire{Resource: names[0], Lease: lockcore.NewLeaseID(), TTL: time.Minute}); err == nil || n.Resent() == before {
		t.Fatalf("acquire of a free lock while its slot migrates: %+v, %v (sent again %d times); want refused (TRYAGAIN) until the deadline",
			r, err, n.Resent()-before)
	}
	reviewMoveKeys(t, slot, src, dst)
	reviewFinish(c, slot, dst)
	if r, err := n.Acquire(ctx, lockcore.NodeAcquire{Resource: names[0], Lease: lockcore.NewLeaseID(), TTL: time.Minute}); err != nil || r.Status != lockcore.StatusGranted {
		t.Fatalf("acquire once the slot stopped migrating: %+v, %v", r, err)
	}
}
