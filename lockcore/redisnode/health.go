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

// dataFormat is the version of the data a node holds for this gateway (the
// record's fields, the keys and what the scripts expect). serve.lua writes
// it; a node written by a newer gateway (a later format) refuses to serve
// this one, so that a gateway rolled back never mints tokens from keys it
// does not know. Raise it when a change makes an older gateway misread
// the node.
const dataFormat = 2

// Check implements lockcore.Node with check.lua and INFO server and
// memory, in one round trip. What it reports depends only on what the
// node holds and which server process answers, never on what this gateway
// saw before, so every gateway, however long it has run, judges a node
// alike (see judge).
//
// A node that refuses the check's write, whose memory is within
// memoryReserve of its maxmemory, whose maxmemory-policy may evict keys,
// or whose data format is newer than this gateway's, answers with
// Refusing set and no error; while it refuses, this Node fails every lock
// operation. An evicting node also loses its recovery record, so that once
// the policy is fixed it recovers before it serves again: it may have
// evicted locks. Checks of one Node run one at a time.
func (n *Node) Check(ctx context.Context) (lockcore.NodeHealth, error) {
	n.checkMu.Lock()
	defer n.checkMu.Unlock()
	conns := n.connsMade()
	v, info, set, refusing, err := n.probe(ctx)
	if err != nil {
		return lockcore.NodeHealth{}, err
	}
	if n.afterProbe != nil {
		n.afterProbe()
	}
	id, proc := processOf(info)
	n.observed(conns, id, proc)
	n.durable.Store(set.durable)
	if refusing == "" {
		var evicts bool
		refusing, evicts = settingsRefusal(set, v.format)
		if evicts {
			if err := n.rdb.HDel(ctx, metaKey, "rid").Err(); err != nil {
				return lockcore.NodeHealth{}, timedOut(ctx, err)
			}
		}
	}
	if refusing != "" {
		n.record(proc, false, refusing)
		return lockcore.NodeHealth{Initialized: true, Refusing: refusing}, nil
	}
	if err := n.upgradeFormat1(ctx, &v, id); err != nil {
		return lockcore.NodeHealth{}, err
	}
	h := n.noteInitialized(judge(v, id, proc))
	if n.hideWit.Load() {
		h.Witnessed = nil
	}
	if n.protect != "1" {
		h = lockcore.NodeHealth{Initialized: true, Epoch: v.epoch}
	}
	serving := h.Initialized && !h.Lost && !h.Quarantined
	if err := n.takeInRepl(ctx, serving, v, id, proc); err != nil {
		return lockcore.NodeHealth{}, err
	}
	if serving {
		bound, err := n.bind(ctx, proc) // the lock scripts go to this process alone
		if err != nil {
			return lockcore.NodeHealth{}, err
		}
		serving = bound
	}
	n.record(proc, serving, "")
	return h, nil
}

// takeInRepl records, on a node in service whose record names no
// replication history of its process (a gateway from before rrepl
// recovered it), the history the Check found (rrepl.lua), so that a
// failback from then on is a loss.
func (n *Node) takeInRepl(ctx context.Context, serving bool, v checkReply, id, proc string) error {
	if !serving || n.protect != "1" || replFor(v.rrepl, id) {
		return nil
	}
	return timedOut(ctx, rreplScript.Run(ctx, n.rdb, []string{metaKey}, id, proc).Err())
}

// demoted notes that a lock script found the node's process a replica
// (READONLY): it may be promoted again, with another replication history
// (a failback), under the connections already open, where no onConnect
// sees it. The node is untrusted until a Check whose probe was sent after
// this finds what the connections reach (see observed): the failback
// then, or the same history.
func (n *Node) demoted() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.trusted.Store(false)
	n.conns++
	id, _, _ := strings.Cut(n.connProc, "|")
	n.connProc = id + "|?" // a history no Check finds: observed replaces it
}

// connsMade is how many connections the pool has made, and demotions it
// has seen (see observed).
func (n *Node) connsMade() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.conns
}

