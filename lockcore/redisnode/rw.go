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

// Readers-writer locks (lockcore.RWNode): one hash per lock,
// lockgate:{name}:rw, in the slot of the name's counter, each operation one
// script (rw*.lua, after guard.lua and rwlib.lua, which describes the
// hash). ScanLocks lists every hold as a lock named
// lockcore.RWHoldResource, InspectLocks reads such names with readrw.lua,
// and AdoptLocks takes them in with adoptrw.lua, so a recovery restores
// the holds (rule R6 of lockcore's doc). A ClusterNode does the same on
// the shard of each name's slot (the hash and the counter share it).

var (
	_ lockcore.RWNode = (*Node)(nil)

	//go:embed rwlib.lua
	rwLib string
	//go:embed rwacquire.lua
	rwAcquireLua string
	//go:embed rwextend.lua
	rwExtendLua string
	//go:embed rwrelease.lua
	rwReleaseLua string
	//go:embed rwraise.lua
	rwRaiseLua string
	//go:embed rwinspect.lua
	rwInspectLua string
	//go:embed readrw.lua
	readRWLua    string
	readRWScript = redis.NewScript(readRWLua)
	//go:embed adoptrw.lua
	adoptRWLua    string
	adoptRWScript = redis.NewScript(rwLib + adoptRWLua)
)

// rwScripts are a Node's readers-writer lock scripts (bound as its other
// lock scripts are, see bound.go).
type rwScripts struct {
	acquire, extend, release, raise, inspect *redis.Script
}

func rwKey(name string) string { return "lockgate:{" + name + "}:rw" }

// rwKeys are KEYS for scripts that take a readers-writer lock and its
// slot's counter.
func rwKeys(name string) []string { return []string{rwKey(name), tokensKey(name)} }

