package redisnode

import (
	"context"
	"crypto/tls"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/lockgate/lockgate/lockcore"
)

// A Redis Cluster as one Redlock node (see ClusterNode and package
// lockcore, "A node that is a Redis Cluster").

var (
	//go:embed cseq.lua
	cseqLua    string
	cseqScript = redis.NewScript(cseqLua)
	//go:embed cmark.lua
	cmarkLua    string
	cmarkScript = redis.NewScript(cmarkLua)
)

// ParseClusterURL reads a node URL of the form
// redis-cluster://[user:pass@]host:port?addr=host:port&addr=host:port
// (rediss-cluster:// for TLS) into go-redis's cluster options: the seed
// nodes at host:port and every addr (any node of the Cluster will do; the
// others are found from it), user and password for every node. Only addr
// is accepted as a query parameter, and the path must be empty: a Cluster
// has one database.
func ParseClusterURL(rawURL string) (*redis.ClusterOptions, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "redis-cluster" && u.Scheme != "rediss-cluster" {
		return nil, fmt.Errorf("scheme %q is not redis-cluster or rediss-cluster", u.Scheme)
	}
	if strings.Trim(u.Path, "/") != "" {
		return nil, fmt.Errorf("a Redis Cluster URL has no path (a Cluster has database 0 only), not %q", u.Path)
	}
	o := &redis.ClusterOptions{}
	for _, a := range append([]string{u.Host}, u.Query()["addr"]...) {
		if _, _, err := net.SplitHostPort(a); err != nil || strings.HasPrefix(a, ":") {
			return nil, fmt.Errorf("cluster node address %q is not host:port", a)
		}
		o.Addrs = append(o.Addrs, a)
	}
	for k := range u.Query() {
		if k != "addr" {
			return nil, fmt.Errorf("unknown parameter %q (only addr=host:port is accepted)", k)
		}
	}
	if u.User != nil {
		o.Username = u.User.Username()
		o.Password, _ = u.User.Password()
	}
	if u.Scheme == "rediss-cluster" {
		host, _, _ := net.SplitHostPort(u.Host)
		o.TLSConfig = &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	}
	return o, nil
}

// IsClusterURL reports whether rawURL names a Redis Cluster node
// (redis-cluster:// or rediss-cluster://).
func IsClusterURL(rawURL string) bool {
	return strings.HasPrefix(rawURL, "redis-cluster://") || strings.HasPrefix(rawURL, "rediss-cluster://")
}

// ClusterNode is a lockcore.Node backed by a whole Redis Cluster: one
// Redlock node whose keys are spread over the Cluster's shards by hash
// slot. It runs the same scripts as Node, each on the keys of one slot (a
// lock, its slot's counter and its release channel share a hash slot), so
// a script runs whole on the one shard that owns the slot.
//
// It is in service only while every shard is: its record (the meta hash,
// on one shard) names the set of primaries (each by its run id and
// replication id, see processOf) its data was last recovered for, and a
// shard's restart, failover or failback is a process or a replication
// history that the set does not name, so the whole node recovers from the
// other Redlock nodes (see Check). A slot migration (a reshard) moves keys
// with their slot and changes no primary: it is not a loss.
//
// A lock script is sent once. A redirection (MOVED or ASK) or a refusal
// during a migration (TRYAGAIN), a Cluster without a primary for the slot
// (CLUSTERDOWN) or a loading or read-only server mean that the script did
// not run: it is sent again, to where the reply points, until the call's
// context ends. A lost reply (a timeout, a closed connection) is never
// retried: the script may have run. It is safe for concurrent use.
type ClusterNode struct {
	cc   *redis.ClusterClient
	opt  *redis.ClusterOptions
	name string

	// trusted is as for Node: set by a Check that found every shard's
	// process named by the record and by Repair (each only if it found
	// every primary in unjudged), cleared by a Check that found a loss and
	// by a new connection to a primary that the last Check did not find.
	trusted atomic.Bool
	// resent counts lock scripts sent again after a Cluster answered that
	// they did not run (see evalOnce).
	resent atomic.Int64
	// afterProbe, when not nil, runs in Check between the probe of the
	// primaries and the record of the result (tests).
	afterProbe func()
	// beforeScan, when not nil, runs in ScanLocks before its SCAN, with
	// the index of the primary it scans (tests).
	beforeScan func(shard int)

	checkMu sync.Mutex // Checks run one at a time
	mu      sync.Mutex
	ids     map[string]bool // the primaries the last Check found (processOf's proc)
	// unjudged holds the primaries (proc) connected to since the
	// last Check or Repair that ids did not name (see onConnect). That
	// Check or Repair trusts the node only if it found each of them: a
	// connection made while it ran may be to a process its probe did not
	// see (promoted after it).
	unjudged map[string]bool
	// refusing is why the last Check found the node refusing, or "".
	refusing string
	seenInit bool
	shards   map[string]*redis.Client // per address, for Check and listing
	// lastPrimaries are the primaries' addresses the last slot map named.
	lastPrimaries []string
	hub           *hub         // PUBLISH announcements (see cluster_pubsub.go)
	router        *shardRouter // SPUBLISH announcements
	closed        bool
	// pubMode is how announcements are published and heard (see
	// cluster_pubsub.go): pubUnknown until the first Check (or script or
	// watch, if earlier).
	pubMode atomic.Int32
}

