package redisnode

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/lockcore"
)

// Taking over the data of an earlier lockgate: a node in service under data
// format 1 (see Check) and the per-resource fencing counters kept before
// per-slot counters (see Repair).

// isFormat1 reports whether v is the record of an earlier lockgate's node
// in service (data format 1): initialized, with no recovery record, no
// data format and no quarantine.
func isFormat1(v checkReply) bool {
	return v.init && v.rid == "" && v.format == 0 && v.qsince < 0
}

// upgradeFormat1 takes over an earlier lockgate's node in service (data
// format 1) as it is, on the first check of this version, so that an
// upgrade keeps the cluster serving (see upgrade.lua and
// docs/operations.md, "Upgrading"). It updates v when it took the node.
func (n *Node) upgradeFormat1(ctx context.Context, v *checkReply, id string) error {
	if !isFormat1(*v) || n.protect != "1" {
		return nil
	}
	took, err := upgradeScript.Run(ctx, n.rdb, []string{metaKey}, id, dataFormat).Int64()
	if err != nil {
		return timedOut(ctx, err)
	}
	if took == 1 {
		v.rid, v.format = id, dataFormat
	}
	return nil
}

// legacyPattern matches the per-resource fencing counters of lockgate
// before per-slot counters: lockgate:{resource}:fence, plain integers that
// never expired.
const legacyPattern = "lockgate:{*}:fence"

// legacyCounters raises floor, per slot, to the per-resource counters an
// earlier lockgate left on the node (so that tokens keep growing across
// the upgrade), and returns their keys. It SCANs, never KEYS.
func (n *Node) legacyCounters(ctx context.Context, floor []int64) ([]string, error) {
	var keys []string
	var cursor uint64
	for {
		batch, next, err := n.rdb.Scan(ctx, cursor, legacyPattern, 1000).Result()
		if err != nil {
			return nil, err
		}
		found, err := n.legacyValues(ctx, batch)
		if err != nil {
			return nil, err
		}
		for _, c := range found {
			slot := legacySlot(c.key)
			floor[slot] = max(floor[slot], c.n)
			keys = append(keys, c.key)
		}
		if cursor = next; cursor == 0 {
			return keys, nil
		}
	}
}

// legacyCounter is a legacy counter's key and value.
type legacyCounter struct {
	key string
	n   int64
}

// legacyValues reads the legacy counters keys, pipelined, and returns those
// that hold an integer (a key may be gone meanwhile, or not be a counter).
func (n *Node) legacyValues(ctx context.Context, keys []string) ([]legacyCounter, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	pipe := n.rdb.Pipeline()
	gets := make([]*redis.StringCmd, len(keys))
	for i, k := range keys {
		gets[i] = pipe.Get(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	var found []legacyCounter
	for i, g := range gets {
		if v, err := g.Int64(); err == nil {
			found = append(found, legacyCounter{keys[i], v})
		}
	}
	return found, nil
}

// legacySlot is the fencing slot of the resource a legacy counter key
// (lockgate:{resource}:fence) belongs to.
func legacySlot(key string) int {
	return lockcore.FenceSlot(strings.TrimSuffix(strings.TrimPrefix(key, "lockgate:{"), "}:fence"))
}
