// Package redisnode is a lockcore.Node on one Redis master (go-redis v9).
//
// Each operation is one Lua script, loaded once and run with EVALSHA (EVAL on
// NOSCRIPT). Keys carry a hash tag around the resource,
// lockgate:{resource}:lock and lockgate:{resource}:fence, so that a node can
// later be a Redis Cluster: a script only touches keys of one slot.
//
// Releases are announced by pub/sub: the release script publishes on the
// resource's channel lockgate:{resource}:released in the same atomic step as
// the DEL of the lock (the payload, the released token in decimal, is not
// secret and watchers ignore it). A hand-off (handoff.lua) passes the lock
// from its holder to the next waiter of the same gateway replica in one step
// and publishes nothing, since the lock was never free; when it may not pass
// the lock on it releases and publishes as the release script does.
//
// Watches share one pub/sub connection per node (see hub.go). A release
// published while that connection is down is never delivered, so once
// go-redis has made a new one and subscribed again, every standing watch is
// notified as if a release had been heard. Watch never waits longer than its
// context, even while go-redis redials an unreachable node.
//
// The fencing counter lockgate:{resource}:fence never expires. Run every node
// with maxmemory-policy noeviction and AOF persistence (appendfsync always),
// and never give a node replicas that can fail over: see package lockcore.
package redisnode

import (
	"context"
	_ "embed"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/lockgate/lockgate/lockcore"
)

// The node scripts. Their header comments give KEYS, ARGV and replies.
var (
	//go:embed acquire.lua
	acquireLua    string
	acquireScript = redis.NewScript(acquireLua)
	//go:embed extend.lua
	extendLua    string
	extendScript = redis.NewScript(extendLua)
	//go:embed release.lua
	releaseLua    string
	releaseScript = redis.NewScript(releaseLua)
	//go:embed handoff.lua
	handoffLua    string
	handoffScript = redis.NewScript(handoffLua)
	//go:embed fence.lua
	fenceLua    string
	fenceScript = redis.NewScript(fenceLua)
	//go:embed inspect.lua
	inspectLua    string
	inspectScript = redis.NewScript(inspectLua)
)

func lockKey(resource string) string     { return "lockgate:{" + resource + "}:lock" }
func fenceKey(resource string) string    { return "lockgate:{" + resource + "}:fence" }
func releasedKey(resource string) string { return "lockgate:{" + resource + "}:released" }

// Node is a lockcore.Node backed by one Redis master. It is safe for
// concurrent use.
type Node struct {
	rdb  *redis.Client
	name string

	mu     sync.Mutex
	hub    *hub // made by the first Watch
	closed bool
}

var (
	_ lockcore.Node      = (*Node)(nil)
	_ lockcore.Watcher   = (*Node)(nil)
	_ lockcore.HandOffer = (*Node)(nil)
)

// New returns a node for the Redis server at rawURL: redis://[user:pass@]host:port[/db]
// or rediss:// for TLS. It does not connect; use Ping to check. It fails
// only when the URL is malformed.
func New(rawURL string) (*Node, error) {
	opt, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redisnode: bad Redis URL: %w", err)
	}
	name := opt.Addr
	// Timeouts come from each call's context (lockcore bounds every node
	// call); one retry covers a pooled connection that died with a restart.
	opt.ContextTimeoutEnabled = true
	opt.MaxRetries = 1
	// A refused dial is an answer: the node is down. go-redis would retry it
	// 5 times, 100ms apart, which turns a dead node into a slow one.
	opt.DialerRetries = 1
	// The one retry runs at once: go-redis would first wait 10 to 30 ms,
	// which a dead node (dial refused twice) would add to every call.
	opt.MinRetryBackoff, opt.MaxRetryBackoff = -1, -1
	opt.DisableIdentity = true
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return &Node{rdb: redis.NewClient(opt), name: name}, nil
}

// Client is the node's go-redis client (for tests and diagnostics).
func (n *Node) Client() *redis.Client { return n.rdb }