// observed notes that a read over the pool, sent when the pool had made
// conns connections, found server process id with replication history
// proc. A failback changes the history under the connections already
// open, so no new connection shows it: when no connection was made since
// the read was sent, and the newest one found the same process, the
// connections now reach proc. A connection made since, or one that found
// another process, is left as it found things: record and served then
// trust the node only once a Check finds what that connection did.
func (n *Node) observed(conns uint64, id, proc string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conns == conns && id != "" && (n.connProc == "" || replFor(n.connProc, id)) {
		n.connProc = proc
	}
}

// nodeSettings are the settings of a node that decide whether it may
// serve: maxmemory-policy (from INFO), and enable-debug-command and
// repl-backlog-ttl (CONFIG GET; "" when CONFIG is not allowed, as on
// managed services, which refuse DEBUG and REPLICAOF to their users too);
// and whether it is durable (rule 8 of lockcore's doc): appendonly on
// (INFO aof_enabled) with appendfsync always (CONFIG GET), so that it
// acknowledges no write before it is on disk.
type nodeSettings struct {
	policy, debug, backlogTTL string
	durable                   bool
}

// settingsRefusal decides whether a node that accepts writes still refuses
// to serve because of its settings or data. It returns "" when the node
// may serve; it is a pure function of the settings and the record. The
// settings that let the data change under the same server process, which
// the record (it names the process) cannot see, refuse:
//   - a maxmemory-policy other than noeviction (evicts: the node's
//     recovery record must go too, so that once the policy is fixed it
//     recovers first);
//   - DEBUG commands allowed (enable-debug-command other than no): DEBUG
//     RELOAD loads an older snapshot into the same process;
//   - a replication backlog that is ever freed (repl-backlog-ttl other
//     than 0): a failback shows in the replication id only until the
//     promoted process frees its backlog (see processOf), after which a
//     node made a replica of an older copy of itself and promoted again
//     looks as it did.
//
// A data format newer than dataFormat refuses too.
func settingsRefusal(set nodeSettings, format int64) (refusing string, evicts bool) {
	switch {
	case set.policy != "noeviction":
		return fmt.Sprintf("evicts keys (maxmemory-policy %s; lockgate needs noeviction)", set.policy), true
	case set.debug != "" && set.debug != "no":
		return fmt.Sprintf("allows DEBUG RELOAD, which replaces its data unseen (enable-debug-command %s; lockgate needs no)", set.debug), false
	case set.backlogTTL != "" && set.backlogTTL != "0":
		return fmt.Sprintf("frees its replication backlog, after which a failback goes unseen (repl-backlog-ttl %s; lockgate needs 0: CONFIG SET repl-backlog-ttl 0)", set.backlogTTL), false
	case format > dataFormat:
		return fmt.Sprintf("data format %d is newer than this gateway's (%d): a newer lockgate wrote it", format, dataFormat), false
	}
	return "", false
}

// noteInitialized adds to h what this Node remembers: a node it saw
// initialized and now finds empty lost its data (judge alone cannot tell
// it from a new node; the guard can, from the other nodes, but this Node
// says so at once).
func (n *Node) noteInitialized(h lockcore.NodeHealth) lockcore.NodeHealth {
	n.mu.Lock()
	defer n.mu.Unlock()
	h.Lost = h.Lost || (!h.Initialized && n.seenInit)
	n.seenInit = n.seenInit || h.Initialized
	return h
}

// checkReply is check.lua's reply.
type checkReply struct {
	init, qdone             bool
	beat, qsince, now, boot int64 // qsince and boot: -1 when not set
	epoch, rid, qrid, brid  string
	rrepl                   string
	format                  int64
	// What a restart of a majority needs (rule 8; see check.lua).
	nid, dur string
	sat      int64
	wit      map[string]int64
}

