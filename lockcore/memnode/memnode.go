// Package memnode is an in-memory lockcore.Node: the embedded store used when
// no Redis is configured, and a fast node for unit tests. It passes the same
// conformance suite (lockcore/nodetest) as the Redis node.
//
// Everything lives in one process and is lost when it exits, fencing counters
// included. Options.Floor starts the counters from a floor instead of 0: the
// embedded gateway uses lockcore.ClockFloor, so that its tokens keep growing
// across restarts (locks are still lost with the process). Use Redis nodes
// when locks must survive restarts.
//
// Like any node it keeps one fencing counter per slot (lockcore.FenceSlots),
// so its memory is bounded by the locks it holds: an expired lock is
// forgotten within about 100 ms by a sweeper goroutine that runs while
// the node holds locks (Close stops it), and a listing step seeks in name
// order instead of walking every lock. New returns a node in service;
// LoseData simulates a node that restarted empty, for tests of the
// quarantine.
package memnode

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockgate/lockgate/lockcore"
)

// Node is an in-memory lock node. The zero value is not usable; call New.
type Node struct {
	name string
	now  func() time.Time

	mu       sync.Mutex
	locks    map[string]*entry
	names    byName   // the locks in name order
	expiry   byExpiry // the locks by expiry, earliest first
	counters []int64  // one per slot
	watchers map[string]map[*watch]struct{}
	// acquired are the watches of grants (lockcore.AcquireWatcher).
	acquired map[string]map[*watch]struct{}
	// rw indexes the readers-writer holds (entries named
	// lockcore.RWHoldResource) by lock name, and marks holds the waiting
	// writers' marks (see rw.go).
	rw    map[string]map[*entry]struct{}
	marks map[string]mark
	// Data-loss state (see lockcore.NodeHealth).
	initialized, lost, quarantined bool
	qsince                         time.Time
	bootAt                         time.Time // MarkInitializing, while not initialized
	epoch                          string    // see lockcore.NodeHealth.Epoch
	// What a restart of a majority needs (lockcore.Rejoiner; rejoin.go).
	rejoin rejoinState
	// claim is the recovery claim's holder and when it lapses
	// (lockcore.RecoveryClaimer), kept with the data.
	claim      string
	claimUntil time.Time
	// The sweeper (sweep.go).
	sweeping, closed bool
	stop             chan struct{}
	closeOnce        sync.Once
	sweepers         sync.WaitGroup
}

type entry struct {
	name    string
	lease   string
	token   int64
	owner   string
	ttl     time.Duration
	expires time.Time
	by      string   // the replica it was granted for
	wanted  bool     // an acquisition for another replica was refused
	next    []*entry // in byName, one per level
	at      int      // in byExpiry
	// rwName is the readers-writer lock this entry is a hold of ("" for a
	// lock), rwExcl its mode and rwLease its lease (see rw.go).
	rwName  string
	rwExcl  bool
	rwLease string
}

type watch struct{ notify func() }

// Options tune a Node. A nil *Options means the defaults.
type Options struct {
	// Name names the node in errors. Default "mem".
	Name string
	// Now is the clock that expires locks. Default time.Now.
	Now func() time.Time
	// Floor is where every slot's fencing counter starts: the first token
	// is Floor+1. Default 0. The embedded gateway starts it at
	// lockcore.ClockFloor(now), so that tokens after a restart are above
	// every token given out before it.
	Floor int64
}

var seq atomic.Int64

// New returns an empty node, in service.
func New(opts *Options) *Node {
	n := &Node{locks: map[string]*entry{}, names: newByName(), counters: make([]int64, lockcore.FenceSlots),
		watchers: map[string]map[*watch]struct{}{}, acquired: map[string]map[*watch]struct{}{}, initialized: true, stop: make(chan struct{}),
		rw: map[string]map[*entry]struct{}{}, marks: map[string]mark{}}
	if opts != nil {
		n.name, n.now = opts.Name, opts.Now
		for i := range n.counters {
			n.counters[i] = opts.Floor
		}
	}
	if n.name == "" {
		n.name = fmt.Sprintf("mem-%d", seq.Add(1))
	}
	if n.now == nil {
		n.now = time.Now
	}
	return n
}

var (
	_ lockcore.Node      = (*Node)(nil)
	_ lockcore.Watcher   = (*Node)(nil)
	_ lockcore.HandOffer = (*Node)(nil)

	_ lockcore.AcquireWatcher = (*Node)(nil)
)

