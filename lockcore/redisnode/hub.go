package redisnode

import (
	"context"
	"errors"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/lockcore"
)

// hub multiplexes all of a node's watches over one pub/sub connection: one
// Redis subscription per channel (a resource's release or grant channel),
// however many watches it has.
//
// Callers never wait for go-redis's pub/sub lock. go-redis's receive loop
// holds that lock while it dials a lost connection again, bounded only by
// go-redis's dial timeout (5 s), so a node whose host drops packets would
// hold every SUBSCRIBE and UNSUBSCRIBE for seconds. Watch and stop only
// record what they want (channel state) and mark the channel dirty; one
// goroutine (send) brings the connection in line, channel by channel, with
// what is wanted when it gets to it. A channel dirtied many times while send
// is held up is sent for once, so the work waiting never exceeds one entry
// per channel.
//
// Each SUBSCRIBE carries a marker channel of its own next to the resource
// channel. Redis runs the command whole, so the marker's confirmation proves
// the resource channel is subscribed from then on, whatever other
// confirmations the connection sees (go-redis subscribes every channel it
// knows again after a reconnect). The marker is unsubscribed right after.
// A SUBSCRIBE whose reply is lost with its connection is never confirmed:
// the watches waiting for it give up on their contexts, and once the last
// has left, the next watch sends a new one.
type hub struct {
	ps *redis.PubSub
	// sharded: the channels are shard channels (SSUBSCRIBE, see
	// shardRouter), each SSUBSCRIBE naming channels of one slot.
	sharded bool
	// lost, when not nil, is told of a channel whose confirmed
	// subscription the server ended by itself (a sharded channel whose slot
	// left the server); it runs on its own goroutine.
	lost func(channel string)

	mu     sync.Mutex
	chans  map[string]*hubChan // resource channel → state
	subs   map[string]*hubSub  // marker channel → SUBSCRIBE awaiting it
	dirty  []string            // channels for send to look at, each once
	queued chan struct{}       // a token when dirty is not empty
	done   chan struct{}       // closed by close
	seq    uint64              // marker numbers
}

// hubChan is one resource channel: the watches that want it, whether the
// connection was last told to subscribe to it, and the SUBSCRIBE whose
// confirmation the watches wait for.
type hubChan struct {
	watches    map[*watch]struct{}
	subscribed bool    // the last command sent for it was a SUBSCRIBE
	sub        *hubSub // what the current watches rely on; nil once the last left
	isDirty    bool    // in hub.dirty
}

// hubSub is one SUBSCRIBE. done is closed once Redis has confirmed it (err
// nil) or it failed (err set first); both happen under hub.mu.
type hubSub struct {
	marker string
	sent   bool
	done   chan struct{}
	err    error
	// renotify: the SUBSCRIBE is sent again for watches already subscribed
	// (see reconnected); its confirmation notifies them.
	renotify bool
	channel  string
}

type watch struct{ notify func() }

// failed reports whether s failed. hub.mu must be held.
func (s *hubSub) failed() bool {
	select {
	case <-s.done:
		return s.err != nil
	default:
		return false
	}
}

// confirmed reports whether Redis confirmed s. hub.mu must be held.
func (s *hubSub) confirmed() bool {
	select {
	case <-s.done:
		return s.err == nil
	default:
		return false
	}
}

var errNodeClosed = errors.New("redisnode: node closed")

// getHub returns the node's hub, made on first use, or nil once the node is
// closed.
func (n *Node) getHub() *hub {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	if n.hub == nil {
		n.hub = newHub(n.rdb.Subscribe(context.Background()), false, nil)
	}
	return n.hub
}

