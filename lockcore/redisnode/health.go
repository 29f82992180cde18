package redisnode

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/lockcore"
)

// Check implements lockcore.Node with check.lua and INFO server, in one
// round trip. The node is found Lost when:
//   - it was seen initialized and no longer is (it restarted empty, or was
//     flushed);
//   - its heartbeat is not above the last one this Node saw (it went back
//     to an older copy of its data);
//   - it is a new server process (run id) that does not sync every write
//     to disk before answering (appendonly yes, appendfsync always, read
//     with CONFIG GET; a server that refuses CONFIG counts as not syncing):
//     a restart could have lost the last writes it acknowledged. A restart
//     with every write synced loses nothing and is not a loss;
//   - its quarantine began but not every slot was marked yet.
//
// A node that refuses the heartbeat's write, or whose memory is within
// memoryReserve of its maxmemory, answers with Refusing set and no error.
// Checks of one Node run one at a time.
func (n *Node) Check(ctx context.Context) (lockcore.NodeHealth, error) {
	n.checkMu.Lock()
	defer n.checkMu.Unlock()
	v, epoch, info, refusing, err := n.probe(ctx)
	switch {
	case err != nil:
		return lockcore.NodeHealth{}, err
	case refusing != "":
		return lockcore.NodeHealth{Initialized: true, Refusing: refusing}, nil
	}
	id := runID(info)
	n.mu.Lock()
	restarted := n.runID != "" && id != n.runID
	n.mu.Unlock()
	durable := !restarted || n.durable(ctx)
	h := n.record(v, id, durable)
	h.Epoch = epoch
	return h, nil
}

// probe runs check.lua and INFO server and memory in one round trip, and
// returns check.lua's reply (its integers, and the epoch), INFO's, or why
// the node refuses writes.
func (n *Node) probe(ctx context.Context) (v []int64, epoch, info, refusing string, err error) {
	pipe := n.rdb.Pipeline()
	chk := pipe.Eval(ctx, checkLua, []string{metaKey})
	inf := pipe.Info(ctx, "server", "memory")
	_, _ = pipe.Exec(ctx)
	if err := inf.Err(); err != nil {
		return nil, "", "", "", timedOut(ctx, err)
	}
	res, err := chk.Result()
	reason := refusalReason(err)
	// Hysteresis: a node found full counts as full until its memory is
	// well below the limit, or it would flap between refusing and serving
	// while locks and client buffers come and go at the limit.
	reserve := int64(memoryReserve)
	if n.wasFull.Load() {
		reserve = 4 * memoryReserve
	}
	isFull := full(inf.Val(), reserve)
	n.wasFull.Store(isFull || reason != "")
	if reason != "" {
		return nil, "", "", reason, nil
	}
	if isFull {
		return nil, "", "", "out of memory", nil
	}
	if err != nil {
		return nil, "", "", "", err
	}
	arr, ok := res.([]any)
	if !ok || len(arr) != 7 {
		return nil, "", "", "", fmt.Errorf("redisnode: check.lua replied %v, want 7 values", res)
	}
	epoch, _ = arr[6].(string) // the last value, the only string
	v, err = ints(arr[:6], 6)
	if err != nil {
		return nil, "", "", "", err
	}
	return v, epoch, inf.Val(), "", nil
}

// record judges check.lua's reply v from the server process id, whose
// writes are durable or not (see Check), and remembers what it saw for the
// next Check.
func (n *Node) record(v []int64, id string, durable bool) lockcore.NodeHealth {
	h := lockcore.NodeHealth{Initialized: v[0] == 1}
	if !h.Initialized && v[5] >= 0 {
		h.Initializing, h.InitializingFor = true, time.Duration(v[4]-v[5])*time.Millisecond
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if h.Initialized {
		h.Quarantined = v[2] >= 0
		if h.Quarantined {
			h.QuarantinedFor = time.Duration(v[4]-v[2]) * time.Millisecond
		}
		h.Lost = (h.Quarantined && v[3] == 0) || (n.seenInit && v[1] <= n.lastBeat) || !durable
	} else {
		h.Lost = n.seenInit
	}
	if n.protect != "1" {
		h = lockcore.NodeHealth{Initialized: true}
	}
	n.seenInit = n.seenInit || h.Initialized
	n.lastBeat, n.runID = v[1], id
	n.trusted.Store(n.protect != "1" || (h.Initialized && !h.Lost && !h.Quarantined))
	return h
}

// memoryReserve is how close to maxmemory a node may come before it counts
// as full: with noeviction, Redis refuses every write that would grow memory
// once used_memory is above maxmemory, which a few more locks reach.
const memoryReserve = 64 << 10

// full reports whether an INFO memory reply shows the node within reserve
// bytes of its maxmemory (0: no limit).
func full(info string, reserve int64) bool {
	used, max := infoInt(info, "used_memory"), infoInt(info, "maxmemory")
	return max > 0 && used+reserve >= max
}

// infoInt reads an integer field of an INFO reply, or -1.
func infoInt(info, field string) int64 {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				return n
			}
		}
	}
	return -1
}