// String names the node.
func (n *Node) String() string { return n.name }

// live returns the unexpired lock on resource, dropping an expired one.
// n.mu must be held.
func (n *Node) live(resource string) *entry {
	e := n.locks[resource]
	if e != nil && !n.now().Before(e.expires) {
		n.drop(e)
		return nil
	}
	return e
}

func (n *Node) taken(e *entry) lockcore.NodeReply {
	return lockcore.NodeReply{Status: lockcore.StatusTaken, PTTL: e.expires.Sub(n.now())}
}

// Acquire implements lockcore.Node.
func (n *Node) Acquire(ctx context.Context, req lockcore.NodeAcquire) (lockcore.NodeReply, error) {
	if err := ctx.Err(); err != nil {
		return lockcore.NodeReply{}, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.out(); err != nil {
		return lockcore.NodeReply{}, err
	}
	switch e := n.live(req.Resource); {
	case e == nil:
		return n.grant(req), nil
	case e.lease == req.Lease:
		e.ttl = req.TTL
		n.expireAt(e, n.now().Add(req.TTL))
		return lockcore.NodeReply{Status: lockcore.StatusReentered, Token: e.token}, nil
	default:
		if req.Waits && e.by != req.Replica {
			e.wanted = true
		}
		return n.taken(e), nil
	}
}

// grant gives the free lock on req.Resource to req.Lease with a new token,
// and calls every grant watch's notify on it. n.mu must be held.
func (n *Node) grant(req lockcore.NodeAcquire) lockcore.NodeReply {
	slot := lockcore.FenceSlot(req.Resource)
	n.counters[slot]++
	tok := n.counters[slot]
	n.add(&entry{name: req.Resource, lease: req.Lease, token: tok, owner: req.Owner, ttl: req.TTL,
		expires: n.now().Add(req.TTL), by: req.Replica})
	notifyAll(n.acquired[req.Resource])
	return lockcore.NodeReply{Status: lockcore.StatusGranted, Token: tok}
}

// Extend implements lockcore.Node.
func (n *Node) Extend(ctx context.Context, resource, lease string, ttl time.Duration, ifToken int64) (lockcore.NodeReply, error) {
	if err := ctx.Err(); err != nil {
		return lockcore.NodeReply{}, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.out(); err != nil {
		return lockcore.NodeReply{}, err
	}
	switch e := n.live(resource); {
	case e == nil:
		return lockcore.NodeReply{Status: lockcore.StatusAbsent}, nil
	case mismatch(e, ifToken):
		return lockcore.NodeReply{Status: lockcore.StatusMismatch, Token: e.token}, nil
	case e.lease == lease:
		if ttl > 0 {
			e.ttl = ttl
		}
		n.expireAt(e, n.now().Add(e.ttl))
		return lockcore.NodeReply{Status: lockcore.StatusOK, Token: e.token, TTL: e.ttl}, nil
	default:
		return n.taken(e), nil
	}
}

// Release implements lockcore.Node. A release by the holder calls every
// watch's notify on resource before it returns, under the node's lock.
func (n *Node) Release(ctx context.Context, resource, lease string, ifToken int64) (lockcore.NodeReply, error) {
	if err := ctx.Err(); err != nil {
		return lockcore.NodeReply{}, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.out(); err != nil {
		return lockcore.NodeReply{}, err
	}
	switch e := n.live(resource); {
	case e == nil:
		return lockcore.NodeReply{Status: lockcore.StatusAbsent}, nil
	case mismatch(e, ifToken):
		return lockcore.NodeReply{Status: lockcore.StatusMismatch, Token: e.token}, nil
	case e.lease == lease:
		n.drop(e)
		n.announce(resource)
		return lockcore.NodeReply{Status: lockcore.StatusOK, Token: e.token, Wanted: e.wanted}, nil
	default:
		return n.taken(e), nil
	}
}

// mismatch reports whether ifToken is set and is not e's token.
func mismatch(e *entry, ifToken int64) bool { return ifToken != 0 && e.token != ifToken }

// announce calls every release watch's notify on resource. n.mu must be
// held.
func (n *Node) announce(resource string) { notifyAll(n.watchers[resource]) }

// notifyAll calls the notify of every watch of ws.
func notifyAll(ws map[*watch]struct{}) {
	for w := range ws {
		w.notify()
	}
}

// HandOff implements lockcore.HandOffer: a release by the holder and, when
// allowed, a grant to next, under the node's lock. A release not followed by
// a grant calls every watch's notify before HandOff returns.
func (n *Node) HandOff(ctx context.Context, lease string, ifToken int64, next lockcore.NodeAcquire) (released, granted lockcore.NodeReply, err error) {
	absent := lockcore.NodeReply{Status: lockcore.StatusAbsent}
	if err := ctx.Err(); err != nil {
		return lockcore.NodeReply{}, lockcore.NodeReply{}, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.out(); err != nil {
		return lockcore.NodeReply{}, lockcore.NodeReply{}, err
	}
	e := n.live(next.Resource)
	switch {
	case e == nil:
		return absent, absent, nil
	case mismatch(e, ifToken):
		return lockcore.NodeReply{Status: lockcore.StatusMismatch, Token: e.token}, absent, nil
	case e.lease != lease:
		return n.taken(e), absent, nil
	}
	n.drop(e)
	released = lockcore.NodeReply{Status: lockcore.StatusOK, Token: e.token, Wanted: e.wanted}
	if next.Replica != "" && e.by == next.Replica && !e.wanted && next.Lease != lease {
		return released, n.grant(next), nil
	}
	n.announce(next.Resource)
	return released, absent, nil
}

// RaiseFence implements lockcore.Node.
func (n *Node) RaiseFence(ctx context.Context, resource, lease string, token int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.out(); err != nil {
		return err
	}
	if slot := lockcore.FenceSlot(resource); n.counters[slot] < token {
		n.counters[slot] = token
	}
	if e := n.live(resource); e != nil && e.lease == lease && e.token < token {
		e.token = token
	}
	return nil
}

// Inspect implements lockcore.Node.
func (n *Node) Inspect(ctx context.Context, resource string) (lockcore.NodeLock, error) {
	if err := ctx.Err(); err != nil {
		return lockcore.NodeLock{}, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.out(); err != nil {
		return lockcore.NodeLock{}, err
	}
	return n.inspect(resource), nil
}

// inspect reads a lock whatever the node's state. n.mu must be held.
func (n *Node) inspect(resource string) lockcore.NodeLock {
	e := n.live(resource)
	if e == nil {
		return lockcore.NodeLock{}
	}
	return lockcore.NodeLock{Found: true, Lease: e.lease, Token: e.token, Owner: e.owner, TTL: e.ttl, Remaining: e.expires.Sub(n.now())}
}

// Ping implements lockcore.Node; an in-memory node always answers.
func (n *Node) Ping(ctx context.Context) error { return ctx.Err() }

// Watch implements lockcore.Watcher. notify is called with the node's lock
// held, so it must not call back into the node.
func (n *Node) Watch(ctx context.Context, resource string, notify func()) (func(), error) {
	return n.watch(ctx, n.watchers, resource, notify)
}

// WatchAcquired implements lockcore.AcquireWatcher: notify is called by
// every Acquire that grants resource and every HandOff that passes it on,
// before it returns, with the node's lock held, so it must not call back
// into the node.
func (n *Node) WatchAcquired(ctx context.Context, resource string, notify func()) (func(), error) {
	return n.watch(ctx, n.acquired, resource, notify)
}

// watch adds a watch of resource to watchers (n.watchers or n.acquired)
// until stop.
func (n *Node) watch(ctx context.Context, watchers map[string]map[*watch]struct{}, resource string, notify func()) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	w := &watch{notify: notify}
	n.mu.Lock()
	if watchers[resource] == nil {
		watchers[resource] = map[*watch]struct{}{}
	}
	watchers[resource][w] = struct{}{}
	n.mu.Unlock()
	return func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		delete(watchers[resource], w)
		if len(watchers[resource]) == 0 {
			delete(watchers, resource)
		}
	}, nil
}

// out returns lockcore.ErrQuarantined while the node is out of service.
// n.mu must be held.
func (n *Node) out() error {
	if !n.initialized || n.quarantined {
		return lockcore.ErrQuarantined
	}
	return nil
}

// LoseData makes the node forget everything, as a node restarted with an
// empty data set would: locks, counters and its initialization. Its next
// Check reports it Lost. Watches stay (they belong to the gateway's
// connection, not to the data). For tests.
func (n *Node) LoseData() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.locks)
	clear(n.rw)
	clear(n.marks)
	n.names, n.expiry = newByName(), nil
	clear(n.counters)
	n.initialized, n.quarantined, n.lost = false, false, true
	n.bootAt, n.epoch = time.Time{}, ""
	n.claim = ""
	n.rejoin = rejoinState{proc: n.rejoin.proc + 1, notDurable: n.rejoin.notDurable}
}

var _ lockcore.RecoveryClaimer = (*Node)(nil)

// ClaimRecovery implements lockcore.RecoveryClaimer on the node's clock.
func (n *Node) ClaimRecovery(ctx context.Context, holder string, ttl time.Duration) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.now()
	if n.claim != "" && n.claim != holder && now.Before(n.claimUntil) {
		return false, nil
	}
	n.claim, n.claimUntil = holder, now.Add(ttl)
	return true, nil
}