// judge decides what a node's record v means when the server process id
// answers, with the replication history proc (see processOf; "" for a
// node that keeps none, a Cluster, whose id names both) (see the package
// doc of lockcore, "Nodes that lose their data"):
//   - not initialized: a new node, or one that restarted empty or was
//     flushed (the guard tells them apart); Initializing while a gateway's
//     mark is on it, made on this very process (a process that restarted
//     since it was marked kept the mark but not what followed it, and no
//     gateway is initializing it: it is lost);
//   - in service: its data was recovered (or initialized) for this very
//     process (rid = id) and no quarantine is under way;
//   - quarantined: a quarantine begun for this process has marked every
//     slot;
//   - lost otherwise: the process is not the one the data was recovered
//     for (a restart, a restore, a failover to a replica, another node's
//     data), or it is, with another replication history (it was a replica
//     since, and was promoted again: a failback), or a quarantine was
//     begun for another process or not every slot is marked yet.
//
// judge is a pure function: every gateway that reads the same record from
// the same process decides the same.
func judge(v checkReply, id, proc string) lockcore.NodeHealth {
	h := lockcore.NodeHealth{Initialized: v.init, Epoch: v.epoch, ID: v.nid, ServedAt: v.sat, Witnessed: v.wit, Durable: v.dur == "1"}
	if !v.init {
		judgeEmpty(&h, v, id, proc)
	} else {
		judgeInitialized(&h, v, id, proc)
	}
	return h
}

// judgeEmpty is judge for a node that is not initialized.
func judgeEmpty(h *lockcore.NodeHealth, v checkReply, id, proc string) {
	switch {
	case v.boot < 0: // not marked: a new node, or one that lost its data
	case !owns(v.brid, id, proc):
		h.Lost, h.Reason = true, "a new server process (run id "+id+") since it was marked for initialization, which it lost"
	default:
		h.Initializing, h.InitializingFor = true, time.Duration(v.now-v.boot)*time.Millisecond
	}
}

// judgeInitialized is judge for an initialized node.
func judgeInitialized(h *lockcore.NodeHealth, v checkReply, id, proc string) {
	switch {
	case v.qsince >= 0 && owns(v.qrid, id, proc):
		h.Quarantined, h.QuarantinedFor = true, time.Duration(v.now-v.qsince)*time.Millisecond
		if !v.qdone {
			h.Lost, h.Reason = true, "its quarantine began but not every slot is marked yet"
		}
	case v.qsince >= 0:
		h.Lost, h.Reason = true, "a new server process (run id "+id+") holds a quarantined copy of its data"
	case v.rid == "":
		h.Lost, h.Reason = true, "its data has no recovery record (an earlier lockgate wrote it, or it evicted keys)"
	case v.rid != id:
		h.Lost, h.Reason = true, "a new server process (run id "+id+") since its data was last recovered (a restart, a restore or a failover)"
	case isFailback(v.rrepl, id, proc):
		h.Lost, h.Reason = true, "the server process (run id "+id+") was a replica since its data was last recovered, and is a primary again (a failback): it may lack what another primary took"
	}
}

// record remembers the server process and replication history (proc) the
// last Check found, and whether its data may serve (trusted) or why it
// refuses. A verdict is about the process the Check probed: when the
// newest connection reaches another one (it was replaced while the Check
// ran, and lock traffic dialed the new process: see onConnect), the node
// stays untrusted until a Check probes that one, as served does for a
// repair.
func (n *Node) record(proc string, trusted bool, refusing string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.proc = proc
	n.refusing = refusing
	n.trusted.Store(n.protect != "1" || (trusted && n.connProc == proc && n.loadedIn == proc))
}

// probe runs check.lua, INFO server, memory and replication and the
// CONFIG GETs of nodeSettings in one round trip, and returns check.lua's
// reply, INFO's, the settings, or why the node refuses writes.
func (n *Node) probe(ctx context.Context) (v checkReply, info string, set nodeSettings, refusing string, err error) {
	pipe := n.rdb.Pipeline()
	chk := pipe.Eval(ctx, checkLua, []string{metaKey, witKey})
	inf := pipe.Info(ctx, "server", "memory", "replication", "persistence")
	cfg := configGets(ctx, pipe)
	_, _ = pipe.Exec(ctx)
	if err := inf.Err(); err != nil {
		return v, "", set, "", timedOut(ctx, err)
	}
	set = cfg(inf.Val())
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
	switch {
	case reason != "":
		return v, inf.Val(), set, reason, nil
	case isFull:
		return v, inf.Val(), set, "out of memory", nil
	case err != nil:
		return v, "", set, "", err
	}
	v, err = parseCheck(res)
	return v, inf.Val(), set, "", err
}