// newHub starts a hub on the pub/sub connection ps, of shard channels
// when sharded; lost is as for hub.lost.
func newHub(ps *redis.PubSub, sharded bool, lost func(channel string)) *hub {
	h := &hub{
		ps:      ps,
		sharded: sharded,
		lost:    lost,
		chans:   map[string]*hubChan{},
		subs:    map[string]*hubSub{},
		queued:  make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
	go h.run(h.ps.ChannelWithSubscriptions(redis.WithChannelSize(1024)))
	go h.send()
	return h
}

// close ends send, fails the watches still waiting, and closes the pub/sub
// connection in the background: go-redis may be holding it while it dials an
// unreachable node, for up to its dial timeout.
func (h *hub) close() {
	close(h.done)
	go func() { _ = h.ps.Close() }()
}

// run reads the pub/sub connection: marker confirmations end the SUBSCRIBEs
// waiting for them, messages go to the channel's watches.
//
// A confirmation of a resource channel whose watches are already subscribed
// comes from go-redis subscribing again after it lost the connection and
// made a new one. A release published in between was never delivered, so
// those watches are notified then, as if one had been: a waiter that wakes
// for nothing only tries once more.
func (h *hub) run(ch <-chan any) {
	for msg := range ch {
		switch m := msg.(type) {
		case *redis.Subscription:
			switch m.Kind {
			case "subscribe", "ssubscribe":
				h.onSubscribed(m.Channel)
			case "sunsubscribe":
				h.onUnsubscribed(m.Channel)
			}
		case *redis.Message:
			h.mu.Lock()
			if c := h.chans[m.Channel]; c != nil {
				c.notifyAll()
			}
			h.mu.Unlock()
		}
	}
}

// onSubscribed handles Redis's confirmation that channel is subscribed: a
// marker's ends its SUBSCRIBE; a resource channel's, once its watches are
// already subscribed, notifies them (see run).
func (h *hub) onSubscribed(channel string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.subs[channel]; s != nil {
		delete(h.subs, channel)
		close(s.done)
		if c := h.chans[s.channel]; s.renotify && c != nil && c.sub == s {
			c.notifyAll()
		}
		return
	}
	if c := h.chans[channel]; c != nil && c.sub != nil && c.sub.confirmed() {
		c.notifyAll()
	}
}

// onUnsubscribed handles a sharded channel's SUNSUBSCRIBE confirmation.
// One that send did not ask for, of a channel whose watches' subscription
// was confirmed, comes from the server: the channel's slot left it (a
// reshard or a failover), and no message of the channel will come here.
// The hub's lost callback moves the watches to the slot's new server.
func (h *hub) onUnsubscribed(channel string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.chans[channel]
	if c == nil || !c.subscribed || len(c.watches) == 0 || c.sub == nil || !c.sub.confirmed() || h.lost == nil {
		return
	}
	// The next watch here (the slot may come back) subscribes afresh.
	c.sub, c.subscribed = nil, false
	go h.lost(channel)
}

// reconnected is told that the pub/sub connection was made again. go-redis
// subscribes every channel it knows again in one command, which a Cluster
// refuses (CROSSSLOT) for shard channels of several slots; so each
// channel watched is subscribed again here, one slot at a time, and its
// watches are notified once that is confirmed (a message may have been
// missed meanwhile). A SUBSCRIBE not yet confirmed is sent again as it is.
func (h *hub) reconnected() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for channel, c := range h.chans {
		switch {
		case len(c.watches) == 0 || c.sub == nil:
		case c.sub.confirmed(), c.sub.failed():
			// A failed one (its write met the connection lost again)
			// would otherwise never be sent again.
			h.newSub(channel, c, true)
		case c.sub.sent:
			c.sub.sent = false
			h.markDirty(channel, c)
		}
	}
}

// holds reports whether channel's subscription is confirmed and was not
// ended by the server since.
func (h *hub) holds(channel string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.chans[channel]
	return c != nil && c.sub != nil && c.sub.confirmed()
}

// idle reports whether no watch is on h.
func (h *hub) idle() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.chans) == 0
}

// notifyAll notifies every watch of c. hub.mu must be held.
func (c *hubChan) notifyAll() {
	for w := range c.watches {
		w.notify()
	}
}

// markDirty queues channel for send. h.mu must be held.
func (h *hub) markDirty(channel string, c *hubChan) {
	if c.isDirty {
		return
	}
	c.isDirty = true
	h.dirty = append(h.dirty, channel)
	select {
	case h.queued <- struct{}{}:
	default:
	}
}

// send brings the connection in line with what the watches want, one dirty
// channel at a time, in the order they became dirty.
func (h *hub) send() {
	for {
		select {
		case <-h.done:
			return
		case <-h.queued:
		}
		for h.sendOne() {
		}
	}
}

// hubAction is what send tells the connection about one channel.
type hubAction int

const (
	hubNone        hubAction = iota // nothing to change
	hubSubscribe                    // SUBSCRIBE the channel and its marker
	hubUnsubscribe                  // UNSUBSCRIBE the channel
)

// sendAction decides what send tells the connection about a dirty channel:
// a SUBSCRIBE when watches want it and their SUBSCRIBE is not sent yet
// (unsent), an UNSUBSCRIBE when no watch wants it and the connection was
// last told to subscribe, else nothing.
func sendAction(want, subscribed, unsent bool) hubAction {
	switch {
	case want && unsent:
		return hubSubscribe
	case !want && subscribed:
		return hubUnsubscribe
	}
	return hubNone
}

// sendOne handles the first dirty channel; it returns false when there is
// none or the hub is closed.
func (h *hub) sendOne() bool {
	select {
	case <-h.done:
		return false
	default:
	}
	channel, sub, act, ok := h.takeDirty()
	if !ok {
		return false
	}
	// No deadline of send's own: go-redis bounds the write with its write
	// timeout and a dial with its dial timeout, from when it gets to them.
	// A deadline set here could run out while go-redis redials (see hub),
	// and a write that fails on it makes go-redis drop a good connection.
	ctx := context.Background()
	switch act {
	case hubUnsubscribe:
		if h.sharded {
			_ = h.ps.SUnsubscribe(ctx, channel)
		} else {
			_ = h.ps.Unsubscribe(ctx, channel)
		}
	case hubSubscribe:
		h.subscribe(ctx, channel, sub)
	}
	return true
}