// durable reports whether the server syncs every write to disk before it
// answers (CONFIG GET appendonly and appendfsync).
func (n *Node) durable(ctx context.Context) bool {
	cfg, err := n.rdb.ConfigGet(ctx, "append*").Result()
	return err == nil && cfg["appendonly"] == "yes" && cfg["appendfsync"] == "always"
}

// refusalReason says why a node refused a write, from its error reply, or
// "" when err is not such a refusal.
func refusalReason(err error) string {
	var re redis.Error
	if !errors.As(err, &re) {
		return ""
	}
	msg := re.Error()
	switch {
	case strings.HasPrefix(msg, "OOM"):
		return "out of memory"
	case strings.HasPrefix(msg, "MISCONF"):
		return "persistence failing (MISCONF)"
	case strings.HasPrefix(msg, "READONLY"):
		return "read-only replica"
	}
	return ""
}

// Quarantine implements lockcore.Node: it records the quarantine's start on
// the node with a new epoch (quarantine.lua), marks every slot's counter
// hash (q, mark.lua), then records that every slot is marked (qdone.lua).
// The marks and the record are made only while the epoch is still this
// quarantine's: a later quarantine makes its own, and a mark sent late
// must not land on a node repaired since. Every guarded script
// refuses a marked slot, whichever gateway sends it.
func (n *Node) Quarantine(ctx context.Context) error {
	n.trusted.Store(false)
	epoch := lockcore.NewLeaseID() // random: see quarantine.lua
	if err := quarantineScript.Run(ctx, n.rdb, []string{metaKey}, epoch).Err(); err != nil {
		return err
	}
	if err := markScript.Load(ctx, n.rdb).Err(); err != nil {
		return err
	}
	pipe := n.rdb.Pipeline()
	for _, k := range slotKeys {
		pipe.EvalSha(ctx, markScript.Hash(), []string{k, metaKey}, epoch)
	}
	if err := execAll(ctx, pipe); err != nil {
		return err
	}
	return qdoneScript.Run(ctx, n.rdb, []string{metaKey}, epoch).Err()
}

// MarkInitializing implements lockcore.Node with boot.lua.
func (n *Node) MarkInitializing(ctx context.Context) (string, error) {
	epoch, err := bootScript.Run(ctx, n.rdb, []string{metaKey}, lockcore.NewLeaseID()).Text()
	return epoch, timedOut(ctx, err)
}

// Counters implements lockcore.Node: one pipelined HMGET per slot. A slot
// without its counter or marked quarantined fails the whole read with
// lockcore.ErrQuarantined: such a node must not be a source for a repair.
func (n *Node) Counters(ctx context.Context) ([]int64, error) {
	if !n.trusted.Load() {
		return nil, lockcore.ErrQuarantined
	}
	pipe := n.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(slotKeys))
	for i, k := range slotKeys {
		cmds[i] = pipe.HMGet(ctx, k, "n", "q")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, timedOut(ctx, err)
	}
	out := make([]int64, len(cmds))
	for i, c := range cmds {
		v := c.Val()
		if len(v) != 2 || v[1] != nil {
			return nil, lockcore.ErrQuarantined // quarantined while being read
		}
		s, ok := v[0].(string)
		if !ok {
			return nil, lockcore.ErrQuarantined // the slot is gone: the node lost its data
		}
		var err error
		if out[i], err = strconv.ParseInt(s, 10, 64); err != nil {
			return nil, fmt.Errorf("redisnode: counter of slot %d is %q: %w", i, s, err)
		}
	}
	if !n.trusted.Load() {
		return nil, lockcore.ErrQuarantined
	}
	return out, nil
}