// parseCheck reads check.lua's reply.
func parseCheck(res any) (checkReply, error) {
	arr, ok := res.([]any)
	if !ok || len(arr) != 16 {
		return checkReply{}, fmt.Errorf("redisnode: check.lua replied %v, want 16 values", res)
	}
	nums, err := ints(append(arr[:6:6], arr[9]), 7)
	if err != nil {
		return checkReply{}, err
	}
	var v checkReply
	v.init, v.beat, v.qsince, v.qdone, v.now, v.boot, v.format = nums[0] == 1, nums[1], nums[2], nums[3] == 1, nums[4], nums[5], nums[6]
	v.epoch, _ = arr[6].(string)
	v.rid, _ = arr[7].(string)
	v.qrid, _ = arr[8].(string)
	v.brid, _ = arr[10].(string)
	v.rrepl, _ = arr[11].(string)
	v.nid, _ = arr[12].(string)
	v.sat, _ = arr[13].(int64)
	v.dur, _ = arr[14].(string)
	if flat, _ := arr[15].([]any); len(flat) > 0 {
		v.wit = make(map[string]int64, len(flat)/2)
		for k := 0; k+1 < len(flat); k += 2 {
			id, _ := flat[k].(string)
			at, _ := flat[k+1].(string)
			if x, err := strconv.ParseInt(at, 10, 64); err == nil && id != "" {
				v.wit[id] = x
			}
		}
	}
	return v, nil
}