// DropRecoveryClaim implements lockcore.RecoveryClaimer.
func (n *Node) DropRecoveryClaim(ctx context.Context, holder string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.claim == holder {
		n.claim = ""
	}
	return nil
}

// Check implements lockcore.Node.
func (n *Node) Check(ctx context.Context) (lockcore.NodeHealth, error) {
	if err := ctx.Err(); err != nil {
		return lockcore.NodeHealth{}, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	h := lockcore.NodeHealth{Initialized: n.initialized, Lost: n.lost, Quarantined: n.quarantined, Epoch: n.epoch}
	n.rejoin.report(&h, n.quarantined)
	if n.lost && n.initialized && n.rejoin.restarted() {
		h.Reason = "a new server process since its data was last recovered (a restart or a restore)"
	}
	if n.quarantined {
		h.QuarantinedFor = n.now().Sub(n.qsince)
	}
	if !n.initialized && !n.bootAt.IsZero() {
		h.Initializing, h.InitializingFor = true, n.now().Sub(n.bootAt)
	}
	return h, nil
}

// Quarantine implements lockcore.Node.
func (n *Node) Quarantine(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.rejoin.quarantined(n.quarantined && !n.lost)
	n.quarantined, n.qsince = true, n.now() // see lockcore.Node.Quarantine
	n.initialized, n.lost, n.epoch = true, false, lockcore.NewLeaseID()
	return nil
}

// MarkInitializing implements lockcore.Node.
func (n *Node) MarkInitializing(ctx context.Context) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.initialized {
		return "", nil
	}
	if n.epoch == "" {
		n.epoch, n.bootAt = lockcore.NewLeaseID(), n.now()
	}
	return n.epoch, nil
}

