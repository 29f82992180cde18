// Package redisnode is a lockcore.Node on one Redis master (go-redis v9).
//
// Each operation is one Lua script, loaded once and run with EVALSHA (EVAL on
// NOSCRIPT, which means the script did not run), and never retried: a script
// whose reply was lost may have run, and running it again would turn a grant
// into a re-entry or a release into "not held" (go-redis's own retry is off;
// its pool drops a connection that died with a restarted server before using
// it). Keys carry a hash tag, so that a node can be a Redis Cluster: a script
// only touches keys of one slot.
//
//   - lockgate:{resource}:lock, a hash (lease, tok, owner, ttl, by, x) that
//     expires with the lock's TTL;
//   - lockgate:{tag}:tokens, the fencing counter of one slot (hash fields n,
//     and q while the node is quarantined), where tag is lockcore.SlotTag of
//     the slot, so it lives in the Cluster slot of every resource it counts
//     for. There are lockcore.FenceSlots of them, created when the node is
//     initialized (Repair) and never removed: a few MB (docs/operations.md
//     gives the figure), whatever the number of names ever locked;
//   - lockgate:{meta}:node, the node's record (see check.lua): the server
//     process its data was last recovered for, its quarantine, its
//     bootstrap mark and the data format;
//   - lockgate:{meta}:recovery, the gateway replica that claims the node's
//     recovery (claim.lua, lockcore.RecoveryClaimer), expiring;
//   - lockgate:{resource}:released, the pub/sub channel of releases;
//   - lockgate:{name}:rw, a readers-writer lock: its holds and a waiting
//     writer's mark, in one hash that expires with its latest field (see
//     rwlib.lua and rw.go).
//
// Every lock script starts with guard.lua: a slot whose counter is missing
// (the node restarted empty, or was never initialized) or marked quarantined
// changes nothing and fails with lockcore.ErrQuarantined. Check finds lost
// data (see Node.Check) and a node that refuses writes; Quarantine, Counters
// and Repair act on every slot in pipelines.
//
// Releases are announced by pub/sub: the release script publishes on the
// resource's channel in the same atomic step as the DEL of the lock (the
// payload, the released token in decimal, is not secret and watchers ignore
// it). A hand-off (handoff.lua) passes the lock from its holder to the next
// waiter of the same gateway replica in one step and publishes nothing, since
// the lock was never free; when it may not pass the lock on it releases and
// publishes as the release script does.
//
// Watches share one pub/sub connection per node (see hub.go). A release
// published while that connection is down is never delivered, so once
// go-redis has made a new one and subscribed again, every standing watch is
// notified as if a release had been heard. Watch never waits longer than its
// context, even while go-redis redials an unreachable node.
//
// The lock operations (Acquire, Extend, Release, HandOff, RaiseFence,
// Inspect) of all goroutines share pipelined round trips (see pipe.go), at
// most pipeWorkers of them per node in flight at once: a call that finds
// one free is sent at once, alone; calls that come while none is free
// wait, and go together in one pipeline (one write, one read) as soon as
// one frees. Pipelining changes no call's meaning:
//   - a call still ends by its context's deadline: a call whose context ends
//     before it is sent is never sent (its script did not run), and one whose
//     context ends in flight fails with an error matching
//     context.DeadlineExceeded, its reply unknown as for a lost reply (the
//     script may still run later, after calls made since on other
//     connections, as it could before);
//   - nothing is sent twice: only calls answered NOSCRIPT, which did not
//     run, are sent again, with EVAL;
//   - scripts of one pipeline run one after the other, each atomic as
//     always. Calls from one goroutine run in the order it makes them, since
//     each waits for its reply; calls of different goroutines have no order,
//     as before.
//
// Check, Quarantine, Counters, Repair, Ping, listing and pub/sub use the
// client directly.
//
// Run every node with maxmemory-policy noeviction (a node that may evict
// refuses to serve). Any persistence is safe: a node answered by a server
// process other than the one its record names (a restart, a restore, a
// failover to a replica, including one that Redis Sentinel manages, see
// ParseSentinelURL) recovers from the other nodes before it counts again;
// see package lockcore, "Nodes that lose their data".
package redisnode

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/lockgate/lockgate/internal/unprotected"
	"github.com/lockgate/lockgate/lockcore"
)