func rwField(exclusive bool, lease string) string {
	if exclusive {
		return "w" + lease
	}
	return "r" + lease
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// scriptRunner runs a guarded lock script on the node (Node and
// ClusterNode): run for replies of integers, eval for any reply.
type scriptRunner interface {
	run(ctx context.Context, s *redis.Script, keys []string, want int, args ...any) ([]int64, error)
	eval(ctx context.Context, s *redis.Script, keys []string, args ...any) (any, error)
}

// RWAcquire implements lockcore.RWNode with rwacquire.lua.
func (n *Node) RWAcquire(ctx context.Context, req lockcore.NodeRWAcquire) (lockcore.NodeReply, error) {
	return rwAcquire(ctx, n, n.sc.rw, req)
}

// RWExtend implements lockcore.RWNode with rwextend.lua.
func (n *Node) RWExtend(ctx context.Context, name, lease string, ttl time.Duration) (lockcore.NodeReply, error) {
	return rwExtend(ctx, n, n.sc.rw, name, lease, ttl)
}

// RWRelease implements lockcore.RWNode with rwrelease.lua.
func (n *Node) RWRelease(ctx context.Context, name, lease string) (lockcore.NodeReply, error) {
	return rwRelease(ctx, n, n.sc.rw, name, lease)
}

// RWRaise implements lockcore.RWNode with rwraise.lua.
func (n *Node) RWRaise(ctx context.Context, name, lease string, token int64) error {
	return rwRaise(ctx, n, n.sc.rw, name, lease, token)
}

// RWInspect implements lockcore.RWNode with rwinspect.lua.
func (n *Node) RWInspect(ctx context.Context, name string) (lockcore.NodeRW, error) {
	return rwInspect(ctx, n, n.sc.rw, name)
}

func rwAcquire(ctx context.Context, n scriptRunner, sc rwScripts, req lockcore.NodeRWAcquire) (lockcore.NodeReply, error) {
	v, err := n.run(ctx, sc.acquire, rwKeys(req.Name), 2,
		req.Lease, ms(req.TTL), req.Owner, flag(req.Exclusive), flag(req.Waits), ms(req.Mark))
	if err != nil {
		return lockcore.NodeReply{}, err
	}
	switch v[0] {
	case 1:
		return lockcore.NodeReply{Status: lockcore.StatusGranted, Token: v[1]}, nil
	case 2:
		return lockcore.NodeReply{Status: lockcore.StatusReentered, Token: v[1]}, nil
	case -2:
		return lockcore.NodeReply{Status: lockcore.StatusMismatch, Token: v[1]}, nil
	default:
		return lockcore.NodeReply{Status: lockcore.StatusTaken, PTTL: time.Duration(v[1]) * time.Millisecond}, nil
	}
}

func rwExtend(ctx context.Context, n scriptRunner, sc rwScripts, name, lease string, ttl time.Duration) (lockcore.NodeReply, error) {
	v, err := n.run(ctx, sc.extend, rwKeys(name), 2, lease, ms(ttl))
	if err != nil {
		return lockcore.NodeReply{}, err
	}
	switch v[0] {
	case 1:
		if len(v) < 3 {
			return lockcore.NodeReply{}, fmt.Errorf("redisnode: rwextend replied %d values, want 3", len(v))
		}
		return lockcore.NodeReply{Status: lockcore.StatusOK, Token: v[1], TTL: time.Duration(v[2]) * time.Millisecond}, nil
	case -1:
		return lockcore.NodeReply{Status: lockcore.StatusAbsent}, nil
	default:
		return lockcore.NodeReply{Status: lockcore.StatusTaken, PTTL: time.Duration(v[1]) * time.Millisecond}, nil
	}
}

func rwRelease(ctx context.Context, n scriptRunner, sc rwScripts, name, lease string) (lockcore.NodeReply, error) {
	v, err := n.run(ctx, sc.release, rwKeys(name), 2, lease)
	if err != nil {
		return lockcore.NodeReply{}, err
	}
	if v[0] == 1 {
		return lockcore.NodeReply{Status: lockcore.StatusOK, Token: v[1]}, nil
	}
	return lockcore.NodeReply{Status: lockcore.StatusAbsent}, nil
}

func rwRaise(ctx context.Context, n scriptRunner, sc rwScripts, name, lease string, token int64) error {
	_, err := n.run(ctx, sc.raise, rwKeys(name), 2, strconv.FormatInt(token, 10), lease)
	return err
}

func rwInspect(ctx context.Context, n scriptRunner, sc rwScripts, name string) (lockcore.NodeRW, error) {
	res, err := n.eval(ctx, sc.inspect, rwKeys(name))
	if err != nil {
		return lockcore.NodeRW{}, err
	}
	arr, ok := res.([]any)
	switch {
	case !ok || len(arr) == 0:
		return lockcore.NodeRW{}, fmt.Errorf("redisnode: rwinspect replied %T", res)
	case arr[0] == int64(outReply):
		return lockcore.NodeRW{}, lockcore.ErrQuarantined
	case (len(arr)-1)%6 != 0:
		return lockcore.NodeRW{}, fmt.Errorf("redisnode: rwinspect replied %d values, want 1 + 6 per hold", len(arr))
	}
	v := lockcore.NodeRW{Waiting: arr[0] == int64(1)}
	for f := range slices.Chunk(arr[1:], 6) {
		lease, _ := f[1].(string)
		tok, _ := f[2].(int64)
		owner, _ := f[3].(string)
		ttl, _ := f[4].(int64)
		rem, _ := f[5].(int64)
		v.Holds = append(v.Holds, lockcore.NodeRWHold{Exclusive: f[0] == int64(1), NodeLock: lockcore.NodeLock{Found: true,
			Lease: lease, Token: tok, Owner: owner, TTL: time.Duration(ttl) * time.Millisecond, Remaining: time.Duration(rem) * time.Millisecond}})
	}
	return v, nil
}

// rwHoldNames returns the RWHoldResource names of the holds in the rw
// hashes keys on the server of rdb (expired ones included: InspectLocks
// finds them not held), keeping those whose lock name starts with prefix.
func rwHoldNames(ctx context.Context, rdb *redis.Client, keys []string, prefix string) ([]string, error) {
	return rwHoldNamesThen(ctx, rdb, keys, prefix, nil)
}

// rwHoldNamesThen is rwHoldNames followed, in the same pipeline, by what
// after queues (when not nil), whose returned check fails the read when
// it fails (see Node.readLocks).
func rwHoldNamesThen(ctx context.Context, rdb *redis.Client, keys []string, prefix string, after func(redis.Pipeliner) func() error) ([]string, error) {
	pipe := rdb.Pipeline()
	var names []string
	var cmds []*redis.StringSliceCmd
	for _, k := range keys {
		name, ok := strings.CutPrefix(k, "lockgate:{")
		if name, ok2 := strings.CutSuffix(name, "}:rw"); ok && ok2 && strings.HasPrefix(name, prefix) {
			names = append(names, name)
			cmds = append(cmds, pipe.HKeys(ctx, k))
		}
	}
	if len(cmds) == 0 {
		return nil, nil
	}
	check := func() error { return nil }
	if after != nil {
		check = after(pipe)
	}
	_, err := pipe.Exec(ctx)
	if cerr := check(); cerr != nil {
		return nil, timedOut(ctx, cerr)
	}
	for _, c := range cmds {
		if cerr := c.Err(); cerr != nil {
			return nil, timedOut(ctx, cerr)
		}
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, timedOut(ctx, err)
	}
	var out []string
	for i, c := range cmds {
		for _, f := range c.Val() {
			if len(f) > 1 && (f[0] == 'r' || f[0] == 'w') {
				out = append(out, lockcore.RWHoldResource(names[i], f[0] == 'w', f[1:]))
			}
		}
	}
	return out, nil
}

// queueHoldReads queues on pipe the reads of RWHoldResource names with
// readrw.lua (loaded before), inspectBatch a call.
func queueHoldReads(ctx context.Context, pipe redis.Pipeliner, holds []string) []*redis.Cmd {
	var cmds []*redis.Cmd
	for batch := range slices.Chunk(holds, inspectBatch) {
		keys, fields := make([]string, len(batch)), make([]any, len(batch))
		for i, h := range batch {
			name, excl, lease, _ := lockcore.ParseRWHold(h)
			keys[i], fields[i] = rwKey(name), rwField(excl, lease)
		}
		cmds = append(cmds, pipe.EvalSha(ctx, readRWScript.Hash(), keys, fields...))
	}
	return cmds
}

// holdReplies maps the replies of queueHoldReads's calls: one NodeLock per
// hold read, Found false where it is not live.
func holdReplies(cmds []*redis.Cmd, want int) ([]lockcore.NodeLock, error) {
	out := make([]lockcore.NodeLock, 0, want)
	for _, c := range cmds {
		v, _ := c.Val().([]any)
		for f := range slices.Chunk(v, 5) {
			if len(f) != 5 {
				return nil, fmt.Errorf("redisnode: readrw replied %d values, want 5 per hold", len(v))
			}
			out = append(out, holdLock(f))
		}
	}
	if len(out) != want {
		return nil, fmt.Errorf("redisnode: readrw read %d holds of %d", len(out), want)
	}
	return out, nil
}

// holdLock maps readrw.lua's five values for one hold.
func holdLock(f []any) lockcore.NodeLock {
	lease, _ := f[0].(string)
	tok, _ := f[1].(int64)
	owner, _ := f[2].(string)
	ttl, _ := f[3].(int64)
	pttl, _ := f[4].(int64)
	if lease == "" || pttl <= 0 {
		return lockcore.NodeLock{} // not held, or expiring at this instant
	}
	return lockcore.NodeLock{Found: true, Lease: lease, Token: tok, Owner: owner,
		TTL: time.Duration(ttl) * time.Millisecond, Remaining: time.Duration(pttl) * time.Millisecond}
}

// adoptHolds takes in readers-writer holds (RWHoldResource locks) with
// adoptrw.lua, adoptBatch a call, while the node's epoch is epoch.
func (n *Node) adoptHolds(ctx context.Context, holds []lockcore.HeldLock, epoch string) error {
	if err := adoptRWScript.Load(ctx, n.rdb).Err(); err != nil {
		return timedOut(ctx, err)
	}
	pipe := n.rdb.Pipeline()
	var cmds []*redis.Cmd
	for batch := range slices.Chunk(holds, adoptBatch) {
		keys := make([]string, 0, 1+len(batch))
		args := make([]any, 0, 1+5*len(batch))
		keys, args = append(keys, metaKey), append(args, epoch)
		for _, h := range batch {
			name, excl, lease, _ := lockcore.ParseRWHold(h.Resource)
			keys = append(keys, rwKey(name))
			args = append(args, rwField(excl, lease), strconv.FormatInt(h.Token, 10), h.Owner, ms(h.TTL), ms(max(h.Remaining, time.Millisecond)))
		}
		cmds = append(cmds, pipe.EvalSha(ctx, adoptRWScript.Hash(), keys, args...))
	}
	if err := execAll(ctx, pipe); err != nil {
		return timedOut(ctx, err)
	}
	for _, c := range cmds {
		if v, _ := c.Int64(); v != 1 {
			return lockcore.ErrNodeChanged
		}
	}
	return nil
}

// splitHolds separates RWHoldResource names from other lock names,
// returning the position of each in resources.
func splitHolds(resources []string) (locks, holds []string, lockAt, holdAt []int) {
	for i, r := range resources {
		if _, _, _, ok := lockcore.ParseRWHold(r); ok {
			holds, holdAt = append(holds, r), append(holdAt, i)
		} else {
			locks, lockAt = append(locks, r), append(lockAt, i)
		}
	}
	return locks, holds, lockAt, holdAt
}

// holdNames are, among keys that SCAN found, the lock names of the lock
// keys and the RWHoldResource names of the holds in the rw keys, on the
// server of rdb, for names that start with prefix.
func holdNames(ctx context.Context, rdb *redis.Client, keys []string, prefix string) ([]string, error) {
	holds, err := rwHoldNames(ctx, rdb, rwKeysOf(keys), prefix)
	if err != nil {
		return nil, err
	}
	return append(lockNames(keys, prefix), holds...), nil
}

// rwKeysOf are the readers-writer lock keys among keys.
func rwKeysOf(keys []string) []string {
	var rws []string
	for _, k := range keys {
		if strings.HasSuffix(k, "}:rw") {
			rws = append(rws, k)
		}
	}
	return rws
}

// clusterRW are the readers-writer scripts of every ClusterNode (a
// ClusterNode's lock scripts are not its own, see cluster.go).
var clusterRW = rwScripts{
	acquire: guarded(rwLib + rwAcquireLua), extend: guarded(rwLib + rwExtendLua), release: guarded(rwLib + rwReleaseLua),
	raise: guarded(rwLib + rwRaiseLua), inspect: guarded(rwLib + rwInspectLua),
}

var _ lockcore.RWNode = (*ClusterNode)(nil)

// RWAcquire implements lockcore.RWNode with rwacquire.lua on the shard of
// the name's slot, which holds both its keys.
func (c *ClusterNode) RWAcquire(ctx context.Context, req lockcore.NodeRWAcquire) (lockcore.NodeReply, error) {
	return rwAcquire(ctx, c, clusterRW, req)
}

// RWExtend implements lockcore.RWNode with rwextend.lua.
func (c *ClusterNode) RWExtend(ctx context.Context, name, lease string, ttl time.Duration) (lockcore.NodeReply, error) {
	return rwExtend(ctx, c, clusterRW, name, lease, ttl)
}

// RWRelease implements lockcore.RWNode with rwrelease.lua.
func (c *ClusterNode) RWRelease(ctx context.Context, name, lease string) (lockcore.NodeReply, error) {
	return rwRelease(ctx, c, clusterRW, name, lease)
}

// RWRaise implements lockcore.RWNode with rwraise.lua.
func (c *ClusterNode) RWRaise(ctx context.Context, name, lease string, token int64) error {
	return rwRaise(ctx, c, clusterRW, name, lease, token)
}

// RWInspect implements lockcore.RWNode with rwinspect.lua.
func (c *ClusterNode) RWInspect(ctx context.Context, name string) (lockcore.NodeRW, error) {
	return rwInspect(ctx, c, clusterRW, name)
}

// inspectHolds is InspectLocks of RWHoldResource names for a Cluster:
// readrw.lua per hold (its key alone, in one slot), in one Cluster
// pipeline. It only reads.
func (c *ClusterNode) inspectHolds(ctx context.Context, holds []string) ([]lockcore.NodeLock, error) {
	if err := c.loadScript(ctx, readRWLua); err != nil {
		return nil, err
	}
	pipe := c.cc.Pipeline()
	cmds := make([]*redis.Cmd, len(holds))
	for i, h := range holds {
		name, excl, lease, _ := lockcore.ParseRWHold(h)
		cmds[i] = pipe.EvalSha(ctx, readRWScript.Hash(), []string{rwKey(name)}, rwField(excl, lease))
	}
	if err := execAll(ctx, pipe); err != nil {
		return nil, timedOut(ctx, err)
	}
	out := make([]lockcore.NodeLock, len(holds))
	for i, cmd := range cmds {
		v, _ := cmd.Val().([]any)
		if len(v) != 5 {
			return nil, fmt.Errorf("redisnode: readrw replied %d values, want 5", len(v))
		}
		out[i] = holdLock(v)
	}
	return out, nil
}

// adoptHolds is AdoptLocks of readers-writer holds for a Cluster:
// adoptrw.lua per hold, whose epoch check reads the hold's slot counter
// hash (the slot's epoch, see Quarantine), in one Cluster pipeline.
func (c *ClusterNode) adoptHolds(ctx context.Context, holds []lockcore.HeldLock, epoch string) error {
	if err := c.loadScript(ctx, rwLib+adoptRWLua); err != nil {
		return err
	}
	pipe := c.cc.Pipeline()
	cmds := make([]*redis.Cmd, len(holds))
	for i, h := range holds {
		name, excl, lease, _ := lockcore.ParseRWHold(h.Resource)
		cmds[i] = pipe.EvalSha(ctx, adoptRWScript.Hash(), []string{tokensKey(name), rwKey(name)}, epoch,
			rwField(excl, lease), strconv.FormatInt(h.Token, 10), h.Owner, ms(h.TTL), ms(max(h.Remaining, time.Millisecond)))
	}
	if err := execAll(ctx, pipe); err != nil {
		return timedOut(ctx, err)
	}
	for _, cmd := range cmds {
		if v, _ := cmd.Int64(); v != 1 {
			return lockcore.ErrNodeChanged
		}
	}
	return nil
}

// splitHeld separates readers-writer holds (RWHoldResource names) from
// other locks.
func splitHeld(locks []lockcore.HeldLock) (plain, holds []lockcore.HeldLock) {
	for _, l := range locks {
		if _, _, _, ok := lockcore.ParseRWHold(l.Resource); ok {
			holds = append(holds, l)
		} else {
			plain = append(plain, l)
		}
	}
	return plain, holds
}