// Counters implements lockcore.Node.
func (n *Node) Counters(ctx context.Context) ([]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.out(); err != nil {
		return nil, err
	}
	return slices.Clone(n.counters), nil
}

// Repair implements lockcore.Node.
func (n *Node) Repair(ctx context.Context, floor []int64, epoch string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(floor) != lockcore.FenceSlots {
		return fmt.Errorf("memnode: repair needs %d counters, got %d", lockcore.FenceSlots, len(floor))
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if epoch == "" || epoch != n.epoch {
		return lockcore.ErrNodeChanged
	}
	for i, f := range floor {
		n.counters[i] = max(n.counters[i], f)
	}
	// A repair decided before this one (on the same epoch) must never
	// serve the node again: the epoch ends here (rule 7a of lockcore's doc).
	n.initialized, n.quarantined, n.lost, n.epoch = true, false, false, ""
	n.rejoin.served()
	return nil
}

var _ lockcore.Adopter = (*Node)(nil)

// noLease holds an adopted lock that two leases' copies disagreed on: it
// is no lease id, so no lease extends, releases or takes it here until it
// expires (see lockcore.Adopter).
const noLease = "~"

// AdoptLocks implements lockcore.Adopter.
func (n *Node) AdoptLocks(ctx context.Context, locks []lockcore.HeldLock, epoch string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if epoch == "" || epoch != n.epoch {
		return lockcore.ErrNodeChanged
	}
	now := n.now()
	for _, l := range locks {
		expires := now.Add(max(l.Remaining, time.Millisecond))
		e := n.live(l.Resource)
		if e == nil {
			n.add(&entry{name: l.Resource, lease: l.Lease, token: l.Token, owner: l.Owner, ttl: l.TTL, expires: expires})
			continue
		}
		if e.lease != l.Lease {
			e.lease = noLease
		}
		e.token = max(e.token, l.Token)
		if expires.After(e.expires) {
			n.expireAt(e, expires)
		}
	}
	return nil
}