// The node scripts. Their header comments give KEYS, ARGV and replies; the
// scripts that serve a lock start with guard.lua.
var (
	//go:embed guard.lua
	guardLua string
	//go:embed acquire.lua
	acquireLua    string
	acquireScript = guarded(acquireLua)
	//go:embed extend.lua
	extendLua    string
	extendScript = guarded(extendLua)
	//go:embed release.lua
	releaseLua    string
	releaseScript = guarded(releaseLua)
	//go:embed handoff.lua
	handoffLua    string
	handoffScript = guarded(handoffLua)
	//go:embed fence.lua
	fenceLua    string
	fenceScript = guarded(fenceLua)
	//go:embed inspect.lua
	inspectLua    string
	inspectScript = guarded(inspectLua)
	//go:embed check.lua
	checkLua    string
	checkScript = redis.NewScript(checkLua)
	//go:embed quarantine.lua
	quarantineLua    string
	quarantineScript = redis.NewScript(quarantineLua)
	//go:embed boot.lua
	bootLua    string
	bootScript = redis.NewScript(bootLua)
	//go:embed mark.lua
	markLua    string
	markScript = redis.NewScript(markLua)
	//go:embed qdone.lua
	qdoneLua    string
	qdoneScript = redis.NewScript(qdoneLua)
	//go:embed serve.lua
	serveLua    string
	serveScript = redis.NewScript(serveLua)
	//go:embed repair.lua
	repairLua    string
	repairScript = redis.NewScript(repairLua)
	//go:embed adopt.lua
	adoptLua    string
	adoptScript = redis.NewScript(adoptLua)
	//go:embed upgrade.lua
	upgradeLua    string
	upgradeScript = redis.NewScript(upgradeLua)
	//go:embed rrepl.lua
	rreplLua    string
	rreplScript = redis.NewScript(rreplLua)
	//go:embed claim.lua
	claimLua    string
	claimScript = redis.NewScript(claimLua)
)

func guarded(body string) *redis.Script { return redis.NewScript(guardLua + body) }

func lockKey(resource string) string { return "lockgate:{" + resource + "}:lock" }

// releasedKey is the channel a release is published on (release.lua,
// handoff.lua; a force release through its hold's release). The scripts
// build it from KEYS[1] (lockKey with its trailing "lock" replaced, so
// lockKey must end in ":lock"), never
// declare it: a channel is not a key, and a declared key that does not
// exist makes Redis Cluster refuse the script (TRYAGAIN) for the whole of
// its slot's migration.
func releasedKey(resource string) string { return "lockgate:{" + resource + "}:released" }

// slotKeys holds the key of every slot's counter hash: lockgate:{tag}:tokens
// with the tag of lockcore.SlotTag, so that it lives in the Cluster slot of
// every resource whose counter it is.
var slotKeys = func() []string {
	keys := make([]string, lockcore.FenceSlots)
	for i := range keys {
		keys[i] = "lockgate:{" + lockcore.SlotTag(i) + "}:tokens"
	}
	return keys
}()

func tokensKey(resource string) string { return slotKeys[lockcore.FenceSlot(resource)] }

// metaKey is the node's heartbeat and quarantine record (see check.lua).
const metaKey = "lockgate:{meta}:node"

// witKey is the node's witness hash (check.lua, witness.lua): what
// gateways saw of the other nodes while they found both in service.
const witKey = "lockgate:{meta}:wit"

// claimKey holds the recovery claim (claim.lua), in the record's slot.
const claimKey = "lockgate:{meta}:recovery"

// outReply is the first reply value of a script that found the node out of
// service (see guard.lua).
const outReply = -9

