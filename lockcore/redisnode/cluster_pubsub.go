package redisnode

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/lockcore"
)

// How a Cluster node's scripts announce releases and grants, and how its
// watches hear them.
//
// On a Cluster whose primaries all run Redis 7 or later, the scripts
// publish with SPUBLISH (sharded Pub/Sub): a message stays on the shard
// that owns its channel's slot, which is the slot of the lock's key (same
// hash tag), and watches subscribe with SSUBSCRIBE on that shard's primary
// (shardRouter). On an older Cluster the scripts publish with PUBLISH,
// which the Cluster's bus copies to every node, and one pub/sub connection
// to any node hears them all (the hub of getHub). The choice is made once
// per ClusterNode, from the primaries' versions, by its first Check (or
// first script or watch, if earlier), and kept: scripts and watches of one
// gateway always agree. Gateways that chose differently (a Cluster
// upgraded to Redis 7 while some ran) do not hear each other's
// announcements, and their waiters fall back to polling until they are
// restarted.
const (
	pubUnknown int32 = iota
	pubSharded
	pubBroadcast
)

// shardedScripts maps the hash of each script that publishes to its
// variant that publishes with SPUBLISH. The variant calls it with
// redis.pcall: the publish comes after the script's writes, which Redis
// does not undo, so a primary that cannot run it (a Redis 6 replica
// promoted after the mode was chosen) must not turn a done change into an
// error; the announcement is lost and waiters find the change by polling.
var shardedScripts = func() map[string]*redis.Script {
	m := map[string]*redis.Script{}
	for _, src := range scriptSources {
		if strings.Contains(src, "redis.call('PUBLISH'") {
			sh := strings.ReplaceAll(src, "redis.call('PUBLISH'", "redis.pcall('SPUBLISH'")
			m[redis.NewScript(src).Hash()] = redis.NewScript(sh)
			scriptSources[redis.NewScript(sh).Hash()] = sh
		}
	}
	return m
}()

// pubScript is s as this node runs it: its SPUBLISH variant when the node
// uses sharded Pub/Sub.
func (c *ClusterNode) pubScript(ctx context.Context, s *redis.Script) (*redis.Script, error) {
	sharded, err := c.shardedPubSub(ctx)
	if err != nil {
		return nil, err
	}
	if v := shardedScripts[s.Hash()]; sharded && v != nil {
		return v, nil
	}
	return s, nil
}

// shardedPubSub reports whether the node uses sharded Pub/Sub. The first
// Check that probes every primary chooses (from their versions); a script
// or watch before that reads the versions itself.
func (c *ClusterNode) shardedPubSub(ctx context.Context) (bool, error) {
	if m := c.pubMode.Load(); m != pubUnknown {
		return m == pubSharded, nil
	}
	var old atomic.Bool // a primary without sharded Pub/Sub
	err := c.cc.ForEachMaster(ctx, func(ctx context.Context, s *redis.Client) error {
		info, err := s.Info(ctx, "server").Result()
		if err == nil && !shardedPubSubVersion(infoString(info, "redis_version")) {
			old.Store(true)
		}
		return err
	})
	if err != nil {
		return false, timedOut(ctx, err)
	}
	c.pubMode.CompareAndSwap(pubUnknown, pubModeFor(!old.Load()))
	return c.pubMode.Load() == pubSharded, nil
}

// pubModeFor is the mode of a node whose primaries all have sharded
// Pub/Sub (sharded) or not.
func pubModeFor(sharded bool) int32 {
	if sharded {
		return pubSharded
	}
	return pubBroadcast
}

// shardedPubSubVersion reports whether a Redis version (INFO's
// redis_version) has sharded Pub/Sub: 7.0 or later.
func shardedPubSubVersion(v string) bool {
	major, _, _ := strings.Cut(v, ".")
	n, err := strconv.Atoi(major)
	return err == nil && n >= 7
}