// configGets queues, on pipe, the CONFIG GETs of nodeSettings (one per
// setting: Redis before 7 takes one parameter), and returns what reads
// the settings once pipe ran, given the INFO reply of the same round trip.
func configGets(ctx context.Context, pipe redis.Pipeliner) func(info string) nodeSettings {
	debug := pipe.ConfigGet(ctx, "enable-debug-command")
	ttl := pipe.ConfigGet(ctx, "repl-backlog-ttl")
	fsync := pipe.ConfigGet(ctx, "appendfsync")
	return func(info string) nodeSettings {
		return nodeSettings{policy: infoString(info, "maxmemory_policy"),
			debug: debug.Val()["enable-debug-command"], backlogTTL: ttl.Val()["repl-backlog-ttl"],
			durable: infoString(info, "aof_enabled") == "1" && fsync.Val()["appendfsync"] == "always"}
	}
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

// infoString reads a field of an INFO reply, or "".
func infoString(info, field string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
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
// the node with a new epoch, or takes the epoch of a quarantine of the same
// process still marking (quarantine.lua), marks every slot's counter
// hash (q, mark.lua), then records that every slot is marked (qdone.lua).
// The marks and the record are made only while the epoch is still this
// quarantine's: a later quarantine makes its own, and a mark sent late
// must not land on a node repaired since. Every guarded script
// refuses a marked slot, whichever gateway sends it.
func (n *Node) Quarantine(ctx context.Context) error {
	n.trusted.Store(false)
	epoch := lockcore.NewLeaseID() // random: see quarantine.lua
	// The quarantine is for the process that answers now; if another one
	// runs the script (a restart in between), its check finds the
	// quarantine not its own and it is quarantined again.
	info, err := n.rdb.Info(ctx, "server", "replication").Result()
	if err != nil {
		return timedOut(ctx, err)
	}
	_, proc := processOf(info)
	if epoch, err = quarantineScript.Run(ctx, n.rdb, []string{metaKey}, epoch, proc, "1").Text(); err != nil {
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

var _ lockcore.RecoveryClaimer = (*Node)(nil)

// ClaimRecovery implements lockcore.RecoveryClaimer with claim.lua, on the
// server's clock.
func (n *Node) ClaimRecovery(ctx context.Context, holder string, ttl time.Duration) (bool, error) {
	return claimRecovery(ctx, n.rdb, holder, ttl)
}

// DropRecoveryClaim implements lockcore.RecoveryClaimer with claim.lua.
func (n *Node) DropRecoveryClaim(ctx context.Context, holder string) error {
	return dropRecoveryClaim(ctx, n.rdb, holder)
}

// claimRecovery takes or renews holder's recovery claim through s
// (claim.lua) and reports whether holder holds it.
func claimRecovery(ctx context.Context, s redis.Scripter, holder string, ttl time.Duration) (bool, error) {
	v, err := claimScript.Run(ctx, s, []string{claimKey}, holder, ttl.Milliseconds(), "1").Int()
	if err != nil {
		return false, timedOut(ctx, err)
	}
	return v == 1, nil
}

// dropRecoveryClaim removes holder's recovery claim through s, if it is
// still holder's.
func dropRecoveryClaim(ctx context.Context, s redis.Scripter, holder string) error {
	return timedOut(ctx, claimScript.Run(ctx, s, []string{claimKey}, holder, 0, "0").Err())
}

// MarkInitializing implements lockcore.Node with boot.lua, naming the
// server process it marks.
func (n *Node) MarkInitializing(ctx context.Context) (string, error) {
	info, err := n.rdb.Info(ctx, "server", "replication").Result()
	if err != nil {
		return "", timedOut(ctx, err)
	}
	_, proc := processOf(info)
	epoch, err := bootScript.Run(ctx, n.rdb, []string{metaKey}, lockcore.NewLeaseID(), proc).Text()
	return epoch, timedOut(ctx, err)
}

// Counters implements lockcore.Node with counters.lua, a bound script
// (see bound.go), over batches of slots, pipelined: a process no Check of
// this Node judged answers NOSCRIPT and the read fails. A slot without
// its counter or marked quarantined fails the whole read with
// lockcore.ErrQuarantined: such a node must not be a source for a repair.
func (n *Node) Counters(ctx context.Context) ([]int64, error) {
	if !n.trusted.Load() {
		return nil, lockcore.ErrQuarantined
	}
	if n.protect != "1" { // unprotected (tests): no check bound the scripts
		if err := n.rdb.ScriptLoad(ctx, n.sc.countersSrc).Err(); err != nil {
			return nil, timedOut(ctx, err)
		}
	}
	const batch = 1024
	pipe := n.rdb.Pipeline()
	var cmds []*redis.Cmd
	for i := 0; i < len(slotKeys); i += batch {
		cmds = append(cmds, n.sc.counters.EvalSha(ctx, pipe, slotKeys[i:min(i+batch, len(slotKeys))]))
	}
	_, err := pipe.Exec(ctx)
	if n.protect == "1" && isNoScript(err) {
		n.unjudged()
		return nil, lockcore.ErrQuarantined
	}
	if err != nil {
		return nil, timedOut(ctx, err)
	}
	out := make([]int64, 0, len(slotKeys))
	for _, c := range cmds {
		vals, err := c.StringSlice()
		if err != nil {
			return nil, err
		}
		for _, v := range vals {
			if v == "" || v == "q" {
				return nil, lockcore.ErrQuarantined // the slot is gone (the node lost its data), or quarantined while being read
			}
			x, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("redisnode: counter of slot %d is %q: %w", len(out), v, err)
			}
			out = append(out, x)
		}
	}
	if !n.trusted.Load() {
		return nil, lockcore.ErrQuarantined
	}
	return out, nil
}

var _ lockcore.Adopter = (*Node)(nil)

// adoptBatch is how many locks one adopt.lua call takes in on a single
// node: the script's own cost is paid once per batch instead of once per
// lock, and a call still holds the server for well under a millisecond.
const adoptBatch = 200

// AdoptLocks implements lockcore.Adopter with adopt.lua, adoptBatch locks a
// call, the calls pipelined, while the node's epoch is epoch; readers-writer
// holds (RWHoldResource names) go to adoptrw.lua the same way.
func (n *Node) AdoptLocks(ctx context.Context, locks []lockcore.HeldLock, epoch string) error {
	locks, holds := splitHeld(locks) // holds: readers-writer holds (rule R6 of lockcore's doc)
	if len(holds) > 0 {
		if err := n.adoptHolds(ctx, holds, epoch); err != nil {
			return err
		}
	}
	if len(locks) == 0 {
		return nil
	}
	if err := adoptScript.Load(ctx, n.rdb).Err(); err != nil {
		return timedOut(ctx, err)
	}
	pipe := n.rdb.Pipeline()
	var cmds []*redis.Cmd
	for batch := range slices.Chunk(locks, adoptBatch) {
		cmds = append(cmds, pipe.EvalSha(ctx, adoptScript.Hash(), adoptKeys(metaKey, batch), adoptArgs(epoch, batch)...))
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

// adoptKeys are adopt.lua's KEYS for locks: epochKey, the hash that holds
// the node's epoch, then each lock's key.
func adoptKeys(epochKey string, locks []lockcore.HeldLock) []string {
	keys := make([]string, 0, 1+len(locks))
	keys = append(keys, epochKey)
	for _, l := range locks {
		keys = append(keys, lockKey(l.Resource))
	}
	return keys
}

// adoptArgs are adopt.lua's ARGV for locks: the epoch, then five per lock.
// A lock is taken in for at least a millisecond, so that one read as
// expiring at this instant is not taken in as one without expiry.
func adoptArgs(epoch string, locks []lockcore.HeldLock) []any {
	args := make([]any, 0, 1+5*len(locks))
	args = append(args, epoch)
	for _, l := range locks {
		args = append(args, l.Lease, strconv.FormatInt(l.Token, 10), l.Owner, ms(l.TTL), ms(max(l.Remaining, time.Millisecond)))
	}
	return args
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
	if err := n.repairSlots(ctx, floor, epoch); err != nil {
		return err
	}
	// serve.lua serves only the process the quarantine or mark was made
	// for, read in the same atomic step (rule 7b), and reports it: a read
	// over the pool, as a Check's probe is (see observed).
	conns := n.connsMade()
	proc, err := serveScript.Run(ctx, n.rdb, []string{metaKey}, epoch, dataFormat, "", lockcore.NewLeaseID()).Text()
	switch {
	case err != nil:
		return timedOut(ctx, err)
	case proc == "":
		return lockcore.ErrNodeChanged
	}
	id, _, _ := strings.Cut(proc, "|")
	n.observed(conns, id, proc)
	bound, err := n.bind(ctx, proc)
	if err != nil {
		return err
	}
	if err := n.unlink(ctx, legacy); err != nil { // folded into the slots above: no longer needed
		return err
	}
	n.served(proc, bound)
	return nil
}

// repairSlots runs repair.lua on every slot, pipelined, raising slot i's
// counter to floor[i] while the node's epoch is epoch (else
// lockcore.ErrNodeChanged).
func (n *Node) repairSlots(ctx context.Context, floor []int64, epoch string) error {
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
	return nil
}

// unlink deletes keys, pipelined; none is nothing to do.
func (n *Node) unlink(ctx context.Context, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	pipe := n.rdb.Pipeline()
	for _, k := range keys {
		pipe.Unlink(ctx, k)
	}
	return execAll(ctx, pipe)
}

// served records a repair of server process and replication history
// proc: in service for this gateway at once, unless a connection found
// another one meanwhile (see onConnect), or the lock scripts could not be
// bound to proc (bound): then only after the next Check.
func (n *Node) served(proc string, bound bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.seenInit = true
	if n.connProc == proc && bound {
		n.proc, n.refusing = proc, ""
		n.trusted.Store(true)
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