// Node is a lockcore.Node backed by one Redis master. It is safe for
// concurrent use.
type Node struct {
	rdb     *redis.Client
	name    string
	protect string // "1", or "0" once Unprotect was called (tests only)

	// trusted is true while the node's data is known to be whole: set by a
	// Check that found nothing lost and by Repair, cleared by a Check that
	// found a loss and when a new connection finds a new server process
	// (run id) behind the address, until the next Check. While it is false
	// every lock operation fails with lockcore.ErrQuarantined, also when
	// the operation ran on the server meanwhile.
	trusted atomic.Bool
	// afterProbe, when not nil, runs in Check between the probe and the
	// verdict's record (tests only: see export_test.go).
	afterProbe func()
	// wasFull is true while the last Check found the node full or refusing
	// writes (see probe).
	wasFull atomic.Bool
	// durable is what the last Check found of the node's persistence
	// (nodeSettings.durable), for Witness.
	durable atomic.Bool
	// hideWit: see HideWitnesses (tests only).
	hideWit atomic.Bool

	pipe *pipe // batches the lock scripts; nil: each runs on its own (benchmarks)

	checkMu sync.Mutex // Checks run one at a time
	mu      sync.Mutex
	hub     *hub // made by the first Watch
	closed  bool
	// What the last Check saw (see Check): the server process with its
	// replication history (see processOf), and why the node refuses (""
	// when it does not).
	proc     string
	refusing string
	// connProc is the server process and replication history the newest
	// connection found, or that a later read over the pool found for the
	// same process (see observed); conns counts the connections made and
	// the demotions seen (see demoted).
	connProc string
	conns    uint64
	// sc are this Node's lock scripts, and loadedIn the server process they
	// were last loaded into by a Check or Repair that judged it (see
	// bound.go); "" since a lock script met a process without them.
	sc       lockScripts
	loadedIn string
	// seenInit is set once a Check found the node initialized.
	seenInit bool
}

var (
	_ lockcore.Node      = (*Node)(nil)
	_ lockcore.Watcher   = (*Node)(nil)
	_ lockcore.HandOffer = (*Node)(nil)
)

// New returns a node for the Redis server at rawURL: redis://[user:pass@]host:port[/db]
// or rediss:// for TLS, or a primary that Redis Sentinel manages:
// redis-sentinel://[user:pass@]host:port/mastername?addr=host:port&addr=host:port
// (the Sentinels' addresses; user and password are the primary's and, the
// same, the Sentinels'; rediss-sentinel:// for TLS). A failover to a
// replica is a new server process, which the node recovers from like any
// loss (see Check). It does not connect; use Ping to check. It fails only
// when the URL is malformed.
//
// The node serves no lock until a Check found its data whole or Repair
// initialized it (lockcore.Redlock does both).
func New(rawURL string) (*Node, error) { return newNode(rawURL, true) }

// Unprotect turns off the detection of lost data, for tests that show what
// it prevents (see package internal/unprotected): the node serves at once
// and whatever happened to its data, a slot whose counter is missing (the
// node restarted empty) starting again at 0. Call it before the node is
// used.
func (n *Node) Unprotect(unprotected.Key) {
	n.protect = "0"
	n.trusted.Store(true)
	if n.pipe != nil {
		n.pipe.evalOnNoScript.Store(true)
	}
}

// HideWitnesses makes the node's Checks report no Witnessed (rule 8 of
// lockcore's doc): with every node so, no node's witness contradicts
// another's data, and a node back from an older copy during a restart of
// a majority is taken for one back from a restart. For the tests that
// show what the witnesses catch; the Key keeps it inside this module.
func (n *Node) HideWitnesses(unprotected.Key) { n.hideWit.Store(true) }

// Unprotected reports whether Unprotect was called (internal/unprotected.Node).
func (n *Node) Unprotected(unprotected.Key) bool { return n.protect != "1" }