// Watch implements lockcore.Watcher for a Cluster (see cluster_pubsub.go for how
// releases reach it). It returns once the subscription is confirmed on
// the server that will hear the release; a lost connection, or a slot
// that moves to another shard, is followed and the watch notified once it
// is subscribed again, as for Node.
func (c *ClusterNode) Watch(ctx context.Context, resource string, notify func()) (func(), error) {
	return c.watchChannel(ctx, resource, releasedKey(resource), notify)
}

// WatchAcquired implements lockcore.AcquireWatcher as Watch does, on the
// resource's grant channel.
func (c *ClusterNode) WatchAcquired(ctx context.Context, resource string, notify func()) (func(), error) {
	return c.watchChannel(ctx, resource, acquiredKey(resource), notify)
}

// watchChannel subscribes notify to channel, one of resource's.
func (c *ClusterNode) watchChannel(ctx context.Context, resource, channel string, notify func()) (func(), error) {
	sharded, err := c.shardedPubSub(ctx)
	if err != nil {
		return nil, err
	}
	if sharded {
		r := c.getRouter()
		if r == nil {
			return nil, errNodeClosed
		}
		return r.watch(ctx, lockcore.FenceSlot(resource), channel, notify)
	}
	h := c.getHub()
	if h == nil {
		return nil, errNodeClosed
	}
	return h.watch(ctx, channel, notify)
}

// getHub returns the node's hub for PUBLISH announcements, made on first
// use, or nil once the node is closed.
func (c *ClusterNode) getHub() *hub {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	if c.hub == nil {
		c.hub = newHub(c.cc.Subscribe(context.Background()), false, nil)
	}
	return c.hub
}

// getRouter returns the node's shardRouter, made on first use, or nil
// once the node is closed.
func (c *ClusterNode) getRouter() *shardRouter {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	if c.router == nil {
		c.router = &shardRouter{c: c, hubs: map[string]*shardHub{}, watches: map[string]map[*routed]struct{}{}, moving: map[string]int{}}
	}
	return c.router
}

// shardSubscribeWait bounds how long a sharded subscription waits for its
// confirmation: one sent to a primary that no longer serves the slot is
// refused (MOVED) and never confirmed.
const shardSubscribeWait = 2 * time.Second

// shardRouter keeps a Cluster node's sharded watches on the primaries that
// serve their channels' slots: one hub, over one pub/sub connection, per
// primary. A watch moves to another primary when its slot does:
//   - the primary ends the subscription itself when the slot leaves it
//     (the hub's lost callback);
//   - a Check finds another primary serving the slot (reconcile), for
//     example after a failover, where the old primary is gone.
//
// A moved watch is notified once its new subscription is confirmed, since
// a message may have been missed in between.
type shardRouter struct {
	c *ClusterNode

	mu      sync.Mutex
	hubs    map[string]*shardHub            // by primary address
	watches map[string]map[*routed]struct{} // by channel
	moving  map[string]int                  // channels a move runs for: moveRunning or moveAgain
	closed  bool
}

// shardHub is one primary's hub and the client of its connection.
type shardHub struct {
	client *redis.Client
	conns  atomic.Int32 // connections made: more than one is a reconnect
	users  int          // subscribes under way (guarded by shardRouter.mu)
	// h is the hub, atomic since the connection hook may run before it
	// is set.
	h atomic.Pointer[hub]
}

// routed is one watch of a sharded channel. addr, stop and lost are
// guarded by shardRouter.mu.
type routed struct {
	slot    int
	channel string
	notify  func()
	addr    string // the primary whose hub holds it
	stop    func() // ends it on that hub
	lost    bool   // the hub's subscription was ended by the server
}

// owner returns the address of the primary that serves slot, as go-redis's
// routes say (the cluster client follows MOVED and reads the routes again).
func (r *shardRouter) owner(ctx context.Context, slot int) (string, error) {
	s, err := r.c.cc.MasterForKey(ctx, "lockgate:{"+lockcore.SlotTag(slot)+"}")
	if err != nil {
		return "", timedOut(ctx, err)
	}
	return s.Options().Addr, nil
}