// takeDirty takes the first dirty channel off the queue and records, in
// the hub's state, the command sendAction decides for it; ok is false when
// none is dirty. A channel no watch wants leaves chans here. sub is the
// SUBSCRIBE to send (hubSubscribe only).
func (h *hub) takeDirty() (channel string, sub *hubSub, act hubAction, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.dirty) == 0 {
		return "", nil, hubNone, false
	}
	channel = h.dirty[0]
	h.dirty = h.dirty[1:]
	c := h.chans[channel]
	if c == nil { // not reached: a channel leaves chans only here
		return channel, nil, hubNone, true
	}
	c.isDirty = false
	want := len(c.watches) > 0
	act = sendAction(want, c.subscribed, c.sub != nil && !c.sub.sent)
	switch act {
	case hubSubscribe:
		sub = c.sub
		sub.sent, c.subscribed = true, true
	case hubUnsubscribe:
		c.subscribed = false
	}
	if !want {
		delete(h.chans, channel)
	}
	return channel, sub, act, true
}

// subscribe sends sub's SUBSCRIBE of channel and its marker, and fails sub
// when it could not be sent.
func (h *hub) subscribe(ctx context.Context, channel string, sub *hubSub) {
	var err error
	// The marker has done its work once confirmed (or never will be);
	// the resource channel stays subscribed.
	if h.sharded {
		err = h.ps.SSubscribe(ctx, channel, sub.marker)
		_ = h.ps.SUnsubscribe(ctx, sub.marker)
	} else {
		err = h.ps.Subscribe(ctx, channel, sub.marker)
		_ = h.ps.Unsubscribe(ctx, sub.marker)
	}
	if err == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs[sub.marker] == sub {
		delete(h.subs, sub.marker)
		sub.err = err
		close(sub.done)
	}
}

// Watch implements lockcore.Watcher: it returns once Redis has confirmed the
// subscription to the resource's release channel, or with an error when it
// failed, the node was closed or ctx ended first. notify is called from the
// node's pub/sub goroutine, once per message published on that channel.
func (n *Node) Watch(ctx context.Context, resource string, notify func()) (func(), error) {
	h := n.getHub()
	if h == nil {
		return nil, errNodeClosed
	}
	return h.watch(ctx, releasedKey(resource), notify)
}

// WatchAcquired implements lockcore.AcquireWatcher as Watch does, on the
// resource's grant channel (acquiredKey), over the same hub and connection.
func (n *Node) WatchAcquired(ctx context.Context, resource string, notify func()) (func(), error) {
	h := n.getHub()
	if h == nil {
		return nil, errNodeClosed
	}
	return h.watch(ctx, acquiredKey(resource), notify)
}

// acquiredKey is the channel acquire.lua and handoff.lua publish a grant
// on: the lock key with "acquired" for its last part, built by the scripts
// from KEYS[1] (same hash tag).
func acquiredKey(resource string) string { return "lockgate:{" + resource + "}:acquired" }

var (
	_ lockcore.AcquireWatcher = (*Node)(nil)
	_ lockcore.AcquireWatcher = (*ClusterNode)(nil)
)

// newSub makes the SUBSCRIBE that c's watches rely on from now and queues
// it for send. Its marker channel begins with "lockgate:hub:", so the first
// brace in it is channel's: the marker hashes to channel's slot, as a
// sharded SSUBSCRIBE of both requires. h.mu must be held.
func (h *hub) newSub(channel string, c *hubChan, renotify bool) *hubSub {
	h.seq++
	sub := &hubSub{marker: "lockgate:hub:" + strconv.FormatUint(h.seq, 10) + ":" + channel,
		done: make(chan struct{}), renotify: renotify, channel: channel}
	c.sub = sub
	h.subs[sub.marker] = sub
	h.markDirty(channel, c)
	return sub
}

// watch subscribes notify to channel (a resource's release or grant
// channel) on h's connection.
func (h *hub) watch(ctx context.Context, channel string, notify func()) (func(), error) {
	w := &watch{notify: notify}

	h.mu.Lock()
	c := h.chans[channel]
	if c == nil {
		c = &hubChan{watches: map[*watch]struct{}{}}
		h.chans[channel] = c
	}
	c.watches[w] = struct{}{}
	sub := c.sub
	if sub == nil || sub.failed() {
		// The first watch since the last UNSUBSCRIBE, or the others'
		// SUBSCRIBE failed: ask for one. Watches that a failed
		// re-subscription (see reconnected) left unnotified are
		// notified once it is confirmed.
		sub = h.newSub(channel, c, sub != nil && sub.renotify)
	}
	h.mu.Unlock()

	var once sync.Once
	stop := func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			delete(c.watches, w)
			if len(c.watches) == 0 {
				// Nobody waits for its confirmation any more, which may
				// never come (a connection lost with its reply); the next
				// first watch asks for a SUBSCRIBE of its own.
				if c.sub != nil {
					delete(h.subs, c.sub.marker)
					c.sub = nil
				}
				h.markDirty(channel, c)
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
	case <-h.done:
		stop()
		return nil, errNodeClosed
	case <-ctx.Done():
		stop()
		return nil, errors.Join(ctx.Err(), errors.New("redisnode: subscription not confirmed"))
	}
}