var (
	_ lockcore.Node          = (*ClusterNode)(nil)
	_ lockcore.Watcher       = (*ClusterNode)(nil)
	_ lockcore.HandOffer     = (*ClusterNode)(nil)
	_ lockcore.Adopter       = (*ClusterNode)(nil)
	_ lockcore.Lister        = (*ClusterNode)(nil)
	_ lockcore.ForceReleaser = (*ClusterNode)(nil)
)

// NewCluster returns a node for the Redis Cluster at rawURL (see
// ParseClusterURL). It does not connect; use Ping to check. It fails only
// when the URL is malformed. The node serves no lock until a Check found
// its data whole or Repair initialized it (lockcore.Redlock does both).
func NewCluster(rawURL string) (*ClusterNode, error) {
	opt, err := ParseClusterURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redisnode: bad Redis Cluster URL: %w", err)
	}
	c := &ClusterNode{opt: opt, name: "cluster:" + opt.Addrs[0], shards: map[string]*redis.Client{}, unjudged: map[string]bool{}}
	co := *opt
	co.ContextTimeoutEnabled = true
	// go-redis retries a command after a network error or a timeout (up
	// to MaxRedirects times) unless the command says NoRetry: every lock
	// script does (noRetryCmd). The idempotent steps (Check, Quarantine's
	// marks, Repair, Counters, listing) keep go-redis's retries.
	co.MaxRetries = -1
	co.DialerRetries = 1
	co.DisableIdentity = true
	co.DisableRoutingPolicies = true
	co.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	co.OnConnect = c.onConnect
	c.cc = redis.NewClusterClient(&co)
	return c, nil
}

// errReplicaConn is what a connection to a replica fails with (see
// onConnect).
var errReplicaConn = errors.New("redisnode: not a primary; lock scripts go to primaries only")

// onConnect runs on every new connection: a primary whose process or
// replication history the last Check did not find (a replica promoted, a
// restarted primary, a primary failed back) makes the node untrusted
// until the next Check. A connection to a replica is
// refused: it would serve no lock script, and once its server is
// promoted, a pooled connection would carry lock scripts to a process
// that no check and no new connection judged. go-redis then reads the
// Cluster's routes from another node.
func (c *ClusterNode) onConnect(ctx context.Context, cn *redis.Conn) error {
	info, err := cn.Info(ctx, "server", "replication").Result()
	if err != nil {
		return timedOut(ctx, err)
	}
	if infoString(info, "role") != "master" {
		return errReplicaConn
	}
	_, proc := processOf(info)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ids[proc] {
		c.trusted.Store(false)
		c.unjudged[proc] = true
	}
	return nil
}

// Client is the node's go-redis cluster client (for tests and diagnostics).
func (c *ClusterNode) Client() *redis.ClusterClient { return c.cc }

// String names the node by its first seed address, never with a password.
func (c *ClusterNode) String() string { return c.name }

// Close closes the node's connections and ends its watches.
func (c *ClusterNode) Close() error {
	c.mu.Lock()
	h, rt, shards := c.hub, c.router, c.shards
	c.hub, c.router, c.shards, c.closed = nil, nil, map[string]*redis.Client{}, true
	c.mu.Unlock()
	if h != nil {
		h.close()
	}
	if rt != nil {
		rt.close()
	}
	for _, s := range shards {
		_ = s.Close()
	}
	return c.cc.Close()
}

// noRetryCmd is a script call go-redis must not send again after a lost
// reply (it still follows MOVED and ASK, which mean the script did not
// run).
type noRetryCmd struct{ *redis.Cmd }