// hub returns the hub of the primary at addr, made on first use, or nil
// once the router is closed. r.mu must be held.
func (r *shardRouter) hub(addr string) *shardHub {
	if r.closed {
		return nil
	}
	if sh := r.hubs[addr]; sh != nil {
		return sh
	}
	sh := &shardHub{}
	o := r.c.opt
	sh.client = redis.NewClient(&redis.Options{Addr: addr, Username: o.Username, Password: o.Password,
		TLSConfig: o.TLSConfig, DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout,
		DisableIdentity: true, PoolSize: 1,
		OnConnect: func(ctx context.Context, cn *redis.Conn) error {
			if err := r.c.onConnect(ctx, cn); err != nil {
				return err
			}
			if h := sh.h.Load(); sh.conns.Add(1) > 1 && h != nil {
				h.reconnected()
			}
			return nil
		}})
	sh.h.Store(newHub(sh.client.SSubscribe(context.Background()), true, func(channel string) { r.lose(addr, channel) }))
	r.hubs[addr] = sh
	return sh
}

// subscribe subscribes notify to channel on the hub of the primary at
// addr, waiting at most shardSubscribeWait for the confirmation.
func (r *shardRouter) subscribe(ctx context.Context, addr, channel string, notify func()) (func(), *hub, error) {
	r.mu.Lock()
	sh := r.hub(addr)
	if sh != nil {
		sh.users++ // reconcile leaves it open meanwhile
	}
	r.mu.Unlock()
	if sh == nil {
		return nil, nil, errNodeClosed
	}
	ctx, cancel := context.WithTimeout(ctx, shardSubscribeWait)
	defer cancel()
	h := sh.h.Load()
	stop, err := h.watch(ctx, channel, notify)
	r.mu.Lock()
	sh.users--
	r.mu.Unlock()
	if err != nil {
		r.c.cc.ReloadState(context.Background()) // the routes may be stale
	}
	return stop, h, err
}

// watch subscribes notify to channel, of slot, on the primary that serves
// the slot.
func (r *shardRouter) watch(ctx context.Context, slot int, channel string, notify func()) (func(), error) {
	addr, err := r.owner(ctx, slot)
	if err != nil {
		return nil, err
	}
	stop, h, err := r.subscribe(ctx, addr, channel, notify)
	if err != nil {
		return nil, err
	}
	w := &routed{slot: slot, channel: channel, notify: notify, addr: addr, stop: stop}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		stop()
		return nil, errNodeClosed
	}
	if r.watches[channel] == nil {
		r.watches[channel] = map[*routed]struct{}{}
	}
	r.watches[channel][w] = struct{}{}
	// The primary may have ended the subscription (its slot left) after
	// it was confirmed and before w was recorded, when lose could not
	// find w.
	w.lost = !h.holds(channel)
	r.mu.Unlock()
	if w.lost {
		go r.move(channel)
	}
	var once sync.Once
	return func() { once.Do(func() { r.remove(w) }) }, nil
}

