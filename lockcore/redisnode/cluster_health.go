package redisnode

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/lockcore"
)

// clusterShard is one primary of a Cluster node as Check saw it.
type clusterShard struct {
	addr  string
	first int // the lowest slot it serves
}

// clusterShards reads, from the Cluster, which primary serves which slots,
// and fails unless every slot has one.
func (c *ClusterNode) clusterShards(ctx context.Context) ([]clusterShard, error) {
	shards, _, err := c.slotOwners(ctx)
	return shards, err
}

// slotOwners is clusterShards, and a fingerprint of the whole slot map
// (which primary serves each slot) that any move of a slot changes.
func (c *ClusterNode) slotOwners(ctx context.Context) ([]clusterShard, string, error) {
	slots, err := c.slotMap(ctx)
	if err != nil {
		return nil, "", err
	}
	out, fp, err := slotPrint(slots)
	if err != nil {
		return nil, "", err
	}
	c.mu.Lock()
	c.lastPrimaries = c.lastPrimaries[:0]
	for _, sh := range out {
		c.lastPrimaries = append(c.lastPrimaries, sh.addr)
	}
	rt, primaries := c.router, slices.Clone(c.lastPrimaries)
	c.mu.Unlock()
	if rt != nil {
		rt.reconcile(slots, primaries)
	}
	return out, fp, nil
}

// slotPrint reads a slot map (CLUSTER SLOTS): its primaries in the order
// of the lowest slot each serves, and a fingerprint that any difference in
// which primary (by node id) serves a slot changes. It fails unless every
// slot has a primary.
func slotPrint(slots []redis.ClusterSlot) ([]clusterShard, string, error) {
	slots = slices.Clone(slots)
	slices.SortFunc(slots, func(a, b redis.ClusterSlot) int { return a.Start - b.Start })
	first := map[string]int{}
	served := 0
	fp := fnv.New64a()
	for _, r := range slots {
		if len(r.Nodes) == 0 {
			continue
		}
		a := r.Nodes[0].Addr
		if f, ok := first[a]; !ok || r.Start < f {
			first[a] = r.Start
		}
		served += r.End - r.Start + 1
		fmt.Fprintf(fp, "%d-%d=%s;", r.Start, r.End, r.Nodes[0].ID)
	}
	if served != lockcore.FenceSlots {
		return nil, "", fmt.Errorf("redisnode: the Cluster serves %d of %d slots", served, lockcore.FenceSlots)
	}
	out := make([]clusterShard, 0, len(first))
	for a, f := range first {
		out = append(out, clusterShard{addr: a, first: f})
	}
	slices.SortFunc(out, func(a, b clusterShard) int { return a.first - b.first })
	return out, strconv.FormatUint(fp.Sum64(), 36), nil
}

