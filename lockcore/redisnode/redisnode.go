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
// Watches share one pub/sub connection per node. A release published while
// that connection is down is not heard; waiters then learn it from the lock's
// TTL or from other nodes. Watch never waits longer than its context, even
// while go-redis redials an unreachable node (see hub).
//
// The fencing counter lockgate:{resource}:fence never expires. Run every node
// with maxmemory-policy noeviction and AOF persistence (appendfsync always),
// and never give a node replicas that can fail over: see package lockcore.
package redisnode

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
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

	mu  sync.Mutex
	hub *hub
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
	n.hub = nil
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

// hub multiplexes all of a node's watches over one pub/sub connection: one
// Redis subscription per resource, however many waiters it has.
//
// SUBSCRIBE and UNSUBSCRIBE are sent by one goroutine (send), in the order
// the watches decided them, so a SUBSCRIBE of a new first watch is never
// overtaken by the UNSUBSCRIBE of the last old one. Callers never wait for
// go-redis's pub/sub lock: its receive loop holds that lock while it dials a
// lost connection again, with no deadline but go-redis's dial timeout, and a
// node whose host drops packets would hold every Watch and stop there for
// seconds. Watch waits for Redis's confirmation or its context, whichever
// comes first; stop only queues the UNSUBSCRIBE.
type hub struct {
	ps *redis.PubSub

	mu       sync.Mutex
	watchers map[string]map[*watch]struct{} // channel → watches
	subs     map[string]*hubSub             // channel → its watches' SUBSCRIBE
	pending  map[string][]*hubSub           // channel → SUBSCRIBEs not yet confirmed
	queue    []hubCmd                       // for send, in decision order
	queued   chan struct{}                  // a token when queue is not empty
	done     chan struct{}                  // closed by Close: send stops
}

// hubCmd is one SUBSCRIBE (sub is its entry in hub.pending) or, with sub
// nil, UNSUBSCRIBE for send to carry out.
type hubCmd struct {
	channel string
	sub     *hubSub
}

// hubSub is a SUBSCRIBE sent or to be sent. done is closed once Redis has
// confirmed it (err nil) or it failed (err set before done is closed, both
// under hub.mu).
type hubSub struct {
	done chan struct{}
	err  error
}

// failed reports whether s failed. hub.mu must be held.
func (s *hubSub) failed() bool {
	select {
	case <-s.done:
		return s.err != nil
	default:
		return false
	}
}

type watch struct{ notify func() }

// hubCmdTimeout bounds one SUBSCRIBE or UNSUBSCRIBE in send. A Watch gives
// up sooner, on its own context; this only keeps send from being stuck.
const hubCmdTimeout = 5 * time.Second

func (n *Node) getHub() *hub {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.hub == nil {
		h := &hub{
			ps:       n.rdb.Subscribe(context.Background()),
			watchers: map[string]map[*watch]struct{}{},
			subs:     map[string]*hubSub{},
			pending:  map[string][]*hubSub{},
			queued:   make(chan struct{}, 1),
			done:     make(chan struct{}),
		}
		go h.run(h.ps.ChannelWithSubscriptions(redis.WithChannelSize(1024)))
		go h.send()
		n.hub = h
	}
	return n.hub
}

// close ends send and, in the background, the pub/sub connection: go-redis
// holds that connection's lock while it dials an unreachable node again, for
// up to its dial timeout, and Close should not wait for that.
func (h *hub) close() {
	close(h.done)
	go func() { _ = h.ps.Close() }()
}

func (h *hub) run(ch <-chan any) {
	for msg := range ch {
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind != "subscribe" {
				continue
			}
			h.mu.Lock()
			// Redis confirms SUBSCRIBEs in the order they were sent.
			if p := h.pending[m.Channel]; len(p) > 0 {
				close(p[0].done)
				h.pending[m.Channel] = p[1:]
			}
			h.mu.Unlock()
		case *redis.Message:
			h.mu.Lock()
			for w := range h.watchers[m.Channel] {
				w.notify()
			}
			h.mu.Unlock()
		}
	}
}

// enqueue queues c for send. h.mu must be held.
func (h *hub) enqueue(c hubCmd) {
	h.queue = append(h.queue, c)
	select {
	case h.queued <- struct{}{}:
	default:
	}
}

// send carries out the queued commands one by one, in order. A SUBSCRIBE
// that fails is taken out of pending and its Watch told at once.
func (h *hub) send() {
	for {
		select {
		case <-h.done:
			return
		case <-h.queued:
		}
		for {
			h.mu.Lock()
			if len(h.queue) == 0 {
				h.mu.Unlock()
				break
			}
			c := h.queue[0]
			h.queue = h.queue[1:]
			h.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), hubCmdTimeout)
			if c.sub == nil {
				_ = h.ps.Unsubscribe(ctx, c.channel)
				cancel()
				continue
			}
			err := h.ps.Subscribe(ctx, c.channel)
			cancel()
			if err != nil {
				h.mu.Lock()
				if p := h.pending[c.channel]; slices.Contains(p, c.sub) {
					h.pending[c.channel] = slices.DeleteFunc(p, func(x *hubSub) bool { return x == c.sub })
					c.sub.err = err
					close(c.sub.done)
				}
				h.mu.Unlock()
			}
		}
	}
}

// Watch implements lockcore.Watcher: it returns once Redis has confirmed the
// subscription to the resource's release channel, or with an error when it
// failed or ctx ended first. notify is called from the node's pub/sub
// goroutine, once per message published on that channel.
func (n *Node) Watch(ctx context.Context, resource string, notify func()) (func(), error) {
	h := n.getHub()
	channel := releasedKey(resource)
	w := &watch{notify: notify}

	h.mu.Lock()
	if h.watchers[channel] == nil {
		h.watchers[channel] = map[*watch]struct{}{}
	}
	h.watchers[channel][w] = struct{}{}
	sub := h.subs[channel]
	if sub == nil || sub.failed() {
		// The first watch, or the others' SUBSCRIBE failed: send one.
		sub = &hubSub{done: make(chan struct{})}
		h.subs[channel] = sub
		h.pending[channel] = append(h.pending[channel], sub)
		h.enqueue(hubCmd{channel: channel, sub: sub})
	}
	h.mu.Unlock()

	var once sync.Once
	stop := func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			delete(h.watchers[channel], w)
			if len(h.watchers[channel]) == 0 {
				delete(h.watchers, channel)
				delete(h.subs, channel)
				h.enqueue(hubCmd{channel: channel})
			}
		})
	}
	select {
	case <-sub.done:
		if sub.err == nil {
			return stop, nil
		}
		stop()
		return nil, sub.err
	case <-ctx.Done():
		stop()
		return nil, errors.Join(ctx.Err(), errors.New("redisnode: subscription not confirmed"))
	}
}
