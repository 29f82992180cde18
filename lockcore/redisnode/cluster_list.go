package redisnode

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/lockcore"
)

// Watch implements lockcore.Watcher for a Cluster. Releases are published
// with PUBLISH, which a Cluster delivers to the subscribers of every
// shard, so one pub/sub connection, to any node of the Cluster, hears all
// of them (see hub); a lost connection is made again to another node and
// every watch is notified, as for Node. Sharded Pub/Sub (SPUBLISH) would
// keep each release on its shard; it needs the release scripts to publish
// with it, which Node's single servers do not need.
func (c *ClusterNode) Watch(ctx context.Context, resource string, notify func()) (func(), error) {
	h := c.getHub()
	if h == nil {
		return nil, errNodeClosed
	}
	return h.watch(ctx, releasedKey(resource), notify)
}

// WatchAcquired implements lockcore.AcquireWatcher as Watch does, on the
// resource's grant channel, over the same hub.
func (c *ClusterNode) WatchAcquired(ctx context.Context, resource string, notify func()) (func(), error) {
	h := c.getHub()
	if h == nil {
		return nil, errNodeClosed
	}
	return h.watch(ctx, acquiredKey(resource), notify)
}

// getHub returns the node's hub, made on first use, or nil once the node is
// closed.
func (c *ClusterNode) getHub() *hub {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	if c.hub == nil {
		c.hub = newHub(c.cc.Subscribe(context.Background()))
	}
	return c.hub
}

// ScanLocks implements lockcore.Lister for a Cluster: SCAN steps on one
// primary after the other, in the order of the slots they serve. The
// cursor is "map@i:cursor": the Cluster's slot map when the walk began
// (its fingerprint, see slotOwners), the primary's index and SCAN's cursor on it. When the
// map changed meanwhile (a reshard or a failover), the walk begins again
// from the first primary, so that a lock held for the whole walk is
// returned at least once even if its slot moved to a primary already
// walked.
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
	keys, next, err := c.shard(shards[i].addr).Scan(ctx, cur, lockPattern(prefix), int64(max(count, 1))).Result()
	if err != nil {
		return nil, "", timedOut(ctx, err)
	}
	if !c.trusted.Load() {
		return nil, "", c.outError()
	}
	names := lockNames(keys, prefix)
	if next == 0 {
		if i++; i == len(shards) {
			return names, "", nil
		}
	}
	return names, fp + "@" + strconv.Itoa(i) + ":" + strconv.FormatUint(next, 10), nil
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