func (noRetryCmd) NoRetry() bool { return true }

// notRun reports whether err is a Cluster's answer that the command was
// not run and may be sent again: TRYAGAIN (a multi-key script during its
// slot's migration), MOVED or ASK left after go-redis's redirections,
// CLUSTERDOWN, LOADING, MASTERDOWN, READONLY.
func notRun(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	for _, p := range []string{"TRYAGAIN", "MOVED ", "ASK ", "CLUSTERDOWN", "LOADING", "MASTERDOWN", "READONLY"} {
		if strings.HasPrefix(re.Error(), p) {
			return true
		}
	}
	return false
}

// clusterRetryWait is the pause before a script that was not run (see
// notRun) is sent again: a slot's migration takes milliseconds.
const clusterRetryWait = 2 * time.Millisecond

// evalOnce runs a script by EVALSHA (EVAL on NOSCRIPT, which means it did
// not run), sending it again only while the Cluster answers that it did
// not run (notRun) and ctx lasts.
func (c *ClusterNode) evalOnce(ctx context.Context, s *redis.Script, keys []string, args []any) (any, error) {
	s, err := c.pubScript(ctx, s)
	if err != nil {
		return nil, err
	}
	sha := true
	for attempt := 1; ; attempt++ {
		head := []any{"evalsha", s.Hash()}
		if !sha {
			head = []any{"eval", scriptSource(s)}
		}
		argv := append(head, len(keys))
		for _, k := range keys {
			argv = append(argv, k)
		}
		argv = append(argv, args...)
		cmd := noRetryCmd{redis.NewCmd(ctx, argv...)}
		err := c.cc.Process(ctx, cmd)
		switch {
		case err == nil:
			return cmd.Val(), nil
		case sha && redis.HasErrorPrefix(err, "NOSCRIPT"):
			sha = false
			continue
		case !notRun(err):
			var re redis.Error
			if !errors.As(err, &re) {
				// A dead or unreachable primary: not sent again (the
				// script may have run), but the routes are read again
				// so that the next call finds the replica that takes
				// over, without waiting for the next Check.
				c.cc.ReloadState(ctx)
			}
			return nil, err
		}
		c.resent.Add(1)
		t := time.NewTimer(min(time.Duration(attempt)*clusterRetryWait, 50*time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, errors.Join(ctx.Err(), err)
		case <-t.C:
		}
	}
}

// scriptSources maps a script's hash to its text (redis.Script does not
// give it back).
var scriptSources = func() map[string]string {
	m := map[string]string{}
	for _, src := range []string{guardLua + acquireLua, guardLua + extendLua, guardLua + releaseLua,
		guardLua + handoffLua, guardLua + fenceLua, guardLua + inspectLua, forceLua,
		guardLua + rwLib + rwAcquireLua, guardLua + rwLib + rwExtendLua, guardLua + rwLib + rwReleaseLua,
		guardLua + rwLib + rwRaiseLua, guardLua + rwLib + rwInspectLua} {
		m[redis.NewScript(src).Hash()] = src
	}
	return m
}()

func scriptSource(s *redis.Script) string { return scriptSources[s.Hash()] }

// eval runs a guarded lock script while the node is trusted.
func (c *ClusterNode) eval(ctx context.Context, s *redis.Script, keys []string, args ...any) (any, error) {
	if !c.trusted.Load() {
		return nil, c.outError()
	}
	res, err := c.evalOnce(ctx, s, keys, args)
	if !c.trusted.Load() {
		return nil, c.outError()
	}
	return res, timedOut(ctx, err)
}

// run is eval for a script whose reply is an array of at least want
// integers; a guard's refusal fails with lockcore.ErrQuarantined.
func (c *ClusterNode) run(ctx context.Context, s *redis.Script, keys []string, want int, args ...any) ([]int64, error) {
	res, err := c.eval(ctx, s, keys, args...)
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

// outError is why a lock operation may not use the node now.
func (c *ClusterNode) outError() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refusing != "" {
		return &RefusingError{Reason: c.refusing}
	}
	return lockcore.ErrQuarantined
}

// Acquire implements lockcore.Node with acquire.lua, as Node.Acquire.
func (c *ClusterNode) Acquire(ctx context.Context, req lockcore.NodeAcquire) (lockcore.NodeReply, error) {
	v, err := c.run(ctx, acquireScript, []string{lockKey(req.Resource), tokensKey(req.Resource)}, 2,
		req.Lease, ms(req.TTL), req.Owner, req.Replica, waits(req.Waits))
	if err != nil {
		return lockcore.NodeReply{}, err
	}
	return acquireReply(v), nil
}

// acquireReply maps acquire.lua's reply.
func acquireReply(v []int64) lockcore.NodeReply {
	switch v[0] {
	case 1:
		return lockcore.NodeReply{Status: lockcore.StatusGranted, Token: v[1]}
	case 2:
		return lockcore.NodeReply{Status: lockcore.StatusReentered, Token: v[1]}
	default:
		return lockcore.NodeReply{Status: lockcore.StatusTaken, PTTL: time.Duration(v[1]) * time.Millisecond}
	}
}

// Extend implements lockcore.Node with extend.lua.
func (c *ClusterNode) Extend(ctx context.Context, resource, lease string, ttl time.Duration, ifToken int64) (lockcore.NodeReply, error) {
	v, err := c.run(ctx, extendScript, []string{lockKey(resource), tokensKey(resource)}, 2, lease, ms(ttl), ifToken)
	if err != nil {
		return lockcore.NodeReply{}, err
	}
	return statusReply(v), nil
}

// Release implements lockcore.Node with release.lua. The release is
// published on the lock's shard (SPUBLISH) on Redis 7, else on the
// Cluster's bus (see cluster_pubsub.go).
func (c *ClusterNode) Release(ctx context.Context, resource, lease string, ifToken int64) (lockcore.NodeReply, error) {
	keys := []string{lockKey(resource), tokensKey(resource)}
	v, err := c.run(ctx, releaseScript, keys, 2, lease, ifToken)
	if err != nil {
		return lockcore.NodeReply{}, err
	}
	return releaseReply(v), nil
}

// HandOff implements lockcore.HandOffer with handoff.lua.
func (c *ClusterNode) HandOff(ctx context.Context, lease string, ifToken int64, next lockcore.NodeAcquire) (released, granted lockcore.NodeReply, err error) {
	r := next.Resource
	keys := []string{lockKey(r), tokensKey(r)}
	v, err := c.run(ctx, handoffScript, keys, 5, lease, next.Lease, ms(next.TTL), next.Owner, next.Replica, ifToken)
	if err != nil {
		return lockcore.NodeReply{}, lockcore.NodeReply{}, err
	}
	granted = lockcore.NodeReply{Status: lockcore.StatusAbsent}
	if v[3] == 1 {
		granted = lockcore.NodeReply{Status: lockcore.StatusGranted, Token: v[4]}
	}
	return releaseReply(v[:3]), granted, nil
}

// RaiseFence implements lockcore.Node with fence.lua.
func (c *ClusterNode) RaiseFence(ctx context.Context, resource, lease string, token int64) error {
	_, err := c.run(ctx, fenceScript, []string{lockKey(resource), tokensKey(resource)}, 2, strconv.FormatInt(token, 10), lease)
	return err
}

// Inspect implements lockcore.Node with inspect.lua.
func (c *ClusterNode) Inspect(ctx context.Context, resource string) (lockcore.NodeLock, error) {
	res, err := c.eval(ctx, inspectScript, []string{lockKey(resource), tokensKey(resource)})
	if err != nil {
		return lockcore.NodeLock{}, err
	}
	return inspectReply(res)
}

// Ping implements lockcore.Node: every primary must answer.
func (c *ClusterNode) Ping(ctx context.Context) error {
	return timedOut(ctx, c.cc.ForEachMaster(ctx, func(ctx context.Context, s *redis.Client) error {
		return s.Ping(ctx).Err()
	}))
}

// BreakLock implements lockcore.ForceReleaser with force.lua.
func (c *ClusterNode) BreakLock(ctx context.Context, resource, lease string, ttl time.Duration) (broken, counter int64, err error) {
	v, err := c.run(ctx, forceScript, []string{lockKey(resource), tokensKey(resource)}, 2, lease, strconv.FormatInt(ttl.Milliseconds(), 10))
	if err != nil {
		return 0, 0, err
	}
	return v[0], v[1], nil
}

// idSet is the record's name for a set of primaries: each one's run id
// and replication id (processOf's proc), sorted, joined by commas.
func idSet(ids map[string]bool) string {
	out := make([]string, 0, len(ids))
	for id := range ids {
		out = append(out, id)
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}