// newNode is New; pipelined false runs every script on its own pooled
// connection, as before the pipe (for benchmarks that compare).
func newNode(rawURL string, pipelined bool) (*Node, error) {
	if strings.HasPrefix(rawURL, "redis-sentinel://") || strings.HasPrefix(rawURL, "rediss-sentinel://") {
		return newSentinelNode(rawURL, pipelined)
	}
	opt, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redisnode: bad Redis URL: %w", err)
	}
	n := &Node{name: opt.Addr, protect: "1", sc: newLockScripts(lockcore.NewLeaseID())}
	// Timeouts come from each call's context (lockcore bounds every node
	// call).
	opt.ContextTimeoutEnabled = true
	// No retries: a script whose reply was lost may have run, and running
	// it again would turn a grant into a re-entry or a release into "not
	// held". A pooled connection that died with a restarted server is found
	// dead by the pool's health check before it is used.
	opt.MaxRetries = -1
	// A refused dial is an answer: the node is down. go-redis would retry it
	// 5 times, 100ms apart, which turns a dead node into a slow one.
	opt.DialerRetries = 1
	opt.DisableIdentity = true
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	opt.OnConnect = n.onConnect
	// Pool sizes stay go-redis's defaults. They are caps, not standing
	// connections (nothing is dialed before it is needed), and the lock
	// calls use few: at most pipeWorkers round trips in flight, a call sent
	// alone on the main pool (10 per CPU), a pipeline on the dedicated
	// pipeline pool (10), which also serves Check's probe and the pipelines
	// of Quarantine, Counters and Repair (a pipeline that finds it full
	// takes a connection of the main pool at once). Smaller pools would
	// save nothing and cost recovery: a pool that has failed PoolSize dials
	// (a node down for a while) fails every dial at once with the last dial
	// error until a probe, once a second, reaches the server again. With a
	// main pool of 8 a node back from a restart still looked down to the
	// next lock call (TestALaggingNodeThenAnEmptyRestart failed 3 times in
	// 5).
	n.rdb = redis.NewClient(opt)
	if pipelined {
		n.pipe = newPipe(n.rdb)
	}
	return n, nil
}

// onConnect runs on every new connection before its first command: a
// server process other than the one the last Check found behind the
// address (it restarted, maybe from an older copy of its data, or a replica
// took over), or the same process with another replication history (it
// was a replica and is a primary again), makes the node untrusted until
// the next Check.
func (n *Node) onConnect(ctx context.Context, cn *redis.Conn) error {
	if n.protect != "1" {
		return nil
	}
	info, err := cn.Info(ctx, "server", "replication").Result()
	if err != nil {
		return timedOut(ctx, err) // the connection is not used
	}
	_, proc := processOf(info)
	n.mu.Lock()
	defer n.mu.Unlock()
	n.connProc = proc
	n.conns++
	if proc == "" || proc != n.proc {
		n.trusted.Store(false)
	}
	return nil
}

// Client is the node's go-redis client (for tests and diagnostics).
func (n *Node) Client() *redis.Client { return n.rdb }

// String names the node by host:port, never with its password.
func (n *Node) String() string { return n.name }

// Close closes the node's connections and ends its watches. The pub/sub
// connection is closed in the background (see hub.close). Lock calls in
// flight fail (their reply unknown) and later ones fail with
// redis.ErrClosed; the pipe's workers have returned when Close does.
func (n *Node) Close() error {
	n.mu.Lock()
	h := n.hub
	n.hub, n.closed = nil, true
	n.mu.Unlock()
	if h != nil {
		h.close()
	}
	if n.pipe == nil {
		return n.rdb.Close()
	}
	n.pipe.close()
	err := n.rdb.Close() // ends the pipelines in flight
	n.pipe.wait()
	return err
}

func ints(v any, want int) ([]int64, error) {
	arr, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("redisnode: script replied %T, not an array", v)
	}
	if len(arr) < want && !(len(arr) > 0 && arr[0] == int64(outReply)) {
		return nil, fmt.Errorf("redisnode: script replied %d values, want %d", len(arr), want)
	}
	out := make([]int64, len(arr))
	for i, x := range arr {
		n, ok := x.(int64)
		if !ok {
			return nil, fmt.Errorf("redisnode: script reply value %d is %T, not an integer", i, x)
		}
		out[i] = n
	}
	return out, nil
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

func waits(w bool) string {
	if w {
		return "1"
	}
	return "0"
}

// mismatchReply is the first reply value of a script that found the lock's
// token is not the expected one (If-Match).
const mismatchReply = -2