// String names the node by host:port, never with its password.
func (n *Node) String() string { return n.name }

// Close closes the node's connections and ends its watches. The pub/sub
// connection is closed in the background (see hub.close).
func (n *Node) Close() error {
	n.mu.Lock()
	h := n.hub
	n.hub, n.closed = nil, true
	n.mu.Unlock()
	if h != nil {
		h.close()
	}
	return n.rdb.Close()
}

func ints(v any, want int) ([]int64, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) < want {
		return nil, fmt.Errorf("redisnode: unexpected script reply of type %T", v)
	}
	out := make([]int64, len(arr))
	for i, x := range arr {
		n, ok := x.(int64)
		if !ok {
			return nil, fmt.Errorf("redisnode: unexpected script reply of type %T", v)
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

// statusReply maps the {-1|0|1, value} reply of extend and release.
func statusReply(v []int64) lockcore.NodeReply {
	switch v[0] {
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
	v, err := n.run(ctx, acquireScript, []string{lockKey(req.Resource), fenceKey(req.Resource)}, 2,
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

// Extend implements lockcore.Node with extend.lua.
func (n *Node) Extend(ctx context.Context, resource, lease string, ttl time.Duration) (lockcore.NodeReply, error) {
	v, err := n.run(ctx, extendScript, []string{lockKey(resource)}, 2, lease, ms(ttl))
	if err != nil {
		return lockcore.NodeReply{}, err
	}
	return statusReply(v), nil
}

// Release implements lockcore.Node with release.lua.
func (n *Node) Release(ctx context.Context, resource, lease string) (lockcore.NodeReply, error) {
	v, err := n.run(ctx, releaseScript, []string{lockKey(resource), releasedKey(resource)}, 2, lease)
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
func (n *Node) HandOff(ctx context.Context, lease string, next lockcore.NodeAcquire) (released, granted lockcore.NodeReply, err error) {
	r := next.Resource
	v, err := n.run(ctx, handoffScript, []string{lockKey(r), fenceKey(r), releasedKey(r)}, 5,
		lease, next.Lease, ms(next.TTL), next.Owner, next.Replica)
	if err != nil {
		return lockcore.NodeReply{}, lockcore.NodeReply{}, err
	}
	granted = lockcore.NodeReply{Status: lockcore.StatusAbsent}
	if v[3] == 1 {
		granted = lockcore.NodeReply{Status: lockcore.StatusGranted, Token: v[4]}
	}
	return releaseReply(v[:3]), granted, nil
}

// run runs a script whose reply is an array of at least want integers.
func (n *Node) run(ctx context.Context, s *redis.Script, keys []string, want int, args ...any) ([]int64, error) {
	res, err := s.Run(ctx, n.rdb, keys, args...).Result()
	if err != nil {
		return nil, err
	}
	return ints(res, want)
}

// RaiseFence implements lockcore.Node with fence.lua.
func (n *Node) RaiseFence(ctx context.Context, resource, lease string, token int64) error {
	return fenceScript.Run(ctx, n.rdb, []string{lockKey(resource), fenceKey(resource)}, token, lease).Err()
}

// Inspect implements lockcore.Node with inspect.lua.
func (n *Node) Inspect(ctx context.Context, resource string) (lockcore.NodeLock, error) {
	res, err := inspectScript.Run(ctx, n.rdb, []string{lockKey(resource)}).Result()
	if err != nil {
		return lockcore.NodeLock{}, err
	}
	arr, ok := res.([]any)
	if !ok {
		return lockcore.NodeLock{}, fmt.Errorf("redisnode: unexpected inspect reply of type %T", res)
	}
	if len(arr) == 0 {
		return lockcore.NodeLock{}, nil
	}
	if len(arr) != 5 {
		return lockcore.NodeLock{}, fmt.Errorf("redisnode: unexpected inspect reply of type %T", res)
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
func (n *Node) Ping(ctx context.Context) error { return n.rdb.Ping(ctx).Err() }
