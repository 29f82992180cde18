package redisnode

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/lockcore"
)

var (
	_ lockcore.Lister        = (*Node)(nil)
	_ lockcore.ForceReleaser = (*Node)(nil)

	//go:embed force.lua
	forceLua    string
	forceScript = redis.NewScript(forceLua)
)

// lockPattern is the SCAN MATCH pattern of the lock keys of resources whose
// names start with prefix, its glob characters escaped.
func lockPattern(prefix string) string {
	var b strings.Builder
	b.WriteString("lockgate:{")
	for _, c := range prefix {
		if strings.ContainsRune(`*?[]\`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	b.WriteString("*}:lock")
	return b.String()
}

// ScanLocks implements lockcore.Lister with one SCAN step (MATCH on the lock
// keys of the prefix, COUNT count): never KEYS, so a step holds the server
// for about count keys, whatever the size of the keyspace. The cursor is
// SCAN's own, in decimal.
func (n *Node) ScanLocks(ctx context.Context, prefix, cursor string, count int) ([]string, string, error) {
	if !n.trusted.Load() { // out of service: its locks may not be all there are
		return nil, "", n.outError()
	}
	var cur uint64
	if cursor != "" {
		c, err := strconv.ParseUint(cursor, 10, 64)
		if err != nil {
			return nil, "", fmt.Errorf("redisnode: bad scan cursor")
		}
		cur = c
	}
	keys, next, err := n.rdb.Scan(ctx, cur, lockPattern(prefix), int64(max(count, 1))).Result()
	if err != nil {
		return nil, "", err
	}
	if !n.trusted.Load() {
		return nil, "", n.outError()
	}
	names := make([]string, 0, len(keys))
	for _, k := range keys {
		name, ok := strings.CutPrefix(k, "lockgate:{")
		if name, ok2 := strings.CutSuffix(name, "}:lock"); ok && ok2 && strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	if next == 0 {
		return names, "", nil
	}
	return names, strconv.FormatUint(next, 10), nil
}

// InspectLocks implements lockcore.Lister: one MULTI/EXEC of HMGET and PTTL
// per lock, so each lock is read in one atomic step.
func (n *Node) InspectLocks(ctx context.Context, resources []string) ([]lockcore.NodeLock, error) {
	if !n.trusted.Load() {
		return nil, n.outError()
	}
	type read struct {
		fields *redis.SliceCmd
		pttl   *redis.DurationCmd
	}
	reads := make([]read, len(resources))
	_, err := n.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i, r := range resources {
			reads[i] = read{p.HMGet(ctx, lockKey(r), "lease", "tok", "owner", "ttl"), p.PTTL(ctx, lockKey(r))}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !n.trusted.Load() {
		return nil, n.outError()
	}
	out := make([]lockcore.NodeLock, len(resources))
	for i, rd := range reads {
		v := rd.fields.Val()
		lease, _ := v[0].(string)
		pttl := rd.pttl.Val()
		if lease == "" || pttl <= 0 {
			continue // not held, or expiring at this instant
		}
		str := func(x any) string { s, _ := x.(string); return s }
		tok, _ := strconv.ParseInt(str(v[1]), 10, 64)
		ttl, _ := strconv.ParseInt(str(v[3]), 10, 64)
		out[i] = lockcore.NodeLock{Found: true, Lease: lease, Token: tok, Owner: str(v[2]),
			TTL: time.Duration(ttl) * time.Millisecond, Remaining: pttl}
	}
	return out, nil
}

// ForceRelease implements lockcore.ForceReleaser with force.lua.
func (n *Node) ForceRelease(ctx context.Context, resource string) (lockcore.NodeReply, error) {
	v, err := n.run(ctx, forceScript, []string{lockKey(resource)}, 2)
	if err != nil {
		return lockcore.NodeReply{}, err
	}
	if v[0] == 1 {
		return lockcore.NodeReply{Status: lockcore.StatusOK, Token: v[1]}, nil
	}
	return lockcore.NodeReply{Status: lockcore.StatusAbsent}, nil
}