// statusReply maps the {-2|-1|0|1, value} reply of extend and release.
func statusReply(v []int64) lockcore.NodeReply {
	switch v[0] {
	case mismatchReply:
		return lockcore.NodeReply{Status: lockcore.StatusMismatch, Token: v[1]}
	case 1:
		r := lockcore.NodeReply{Status: lockcore.StatusOK, Token: v[1]}
		if len(v) > 2 {
			r.TTL = time.Duration(v[2]) * time.Millisecond
		}
		return r
	case 0:
		return lockcore.NodeReply{Status: lockcore.StatusTaken, PTTL: time.Duration(v[1]) * time.Millisecond}
	default:
		return lockcore.NodeReply{Status: lockcore.StatusAbsent}
	}
}

// Acquire implements lockcore.Node with acquire.lua.
func (n *Node) Acquire(ctx context.Context, req lockcore.NodeAcquire) (lockcore.NodeReply, error) {
	v, err := n.run(ctx, n.sc.acquire, n.lockKeys(req.Resource), 2,
		req.Lease, ms(req.TTL), req.Owner, req.Replica, waits(req.Waits))
	if err != nil {
		return lockcore.NodeReply{}, err
	}
	switch v[0] {
	case 1:
		return lockcore.NodeReply{Status: lockcore.StatusGranted, Token: v[1]}, nil
	case 2:
		return lockcore.NodeReply{Status: lockcore.StatusReentered, Token: v[1]}, nil
	default:
		return lockcore.NodeReply{Status: lockcore.StatusTaken, PTTL: time.Duration(v[1]) * time.Millisecond}, nil
	}
}

// lockKeys are KEYS for scripts that take the lock and its slot's counter.
func (n *Node) lockKeys(resource string) []string {
	return []string{lockKey(resource), tokensKey(resource)}
}

// Extend implements lockcore.Node with extend.lua.
func (n *Node) Extend(ctx context.Context, resource, lease string, ttl time.Duration, ifToken int64) (lockcore.NodeReply, error) {
	v, err := n.run(ctx, n.sc.extend, n.lockKeys(resource), 2, lease, ms(ttl), ifToken)
	if err != nil {
		return lockcore.NodeReply{}, err
	}
	return statusReply(v), nil
}

// Release implements lockcore.Node with release.lua.
func (n *Node) Release(ctx context.Context, resource, lease string, ifToken int64) (lockcore.NodeReply, error) {
	keys := []string{lockKey(resource), tokensKey(resource)}
	v, err := n.run(ctx, n.sc.release, keys, 2, lease, ifToken)
	if err != nil {
		return lockcore.NodeReply{}, err
	}
	return releaseReply(v), nil
}

// releaseReply maps release.lua's reply, and the first three values of
// handoff.lua's.
func releaseReply(v []int64) lockcore.NodeReply {
	r := statusReply(v[:2])
	r.Wanted = r.Status == lockcore.StatusOK && len(v) > 2 && v[2] == 1
	return r
}

// HandOff implements lockcore.HandOffer with handoff.lua.
func (n *Node) HandOff(ctx context.Context, lease string, ifToken int64, next lockcore.NodeAcquire) (released, granted lockcore.NodeReply, err error) {
	r := next.Resource
	keys := []string{lockKey(r), tokensKey(r)}
	v, err := n.run(ctx, n.sc.handoff, keys, 5, lease, next.Lease, ms(next.TTL), next.Owner, next.Replica, ifToken)
	if err != nil {
		return lockcore.NodeReply{}, lockcore.NodeReply{}, err
	}
	granted = lockcore.NodeReply{Status: lockcore.StatusAbsent}
	if v[3] == 1 {
		granted = lockcore.NodeReply{Status: lockcore.StatusGranted, Token: v[4]}
	}
	return releaseReply(v[:3]), granted, nil
}

// run runs a guarded script whose reply is an array of at least want
// integers. A node out of service, by
// the script's guard or because it is not trusted before or after the call,
// fails with lockcore.ErrQuarantined.
func (n *Node) run(ctx context.Context, s *redis.Script, keys []string, want int, args ...any) ([]int64, error) {
	res, err := n.eval(ctx, s, keys, args...)
	if err != nil {
		return nil, err
	}
	v, err := ints(res, want)
	if err != nil {
		return nil, err
	}
	if v[0] == outReply {
		return nil, lockcore.ErrQuarantined
	}
	return v, nil
}