// remove ends w.
func (r *shardRouter) remove(w *routed) {
	r.mu.Lock()
	stop := w.stop
	w.stop = nil
	if ws := r.watches[w.channel]; ws != nil {
		delete(ws, w)
		if len(ws) == 0 {
			delete(r.watches, w.channel)
		}
	}
	r.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// lose is the hub's lost callback: the primary at addr ended channel's
// subscription, so its watches there move.
func (r *shardRouter) lose(addr, channel string) {
	r.mu.Lock()
	for w := range r.watches[channel] {
		if w.addr == addr {
			w.lost = true
		}
	}
	r.mu.Unlock()
	r.move(channel)
}

// reconcile moves every watch whose slot another primary serves, in the
// slot map slots, than the one it is subscribed on. It closes
// the hubs of addresses that serve no slot and hold no watch.
func (r *shardRouter) reconcile(slots []redis.ClusterSlot, primaries []string) {
	r.mu.Lock()
	var stale []string
	for channel, ws := range r.watches {
		for w := range ws {
			if w.addr != slotOwner(slots, w.slot) {
				stale = append(stale, channel)
				break
			}
		}
	}
	var idle []*shardHub
	for addr, sh := range r.hubs {
		if !slices.Contains(primaries, addr) && !r.holds(addr) && sh.users == 0 && sh.h.Load().idle() {
			idle = append(idle, sh)
			delete(r.hubs, addr)
		}
	}
	r.mu.Unlock()
	for _, sh := range idle {
		sh.close()
	}
	for _, channel := range stale {
		go r.move(channel)
	}
}

// holds reports whether a watch is on the hub at addr. r.mu must be held.
func (r *shardRouter) holds(addr string) bool {
	for _, ws := range r.watches {
		for w := range ws {
			if w.addr == addr {
				return true
			}
		}
	}
	return false
}

// slotOwner returns the address of the primary that serves slot in a
// slot map (CLUSTER SLOTS), or "" when none does.
func slotOwner(slots []redis.ClusterSlot, slot int) string {
	for _, s := range slots {
		if s.Start <= slot && slot <= s.End && len(s.Nodes) > 0 {
			return s.Nodes[0].Addr
		}
	}
	return ""
}

// What shardRouter.moving holds for a channel.
const (
	moveRunning = 1 // a move runs
	moveAgain   = 2 // a move runs and must look again once done
)

// move subscribes channel's watches that lost their subscription, or are
// on another primary than the one serving their slot now, on that
// primary, and notifies each once it is. It tries again, pausing longer
// each time (at most a second), while such watches are left and the
// router is open; one move per channel runs at a time.
func (r *shardRouter) move(channel string) {
	r.mu.Lock()
	if r.closed || r.moving[channel] != 0 {
		if !r.closed {
			// The running move may have looked already: it looks again.
			r.moving[channel] = moveAgain
		}
		r.mu.Unlock()
		return
	}
	r.moving[channel] = moveRunning
	r.mu.Unlock()
	pause := 10 * time.Millisecond
	for {
		for !r.moveOnce(channel) {
			time.Sleep(pause)
			pause = min(2*pause, time.Second)
		}
		r.mu.Lock()
		again := r.moving[channel] == moveAgain
		if again {
			r.moving[channel] = moveRunning
		} else {
			delete(r.moving, channel)
		}
		r.mu.Unlock()
		if !again {
			return
		}
	}
}

// moveOnce is one try of move; it reports whether nothing is left to move.
func (r *shardRouter) moveOnce(channel string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), shardSubscribeWait)
	defer cancel()
	r.mu.Lock()
	var todo []*routed
	for w := range r.watches[channel] {
		todo = append(todo, w)
	}
	closed := r.closed
	r.mu.Unlock()
	if closed || len(todo) == 0 {
		return true
	}
	// The routes are read from the Cluster, not go-redis's copy: that may
	// still name the primary the slot just left.
	slots, err := r.c.slotMap(ctx)
	addr := slotOwner(slots, todo[0].slot)
	if err != nil || addr == "" {
		return false
	}
	for _, w := range todo {
		if !r.moveTo(ctx, w, addr) {
			return false
		}
	}
	return true
}

// moveTo subscribes w on the primary at addr, unless it is subscribed
// there already, ends its old subscription and notifies it; it reports
// false when the subscription failed.
func (r *shardRouter) moveTo(ctx context.Context, w *routed, addr string) bool {
	r.mu.Lock()
	settled := !w.lost && w.addr == addr
	r.mu.Unlock()
	if settled {
		return true
	}
	stop, _, err := r.subscribe(ctx, addr, w.channel, w.notify)
	if err != nil {
		return false
	}
	r.mu.Lock()
	old := w.stop
	_, open := r.watches[w.channel][w]
	if open {
		w.addr, w.stop, w.lost = addr, stop, false
	}
	r.mu.Unlock()
	if !open {
		stop()
		return true
	}
	if old != nil {
		old()
	}
	w.notify()
	return true
}

// close ends the hub and its connection.
func (sh *shardHub) close() {
	sh.h.Load().close()
	go func() { _ = sh.client.Close() }()
}

// close ends every hub; the watches left fail no call, they are only no
// longer notified.
func (r *shardRouter) close() {
	r.mu.Lock()
	hubs := r.hubs
	r.hubs, r.closed = map[string]*shardHub{}, true
	r.mu.Unlock()
	for _, sh := range hubs {
		sh.close()
	}
}