// ErrQuarantining is what Repair fails with when a quarantine of the node
// has begun but not every slot is marked yet: the repair would race it.
// The guard quarantines such a node again (see Check), then repairs it.
var ErrQuarantining = errors.New("redisnode: a quarantine of the node is under way")

// repairEpoch checks, before a repair writes anything, that the node's
// epoch is still epoch (else lockcore.ErrNodeChanged) and that no
// quarantine is marking the slots (else ErrQuarantining).
func (n *Node) repairEpoch(ctx context.Context, epoch string) error {
	v, err := n.rdb.HMGet(ctx, metaKey, "qsince", "qdone", "qepoch").Result()
	if err != nil {
		return timedOut(ctx, err)
	}
	if s, _ := v[2].(string); epoch == "" || s != epoch {
		return lockcore.ErrNodeChanged
	}
	if v[0] != nil && v[1] == nil {
		return ErrQuarantining
	}
	return nil
}

// Repair implements lockcore.Node: repair.lua on every slot (pipelined),
// then serve.lua: the node is initialized and out of quarantine. Each step
// acts only while the node's epoch is the one given: a quarantine that
// began meanwhile, a new mark or a loss of the node's data makes every
// later step change nothing, and Repair fail with lockcore.ErrNodeChanged.
// A repair that begins while a quarantine is still marking the slots fails
// with ErrQuarantining. So two gateways, one repairing the node and one
// quarantining it, leave it either in service with no slot marked, or
// quarantined with every slot marked (the quarantine's marks come after
// its epoch, and a repair's writes stop once they find it). The floor also
// takes in the per-resource counters of an earlier lockgate, if any are on
// the node (see legacyCounters); they are deleted once the slots hold
// them.
func (n *Node) Repair(ctx context.Context, floor []int64, epoch string) error {
	if len(floor) != lockcore.FenceSlots {
		return fmt.Errorf("redisnode: repair needs %d counters, got %d", lockcore.FenceSlots, len(floor))
	}
	floor = slices.Clone(floor)
	if err := n.repairEpoch(ctx, epoch); err != nil {
		return err
	}
	legacy, err := n.legacyCounters(ctx, floor)
	if err != nil {
		return err
	}
	if err := repairScript.Load(ctx, n.rdb).Err(); err != nil {
		return err
	}
	pipe := n.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(slotKeys))
	for i, k := range slotKeys {
		cmds[i] = pipe.EvalSha(ctx, repairScript.Hash(), []string{k, metaKey}, strconv.FormatInt(floor[i], 10), epoch)
	}
	if err := execAll(ctx, pipe); err != nil {
		return err
	}
	for _, c := range cmds {
		if v, _ := c.Int64(); v != 1 {
			return lockcore.ErrNodeChanged
		}
	}
	switch served, err := serveScript.Run(ctx, n.rdb, []string{metaKey}, epoch).Int64(); {
	case err != nil:
		return err
	case served != 1:
		return lockcore.ErrNodeChanged
	}
	if len(legacy) > 0 { // folded into the slots above: no longer needed
		pipe := n.rdb.Pipeline()
		for _, k := range legacy {
			pipe.Unlink(ctx, k)
		}
		if err := execAll(ctx, pipe); err != nil {
			return err
		}
	}
	n.mu.Lock()
	n.seenInit = true
	n.mu.Unlock()
	n.trusted.Store(true)
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
		pipe := n.rdb.Pipeline()
		gets := make([]*redis.StringCmd, len(batch))
		for i, k := range batch {
			gets[i] = pipe.Get(ctx, k)
		}
		if len(batch) > 0 {
			if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
				return nil, err
			}
		}
		for i, k := range batch {
			v, err := gets[i].Int64()
			if err != nil {
				continue // gone meanwhile, or not a counter
			}
			resource := strings.TrimSuffix(strings.TrimPrefix(k, "lockgate:{"), "}:fence")
			slot := lockcore.FenceSlot(resource)
			floor[slot] = max(floor[slot], v)
			keys = append(keys, k)
		}
		if cursor = next; cursor == 0 {
			return keys, nil
		}
	}
}

// execAll runs a pipeline and returns its first error.
func execAll(ctx context.Context, pipe redis.Pipeliner) error {
	cmds, err := pipe.Exec(ctx)
	if err != nil {
		return err
	}
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			return err
		}
	}
	return nil
}