// eval runs a guarded script while the node is trusted, through the pipe.
func (n *Node) eval(ctx context.Context, s *redis.Script, keys []string, args ...any) (any, error) {
	if !n.trusted.Load() {
		return nil, n.outError()
	}
	if n.protect != "1" && len(keys) > 1 && strings.HasSuffix(keys[1], "}:tokens") {
		// Unprotected (tests only): a slot whose counter is missing
		// starts again at 0, where the guard of a script that takes it
		// (as KEYS[2]) would refuse it.
		if err := n.rdb.HSetNX(ctx, keys[1], "n", 0).Err(); err != nil {
			return nil, timedOut(ctx, err)
		}
	}
	var res any
	var err error
	switch {
	case n.pipe != nil:
		res, err = n.pipe.do(ctx, s, keys, args)
	case n.protect == "1":
		res, err = s.EvalSha(ctx, n.rdb, keys, args...).Result() // bound: see bound.go
	default:
		res, err = s.Run(ctx, n.rdb, keys, args...).Result()
	}
	if n.protect == "1" && redis.HasErrorPrefix(err, "READONLY") {
		n.demoted()
	}
	if n.protect == "1" && isNoScript(err) {
		n.unjudged()
	}
	if !n.trusted.Load() {
		return nil, n.outError()
	}
	return res, timedOut(ctx, err)
}

// RefusingError is what a lock operation fails with while the node's last
// Check found it refusing (lockcore.NodeHealth.Refusing): out of memory,
// an eviction policy that may drop locks, a newer data format. Nothing
// was sent to the node.
type RefusingError struct{ Reason string }

func (e *RefusingError) Error() string { return "redisnode: the node does not serve: " + e.Reason }

// outError is why a lock operation may not use the node now.
func (n *Node) outError() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.refusing != "" {
		return &RefusingError{Reason: n.refusing}
	}
	return lockcore.ErrQuarantined
}

// timedOut makes a network timeout that ctx's deadline caused match
// context.DeadlineExceeded, as lockcore and its observers expect of a node
// that did not answer in time (go-redis reports the socket's "i/o timeout").
func timedOut(ctx context.Context, err error) error {
	if err == nil { // before ne, which escapes: no allocation on success
		return nil
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return errors.Join(context.DeadlineExceeded, err)
	}
	return err
}

// RaiseFence implements lockcore.Node with fence.lua.
func (n *Node) RaiseFence(ctx context.Context, resource, lease string, token int64) error {
	_, err := n.run(ctx, n.sc.fence, n.lockKeys(resource), 2, strconv.FormatInt(token, 10), lease)
	return err
}

// Inspect implements lockcore.Node with inspect.lua.
func (n *Node) Inspect(ctx context.Context, resource string) (lockcore.NodeLock, error) {
	res, err := n.eval(ctx, n.sc.inspect, n.lockKeys(resource))
	if err != nil {
		return lockcore.NodeLock{}, err
	}
	return inspectReply(res)
}

// inspectReply maps inspect.lua's reply (a Node's and a ClusterNode's).
func inspectReply(res any) (lockcore.NodeLock, error) {
	arr, ok := res.([]any)
	switch {
	case !ok:
		return lockcore.NodeLock{}, fmt.Errorf("redisnode: inspect replied %T, not an array", res)
	case len(arr) == 0:
		return lockcore.NodeLock{}, nil
	case len(arr) == 1 && arr[0] == int64(outReply):
		return lockcore.NodeLock{}, lockcore.ErrQuarantined
	case len(arr) != 5:
		return lockcore.NodeLock{}, fmt.Errorf("redisnode: inspect replied %d values, want 5", len(arr))
	}
	lease, _ := arr[0].(string)
	tok, _ := arr[1].(int64)
	owner, _ := arr[2].(string)
	ttl, _ := arr[3].(int64)
	pttl, _ := arr[4].(int64)
	return lockcore.NodeLock{Found: true, Lease: lease, Token: tok, Owner: owner,
		TTL: time.Duration(ttl) * time.Millisecond, Remaining: time.Duration(pttl) * time.Millisecond}, nil
}

// Ping implements lockcore.Node.
func (n *Node) Ping(ctx context.Context) error { return timedOut(ctx, n.rdb.Ping(ctx).Err()) }
