package redisnode

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
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
	//go:embed readlocks.lua
	readLocksLua    string
	readLocksScript = redis.NewScript(readLocksLua)
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

// scanPattern is the SCAN MATCH pattern of the lock keys and the
// readers-writer lock keys (lockgate:{name}:rw) of names that start with
// prefix; ScanLocks keeps only keys that end in :lock or :rw.
func scanPattern(prefix string) string {
	return strings.TrimSuffix(lockPattern(prefix), "lock") + "[lr][ow]*"
}

// ScanLocks implements lockcore.Lister with one SCAN step (MATCH on the lock
// keys of the prefix, COUNT count): never KEYS, so a step holds the server
// for about count keys, whatever the size of the keyspace. The cursor is
// SCAN's own, in decimal. A readers-writer lock's key found by the step
// is listed as its holds, each named lockcore.RWHoldResource (rule R6 of
// lockcore's doc): a recovery reads and adopts them as locks.
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
	keys, next, err := n.rdb.Scan(ctx, cur, scanPattern(prefix), int64(max(count, 1))).Result()
	if err != nil {
		return nil, "", err
	}
	names, next2 := scanned(keys, next, prefix)
	holds, err := rwHoldNames(ctx, n.rdb, rwKeysOf(keys), prefix)
	if err != nil {
		return nil, "", timedOut(ctx, err)
	}
	if !n.trusted.Load() {
		return nil, "", n.outError()
	}
	return append(names, holds...), next2, nil
}

// scanned turns a SCAN step's keys and cursor into the lock names under
// prefix and lockcore.Lister's cursor ("" once the walk is over). The
// readers-writer holds of the step's rw keys are named apart (rwHoldNames:
// they need a read).
func scanned(keys []string, next uint64, prefix string) ([]string, string) {
	names := lockNames(keys, prefix)
	if next == 0 {
		return names, ""
	}
	return names, strconv.FormatUint(next, 10)
}

// inspectBatch is how many locks one readlocks.lua call reads: a call
// holds the server for well under a millisecond.
const inspectBatch = 500

// InspectLocks implements lockcore.Lister with readlocks.lua, inspectBatch
// locks a call, the calls pipelined: each lock is read in one atomic step,
// and a script's reply costs far less to send and parse than a command per
// field (a recovery reads every lock of a node this way).
func (n *Node) InspectLocks(ctx context.Context, resources []string) ([]lockcore.NodeLock, error) {
	if !n.trusted.Load() {
		return nil, n.outError()
	}
	if len(resources) == 0 {
		return nil, nil
	}
	out, err := n.readLocks(ctx, resources, nil)
	if err == nil && !n.trusted.Load() {
		return nil, n.outError()
	}
	return out, err
}

// readLocks reads resources' locks with readlocks.lua, pipelined, and the
// readers-writer holds among them (RWHoldResource names) with readrw.lua
// in the same pipeline; then, when after is not nil, in the same pipeline,
// what after queues, whose returned check fails the read when it fails.
func (n *Node) readLocks(ctx context.Context, resources []string, after func(redis.Pipeliner) func() error) ([]lockcore.NodeLock, error) {
	all := resources
	resources, holds, lockAt, holdAt := splitHolds(all)
	if len(holds) > 0 {
		if err := readRWScript.Load(ctx, n.rdb).Err(); err != nil {
			return nil, timedOut(ctx, err)
		}
	}
	if err := readLocksScript.Load(ctx, n.rdb).Err(); err != nil {
		return nil, timedOut(ctx, err)
	}
	pipe := n.rdb.Pipeline()
	var cmds []*redis.Cmd
	for batch := range slices.Chunk(resources, inspectBatch) {
		keys := make([]string, len(batch))
		for i, r := range batch {
			keys[i] = lockKey(r)
		}
		cmds = append(cmds, pipe.EvalSha(ctx, readLocksScript.Hash(), keys))
	}
	holdCmds := queueHoldReads(ctx, pipe, holds)
	check := func() error { return nil }
	if after != nil {
		check = after(pipe)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		if cerr := check(); cerr != nil {
			return nil, timedOut(ctx, cerr)
		}
		return nil, timedOut(ctx, err)
	}
	if err := check(); err != nil {
		return nil, timedOut(ctx, err)
	}
	for _, c := range append(slices.Clone(cmds), holdCmds...) {
		if err := c.Err(); err != nil {
			return nil, timedOut(ctx, err)
		}
	}
	out := make([]lockcore.NodeLock, 0, len(resources))
	for _, c := range cmds {
		v, _ := c.Val().([]any)
		for f := range slices.Chunk(v, 5) {
			if len(f) != 5 {
				return nil, fmt.Errorf("redisnode: readlocks replied %d values, want 5 per lock", len(v))
			}
			lease, _ := f[0].(string)
			tok, _ := f[1].(int64)
			owner, _ := f[2].(string)
			ttl, _ := f[3].(int64)
			pttl, _ := f[4].(int64)
			if lease == "" || pttl <= 0 {
				out = append(out, lockcore.NodeLock{}) // not held, or expiring at this instant
				continue
			}
			out = append(out, lockcore.NodeLock{Found: true, Lease: lease, Token: tok, Owner: owner,
				TTL: time.Duration(ttl) * time.Millisecond, Remaining: time.Duration(pttl) * time.Millisecond})
		}
	}
	if len(out) != len(resources) {
		return nil, fmt.Errorf("redisnode: readlocks read %d locks of %d", len(out), len(resources))
	}
	if len(holds) == 0 {
		return out, nil
	}
	views, err := holdReplies(holdCmds, len(holds))
	if err != nil {
		return nil, err
	}
	merged := make([]lockcore.NodeLock, len(all))
	for i, v := range out {
		merged[lockAt[i]] = v
	}
	for i, v := range views {
		merged[holdAt[i]] = v
	}
	return merged, nil
}

// BreakLock implements lockcore.ForceReleaser with force.lua.
func (n *Node) BreakLock(ctx context.Context, resource, lease string, ttl time.Duration) (broken, counter int64, err error) {
	v, err := n.run(ctx, n.sc.force, n.lockKeys(resource), 2, lease, strconv.FormatInt(ttl.Milliseconds(), 10))
	if err != nil {
		return 0, 0, err
	}
	return v[0], v[1], nil
}