// slotMap reads CLUSTER SLOTS from the first node that answers: the
// primaries last seen, then the URL's addresses. It uses this node's own
// clients (see shard), since the cluster client refuses replicas.
func (c *ClusterNode) slotMap(ctx context.Context) ([]redis.ClusterSlot, error) {
	c.mu.Lock()
	addrs := slices.Clone(c.lastPrimaries)
	c.mu.Unlock()
	var err error
	for _, a := range append(addrs, c.opt.Addrs...) {
		var slots []redis.ClusterSlot
		if slots, err = c.shard(a).ClusterSlots(ctx).Result(); err == nil {
			return slots, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, timedOut(ctx, err)
}

// shard returns this node's own client of the primary at addr (used by
// Check alone, with go-redis's defaults but no retries).
func (c *ClusterNode) shard(addr string) *redis.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.shards[addr]
	if s == nil {
		s = redis.NewClient(&redis.Options{Addr: addr, Username: c.opt.Username, Password: c.opt.Password,
			TLSConfig: c.opt.TLSConfig, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1,
			DisableIdentity: true, PoolSize: 2})
		c.shards[addr] = s
	}
	return s
}

// beatKey is the key a Check writes on a shard, in the shard's lowest
// slot, so that a shard that refuses writes shows.
func beatKey(slot int) string { return "lockgate:{" + lockcore.SlotTag(slot) + "}:beat" }

// shardProbe is what Check read from one primary.
type shardProbe struct {
	proc, refusing string // proc: see processOf
	version        string // redis_version
}

// probeShard reads one primary's INFO and slot map and writes its beat
// key; refusing says why it may not serve ("" when it may). It fails when
// the primary is not one, when its slot map is not fp (the map the Check
// judges by: the primaries disagree, a failover or a reshard is under way,
// or the map came from a stale node), or when the beat write was not run
// for another reason than the slot's migration (CLUSTERDOWN: the primary
// sees no majority of the Cluster; MOVED: it no longer serves the slot).
func (c *ClusterNode) probeShard(ctx context.Context, sh clusterShard, fp string) (shardProbe, error) {
	s := c.shard(sh.addr)
	pipe := s.Pipeline()
	inf := pipe.Info(ctx, "server", "memory", "replication")
	cfg := configGets(ctx, pipe)
	slots := pipe.ClusterSlots(ctx)
	beat := pipe.HIncrBy(ctx, beatKey(sh.first), "beat", 1)
	_, _ = pipe.Exec(ctx)
	if err := cmp.Or(inf.Err(), slots.Err()); err != nil {
		return shardProbe{}, timedOut(ctx, err)
	}
	info := inf.Val()
	_, proc := processOf(info)
	p := shardProbe{proc: proc, version: infoString(info, "redis_version")}
	if role := infoString(info, "role"); role != "master" {
		return p, fmt.Errorf("redisnode: %s is a %s, no longer a primary (the Cluster is failing over)", sh.addr, role)
	}
	if _, its, err := slotPrint(slots.Val()); err != nil || its != fp {
		return p, fmt.Errorf("redisnode: %s has another slot map than the Cluster node that gave it (a failover or a reshard is under way)", sh.addr)
	}
	var failed bool
	if p.refusing, failed = shardVerdict(sh.addr, info, cfg(info), beat.Err()); failed {
		return p, fmt.Errorf("redisnode: %s did not take the check's write: %w", sh.addr, timedOut(ctx, beat.Err()))
	}
	return p, nil
}

// shardVerdict judges a primary at addr from its INFO and the error of the
// check's write on it: refusing says why it may not serve ("" when it
// may); failed, that the write was not run for another reason (a lost
// reply, CLUSTERDOWN, MOVED, TRYAGAIN, LOADING: the check fails). ASK is
// not a failure: the beat key has left its slot, which the primary still
// serves while the slot migrates.
func shardVerdict(addr, info string, set nodeSettings, err error) (refusing string, failed bool) {
	switch {
	case refusalReason(err) != "":
		return addr + ": " + refusalReason(err), false
	case full(info, memoryReserve):
		return addr + ": out of memory", false
	}
	if r, _ := settingsRefusal(set, dataFormat); r != "" {
		return addr + " " + r, false
	}
	return "", err != nil && !redis.HasErrorPrefix(err, "ASK ")
}

// Check implements lockcore.Node for a Cluster: it reads which primaries
// serve the slots, probes each (INFO, and a write in a slot it serves),
// and judges the meta hash (check.lua, on its shard) as Node.Check does,
// with the set of the primaries' run ids and replication ids as the server
// process: a shard's restart, failover or failback, a new shard, or a
// shard gone, each make a set the record does not name, and the node is
// lost until it recovers.
// A reshard between the same primaries changes nothing. A shard that
// refuses writes, is full or may evict makes the node refuse; an evicting
// shard also removes the record, as for Node.
func (c *ClusterNode) Check(ctx context.Context) (lockcore.NodeHealth, error) {
	c.checkMu.Lock()
	defer c.checkMu.Unlock()
	c.cc.ReloadState(ctx) // routes follow the slots soon after a failover
	ids, refusing, err := c.probeShards(ctx)
	if err != nil {
		return lockcore.NodeHealth{}, err
	}
	if c.afterProbe != nil {
		c.afterProbe()
	}
	res, err := c.cc.Eval(ctx, checkLua, []string{metaKey}).Result()
	if refusing == "" && refusalReason(err) != "" {
		refusing = "meta shard: " + refusalReason(err)
	}
	if refusing == "" && err == nil {
		var v checkReply
		if v, err = parseCheck(res); err == nil {
			return c.judged(ids, v), nil
		}
	}
	if refusing == "" {
		return lockcore.NodeHealth{}, timedOut(ctx, err)
	}
	if strings.Contains(refusing, "evicts keys") {
		if err := c.cc.HDel(ctx, metaKey, "rid").Err(); err != nil {
			return lockcore.NodeHealth{}, timedOut(ctx, err)
		}
	}
	c.record(ids, false, refusing)
	return lockcore.NodeHealth{Initialized: true, Refusing: refusing}, nil
}

// probeShards probes every primary (see probeShard) and returns their
// processes (processOf's proc) and the first reason one gave to refuse
// ("" when none did).
func (c *ClusterNode) probeShards(ctx context.Context) (ids map[string]bool, refusing string, err error) {
	shards, fp, err := c.slotOwners(ctx)
	if err != nil {
		return nil, "", err
	}
	ids = map[string]bool{}
	sharded := true
	for _, sh := range shards {
		p, err := c.probeShard(ctx, sh, fp)
		if err != nil {
			return nil, "", err
		}
		ids[p.proc] = true
		refusing = cmp.Or(refusing, p.refusing)
		sharded = sharded && shardedPubSubVersion(p.version)
	}
	c.pubMode.CompareAndSwap(pubUnknown, pubModeFor(sharded)) // see cluster_pubsub.go
	return ids, refusing, nil
}

// judged is what a Check that found the primaries ids and the record v
// reports (see judge), and what the node remembers of it.
func (c *ClusterNode) judged(ids map[string]bool, v checkReply) lockcore.NodeHealth {
	if v.format > dataFormat {
		refusing := fmt.Sprintf("data format %d is newer than this gateway's (%d): a newer lockgate wrote it", v.format, dataFormat)
		c.record(ids, false, refusing)
		return lockcore.NodeHealth{Initialized: true, Refusing: refusing}
	}
	id := idSet(ids) // it names the replication ids too
	if sameProcesses(v.rid, id) {
		id = v.rid // no failback (see isFailback)
	}
	h := judge(v, id, "")
	c.mu.Lock()
	h.Lost = h.Lost || (!h.Initialized && c.seenInit)
	c.seenInit = c.seenInit || h.Initialized
	c.mu.Unlock()
	c.record(ids, h.Initialized && !h.Lost && !h.Quarantined, "")
	return h
}

// record remembers the primaries the last Check found and whether the
// node may serve: trusted only if the Check found every primary in
// unjudged (see foundAll).
func (c *ClusterNode) record(ids map[string]bool, trusted bool, refusing string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ids, c.refusing = ids, refusing
	c.trusted.Store(c.foundAll(ids) && trusted)
}

// foundAll reports whether ids names every primary connected to since the
// last Check or Repair that the node's ids then did not name (unjudged),
// and empties unjudged: a connection made while a Check ran may be to a
// process its probe did not see (promoted after it), and until a Check
// finds that process the node does not serve. Called with mu held, as
// onConnect adds to unjudged with mu held: either a Check's record sees
// the connection, or onConnect sees the ids the record stored. A process
// left out is not remembered past this call: a pooled connection to a
// primary that no later Check's slot map names is not caught (see
// lockcore's "What is not guaranteed").
func (c *ClusterNode) foundAll(ids map[string]bool) bool {
	all := true
	for id := range c.unjudged {
		all = all && ids[id]
	}
	clear(c.unjudged)
	return all
}

// procs reads the process (processOf's proc) of every primary that
// serves slots now.
func (c *ClusterNode) procs(ctx context.Context) (map[string]bool, error) {
	shards, err := c.clusterShards(ctx)
	if err != nil {
		return nil, err
	}
	ids := map[string]bool{}
	for _, sh := range shards {
		info, err := c.shard(sh.addr).Info(ctx, "server", "replication").Result()
		if err != nil {
			return nil, timedOut(ctx, err)
		}
		if infoString(info, "role") != "master" {
			return nil, fmt.Errorf("redisnode: %s is no longer a primary (the Cluster is failing over)", sh.addr)
		}
		_, proc := processOf(info)
		ids[proc] = true
	}
	return ids, nil
}

// newEpoch returns a new epoch for this node: a sequence number from the
// meta hash (cseq.lua: later calls get greater ones, whatever gateway
// makes them) and a random id.
func (c *ClusterNode) newEpoch(ctx context.Context) (string, error) {
	seq, err := cseqScript.Run(ctx, c.cc, []string{metaKey}).Text()
	if err != nil {
		return "", timedOut(ctx, err)
	}
	return seq + "-" + lockcore.NewLeaseID(), nil
}

// markAll runs cmark.lua on every slot, pipelined (go-redis follows the
// slots; a mark sent twice changes nothing more).
func (c *ClusterNode) markAll(ctx context.Context, epoch, mode string) error {
	return c.evalSlots(ctx, cmarkScript, func(i int) ([]string, []any) {
		return []string{slotKeys[i]}, []any{epoch, mode}
	}, nil)
}

// evalSlots runs script s once per slot with the keys and ARGV that args
// gives, in one Cluster pipeline (by EVALSHA, after loading it on every
// shard), and passes each reply to check when it is not nil.
func (c *ClusterNode) evalSlots(ctx context.Context, s *redis.Script, args func(i int) ([]string, []any), check func(v any) error) error {
	if err := c.loadScript(ctx, scriptText(s)); err != nil {
		return err
	}
	pipe := c.cc.Pipeline()
	cmds := make([]*redis.Cmd, lockcore.FenceSlots)
	for i := range cmds {
		keys, argv := args(i)
		cmds[i] = pipe.EvalSha(ctx, s.Hash(), keys, argv...)
	}
	if err := execAll(ctx, pipe); err != nil {
		return timedOut(ctx, err)
	}
	if check == nil {
		return nil
	}
	for _, cmd := range cmds {
		if err := check(cmd.Val()); err != nil {
			return err
		}
	}
	return nil
}

// loadScript loads src into every primary's script cache (go-redis's
// ScriptLoad would also connect to the replicas, see onConnect).
func (c *ClusterNode) loadScript(ctx context.Context, src string) error {
	return timedOut(ctx, c.cc.ForEachMaster(ctx, func(ctx context.Context, s *redis.Client) error {
		return s.ScriptLoad(ctx, src).Err()
	}))
}

// clusterScripts maps the hash of each script evalSlots runs to its text.
var clusterScripts = map[string]string{
	cmarkScript.Hash():  cmarkLua,
	repairScript.Hash(): repairLua,
	adoptScript.Hash():  adoptLua,
}

func scriptText(s *redis.Script) string { return clusterScripts[s.Hash()] }

var _ lockcore.RecoveryClaimer = (*ClusterNode)(nil)

// ClaimRecovery implements lockcore.RecoveryClaimer with claim.lua, on the
// clock of the shard that serves the record's slot.
func (c *ClusterNode) ClaimRecovery(ctx context.Context, holder string, ttl time.Duration) (bool, error) {
	return claimRecovery(ctx, c.cc, holder, ttl)
}

// DropRecoveryClaim implements lockcore.RecoveryClaimer with claim.lua.
func (c *ClusterNode) DropRecoveryClaim(ctx context.Context, holder string) error {
	return dropRecoveryClaim(ctx, c.cc, holder)
}

// Quarantine implements lockcore.Node for a Cluster. The slots are marked
// first, each with the quarantine's epoch (cmark.lua: a slot's hash
// carries the epoch, since a Cluster script cannot read the meta hash in
// another slot), then the meta hash records the quarantine
// (quarantine.lua, for the set of primaries that answer now), then that
// every slot is marked (qdone.lua). Epochs grow (cseq.lua) and a slot's
// epoch never goes back, so a repair decided on an earlier epoch changes
// no slot this quarantine marked.
func (c *ClusterNode) Quarantine(ctx context.Context) error {
	c.trusted.Store(false)
	ids, err := c.procs(ctx)
	if err != nil {
		return err
	}
	epoch, err := c.newEpoch(ctx)
	if err != nil {
		return err
	}
	if err := c.markAll(ctx, epoch, "q"); err != nil {
		return err
	}
	if err := quarantineScript.Run(ctx, c.cc, []string{metaKey}, epoch, idSet(ids)).Err(); err != nil {
		return timedOut(ctx, err)
	}
	return timedOut(ctx, qdoneScript.Run(ctx, c.cc, []string{metaKey}, epoch).Err())
}

// MarkInitializing implements lockcore.Node for a Cluster: boot.lua on the
// meta hash, naming the set of primaries, then a bootstrap mark with the
// returned epoch on every slot that has no hash yet (cmark.lua), so that
// Repair, which acts on a slot only while it carries the repair's epoch,
// can initialize it.
func (c *ClusterNode) MarkInitializing(ctx context.Context) (string, error) {
	ids, err := c.procs(ctx)
	if err != nil {
		return "", err
	}
	fresh, err := c.newEpoch(ctx)
	if err != nil {
		return "", err
	}
	epoch, err := bootScript.Run(ctx, c.cc, []string{metaKey}, fresh, idSet(ids)).Text()
	if err != nil || epoch == "" {
		return "", timedOut(ctx, err)
	}
	if err := c.markAll(ctx, epoch, "b"); err != nil {
		return "", err
	}
	return epoch, nil
}

// Counters implements lockcore.Node for a Cluster, as Node.Counters.
func (c *ClusterNode) Counters(ctx context.Context) ([]int64, error) {
	if !c.trusted.Load() {
		return nil, lockcore.ErrQuarantined
	}
	pipe := c.cc.Pipeline()
	cmds := make([]*redis.SliceCmd, len(slotKeys))
	for i, k := range slotKeys {
		cmds[i] = pipe.HMGet(ctx, k, "n", "q")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, timedOut(ctx, err)
	}
	out := make([]int64, len(cmds))
	for i, cmd := range cmds {
		v := cmd.Val()
		if len(v) != 2 || v[1] != nil {
			return nil, lockcore.ErrQuarantined
		}
		s, ok := v[0].(string)
		if !ok {
			return nil, lockcore.ErrQuarantined
		}
		var err error
		if out[i], err = strconv.ParseInt(s, 10, 64); err != nil {
			return nil, fmt.Errorf("redisnode: counter of slot %d is %q: %w", i, s, err)
		}
	}
	if !c.trusted.Load() {
		return nil, lockcore.ErrQuarantined
	}
	return out, nil
}

// AdoptLocks implements lockcore.Adopter for a Cluster with adopt.lua, one
// lock a call (the keys of one call must share a Cluster slot), whose epoch
// check reads the lock's slot counter hash (the slot's epoch, see
// Quarantine) instead of the meta hash.
func (c *ClusterNode) AdoptLocks(ctx context.Context, locks []lockcore.HeldLock, epoch string) error {
	locks, holds := splitHeld(locks) // holds: readers-writer holds (rule R6 of lockcore's doc)
	if len(holds) > 0 {
		if err := c.adoptHolds(ctx, holds, epoch); err != nil {
			return err
		}
	}
	if len(locks) == 0 {
		return nil
	}
	if err := c.loadScript(ctx, adoptLua); err != nil {
		return err
	}
	pipe := c.cc.Pipeline()
	cmds := make([]*redis.Cmd, len(locks))
	for i, l := range locks {
		cmds[i] = pipe.EvalSha(ctx, adoptScript.Hash(), []string{tokensKey(l.Resource), lockKey(l.Resource)}, epoch, l.Lease,
			strconv.FormatInt(l.Token, 10), l.Owner, ms(l.TTL), ms(max(l.Remaining, time.Millisecond)))
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

// repairEpoch is Node.repairEpoch on the Cluster's meta hash.
func (c *ClusterNode) repairEpoch(ctx context.Context, epoch string) error {
	v, err := c.cc.HMGet(ctx, metaKey, "qsince", "qdone", "qepoch").Result()
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

// Repair implements lockcore.Node for a Cluster: repair.lua on every slot
// with the slot's own hash as the epoch's holder (it acts only while the
// slot carries epoch, set by the quarantine or bootstrap mark the repair
// was decided on), then serve.lua on the meta hash (only while its epoch
// is epoch), naming the set of primaries read before the first write. The
// node is trusted at once only if the same primaries answer afterwards and
// every primary connected to meanwhile is one of them (see foundAll).
func (c *ClusterNode) Repair(ctx context.Context, floor []int64, epoch string) error {
	if len(floor) != lockcore.FenceSlots {
		return fmt.Errorf("redisnode: repair needs %d counters, got %d", lockcore.FenceSlots, len(floor))
	}
	ids, err := c.procs(ctx)
	if err != nil {
		return err
	}
	if err := c.repairEpoch(ctx, epoch); err != nil {
		return err
	}
	changed := func(v any) error {
		if n, _ := v.(int64); n != 1 {
			return lockcore.ErrNodeChanged
		}
		return nil
	}
	err = c.evalSlots(ctx, repairScript, func(i int) ([]string, []any) {
		return []string{slotKeys[i], slotKeys[i]}, []any{strconv.FormatInt(floor[i], 10), epoch}
	}, changed)
	if err != nil {
		return err
	}
	switch served, err := serveScript.Run(ctx, c.cc, []string{metaKey}, epoch, dataFormat, idSet(ids)).Text(); {
	case err != nil:
		return timedOut(ctx, err)
	case served == "":
		return lockcore.ErrNodeChanged
	}
	after, err := c.procs(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seenInit = true
	if err == nil && idSet(after) == idSet(ids) && c.foundAll(ids) {
		c.ids, c.refusing = ids, ""
		c.trusted.Store(true)
	}
	return nil
}
