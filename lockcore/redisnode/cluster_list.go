package redisnode

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/lockcore"
)

// errMigrating is what a listing step fails with when a slot of the
// Cluster was migrating around it.
var errMigrating = errors.New("redisnode: a slot of the Cluster is migrating (a reshard is under way); " +
	"a listing could miss a lock moved during it, list again once it is over")

// ScanLocks implements lockcore.Lister for a Cluster: SCAN steps on one
// primary after the other, in the order of the slots they serve. The
// cursor is "map@i:cursor": the Cluster's slot map when the walk began
// (its fingerprint, see slotOwners), the primary's index and SCAN's
// cursor on it.
//
// A slot's keys move one MIGRATE at a time while the slot migrates, and
// the slot map changes only at the end, so a lock could leave a primary
// not yet walked for one already walked and be returned by no step. After
// each SCAN the step reads the map and every primary's own migration
// marks (CLUSTER NODES): a migration under way fails the step
// (errMigrating: lockcore.List then lists through the other Redlock
// nodes), and a map changed since the walk began makes the next step
// begin the walk again from the first primary (a migration that ended
// between two steps). So a walk that ends saw no key move: a lock held
// for the whole walk is returned at least once. Not seen: a migration
// begun and undone (SETSLOT STABLE, its keys moved back) between two
// steps, or keys moved by MIGRATE to a primary that imports their slot
// while neither it nor the source serving the slot shows a mark
// (redis-cli --cluster reshard always marks both).
func (c *ClusterNode) ScanLocks(ctx context.Context, prefix, cursor string, count int) ([]string, string, error) {
	if !c.trusted.Load() {
		return nil, "", c.outError()
	}
	shards, fp, err := c.slotOwners(ctx)
	if err != nil {
		return nil, "", err
	}
	i, cur, err := parseClusterCursor(cursor, fp, len(shards))
	if err != nil {
		return nil, "", err
	}
	if c.beforeScan != nil {
		c.beforeScan(i)
	}
	rdb := c.shard(shards[i].addr)
	keys, next, err := rdb.Scan(ctx, cur, scanPattern(prefix), int64(max(count, 1))).Result()
	if err != nil {
		return nil, "", timedOut(ctx, err)
	}
	if !c.trusted.Load() {
		return nil, "", c.outError()
	}
	after, err := c.walkEnd(ctx, fp)
	if err != nil {
		return nil, "", err
	}
	names, err := holdNames(ctx, rdb, keys, prefix)
	if err != nil {
		return nil, "", timedOut(ctx, err)
	}
	if after != "" {
		return names, after + "@0:0", nil // from the first primary again
	}
	if next == 0 {
		if i++; i == len(shards) {
			return names, "", nil
		}
	}
	return names, fp + "@" + strconv.Itoa(i) + ":" + strconv.FormatUint(next, 10), nil
}

// walkEnd ends a listing step begun on the slot map fp: errMigrating when
// a primary has a slot migrating now, the map's new fingerprint when it
// is not fp any longer, else "".
func (c *ClusterNode) walkEnd(ctx context.Context, fp string) (string, error) {
	shards, now, err := c.slotOwners(ctx)
	if err != nil {
		return "", err
	}
	for _, sh := range shards {
		nodes, err := c.shard(sh.addr).ClusterNodes(ctx).Result()
		if err != nil {
			return "", timedOut(ctx, err)
		}
		if ownMigrations(nodes) {
			return "", fmt.Errorf("%w (%s)", errMigrating, sh.addr)
		}
	}
	if now != fp {
		return now, nil
	}
	return "", nil
}

// ownMigrations reports whether CLUSTER NODES's line for the node that
// answered it ("myself") marks a slot as migrating ("[slot->-id]") or
// importing ("[slot-<-id]"); a node shows only its own marks.
func ownMigrations(nodes string) bool {
	for line := range strings.Lines(nodes) {
		f := strings.Fields(line)
		if len(f) < 3 || !slices.Contains(strings.Split(f[2], ","), "myself") {
			continue
		}
		for _, s := range f[min(len(f), 8):] {
			if strings.HasPrefix(s, "[") {
				return true
			}
		}
	}
	return false
}

// parseClusterCursor reads ScanLocks's cursor: the primary's index and
// SCAN's cursor on it, or the walk's start when the cursor is "" or was
// made on another slot map than fp (or with more primaries than shards).
func parseClusterCursor(cursor, fp string, shards int) (int, uint64, error) {
	if cursor == "" {
		return 0, 0, nil
	}
	f, rest, ok1 := strings.Cut(cursor, "@")
	is, cs, ok2 := strings.Cut(rest, ":")
	i, err1 := strconv.Atoi(is)
	cur, err2 := strconv.ParseUint(cs, 10, 64)
	if !ok1 || !ok2 || err1 != nil || err2 != nil || i < 0 {
		return 0, 0, fmt.Errorf("redisnode: bad scan cursor")
	}
	if f != fp || i >= shards {
		return 0, 0, nil
	}
	return i, cur, nil
}

// lockNames are the resource names of the lock keys among keys that
// start with prefix.
func lockNames(keys []string, prefix string) []string {
	names := make([]string, 0, len(keys))
	for _, k := range keys {
		name, ok := strings.CutPrefix(k, "lockgate:{")
		if name, ok2 := strings.CutSuffix(name, "}:lock"); ok && ok2 && strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	return names
}

// InspectLocks implements lockcore.Lister for a Cluster: inspect.lua per
// lock (each read in one atomic step on its shard), in one Cluster
// pipeline. It only reads, so go-redis may send a step again.
func (c *ClusterNode) InspectLocks(ctx context.Context, resources []string) ([]lockcore.NodeLock, error) {
	if !c.trusted.Load() {
		return nil, c.outError()
	}
	if locks, holds, lockAt, holdAt := splitHolds(resources); len(holds) > 0 {
		out := make([]lockcore.NodeLock, len(resources))
		if len(locks) > 0 {
			views, err := c.InspectLocks(ctx, locks)
			if err != nil {
				return nil, err
			}
			for i, v := range views {
				out[lockAt[i]] = v
			}
		}
		views, err := c.inspectHolds(ctx, holds)
		if err != nil {
			return nil, err
		}
		if !c.trusted.Load() {
			return nil, c.outError()
		}
		for i, v := range views {
			out[holdAt[i]] = v
		}
		return out, nil
	}
	src := scriptSource(inspectScript)
	if err := c.loadScript(ctx, src); err != nil {
		return nil, err
	}
	pipe := c.cc.Pipeline()
	cmds := make([]*redis.Cmd, len(resources))
	for i, r := range resources {
		cmds[i] = pipe.EvalSha(ctx, inspectScript.Hash(), []string{lockKey(r), tokensKey(r)})
	}
	if err := execAll(ctx, pipe); err != nil {
		return nil, timedOut(ctx, err)
	}
	if !c.trusted.Load() {
		return nil, c.outError()
	}
	out := make([]lockcore.NodeLock, len(resources))
	for i, cmd := range cmds {
		l, err := inspectReply(cmd.Val())
		if err != nil {
			return nil, err
		}
		if l.Remaining > 0 {
			out[i] = l
		}
	}
	return out, nil
}
