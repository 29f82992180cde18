package redisnode

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

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
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, errNodeClosed
	}
	if c.hub == nil {
		c.hub = newHub(c.cc.Subscribe(context.Background()))
	}
	h := c.hub
	c.mu.Unlock()
	return h.watch(ctx, resource, notify)
}

// ScanLocks implements lockcore.Lister for a Cluster: SCAN steps on one
// primary after the other, in the order of the slots they serve. The
// cursor is "slots@i:cursor": the Cluster's slot map when the walk began
// (its fingerprint), the primary's index and SCAN's cursor on it. When the
// map changed meanwhile (a reshard or a failover), the walk begins again
// from the first primary, so that a lock held for the whole walk is
// returned at least once even if its slot moved to a primary already
// walked.
func (c *ClusterNode) ScanLocks(ctx context.Context, prefix, cursor string, count int) ([]string, string, error) {
	if !c.trusted.Load() {
		return nil, "", c.outError()
	}
	shards, err := c.clusterShards(ctx)
	if err != nil {
		return nil, "", err
	}
	fp := slotMapPrint(shards)
	i, cur := 0, uint64(0)
	if cursor != "" {
		f, rest, ok1 := strings.Cut(cursor, "@")
		is, cs, ok2 := strings.Cut(rest, ":")
		ii, err1 := strconv.Atoi(is)
		cc, err2 := strconv.ParseUint(cs, 10, 64)
		if !ok1 || !ok2 || err1 != nil || err2 != nil || ii < 0 {
			return nil, "", fmt.Errorf("redisnode: bad scan cursor")
		}
		if f == fp && ii < len(shards) {
			i, cur = ii, cc
		}
	}
	keys, next, err := c.shard(shards[i].addr).Scan(ctx, cur, lockPattern(prefix), int64(max(count, 1))).Result()
	if err != nil {
		return nil, "", timedOut(ctx, err)
	}
	if !c.trusted.Load() {
		return nil, "", c.outError()
	}
	names := make([]string, 0, len(keys))
	for _, k := range keys {
		name, ok := strings.CutPrefix(k, "lockgate:{")
		if name, ok2 := strings.CutSuffix(name, "}:lock"); ok && ok2 && strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	if next == 0 {
		if i++; i == len(shards) {
			return names, "", nil
		}
	}
	return names, fp + "@" + strconv.Itoa(i) + ":" + strconv.FormatUint(next, 10), nil
}

// slotMapPrint is a short fingerprint of which primary serves which
// slots: its primaries' addresses and lowest slots.
func slotMapPrint(shards []clusterShard) string {
	var b strings.Builder
	for _, s := range shards {
		b.WriteString(s.addr)
		b.WriteString(strconv.Itoa(s.first))
	}
	h := fnv.New32a()
	h.Write([]byte(b.String()))
	return strconv.FormatUint(uint64(h.Sum32()), 36)
}

// InspectLocks implements lockcore.Lister for a Cluster: each lock is read
// in one MULTI/EXEC on its shard (go-redis makes one per slot).
func (c *ClusterNode) InspectLocks(ctx context.Context, resources []string) ([]lockcore.NodeLock, error) {
	if !c.trusted.Load() {
		return nil, c.outError()
	}
	type read struct {
		fields *redis.SliceCmd
		pttl   *redis.DurationCmd
	}
	reads := make([]read, len(resources))
	_, err := c.cc.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i, r := range resources {
			reads[i] = read{p.HMGet(ctx, lockKey(r), "lease", "tok", "owner", "ttl"), p.PTTL(ctx, lockKey(r))}
		}
		return nil
	})
	if err != nil {
		return nil, timedOut(ctx, err)
	}
	if !c.trusted.Load() {
		return nil, c.outError()
	}
	out := make([]lockcore.NodeLock, len(resources))
	for i, rd := range reads {
		v := rd.fields.Val()
		lease, _ := v[0].(string)
		pttl := rd.pttl.Val()
		if lease == "" || pttl <= 0 {
			continue
		}
		str := func(x any) string { s, _ := x.(string); return s }
		tok, _ := strconv.ParseInt(str(v[1]), 10, 64)
		ttl, _ := strconv.ParseInt(str(v[3]), 10, 64)
		out[i] = lockcore.NodeLock{Found: true, Lease: lease, Token: tok, Owner: str(v[2]),
			TTL: time.Duration(ttl) * time.Millisecond, Remaining: pttl}
	}
	return out, nil
}
