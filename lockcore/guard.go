package lockcore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// NodeState names a node's condition as the guard last saw it.
type NodeState string

// Node states, as reported to a HealthObserver.
const (
	// NodeServing: the node answers, accepts writes and its data is whole.
	NodeServing NodeState = "serving"
	// NodeUnreachable: the node's last check failed (down, hung, refused).
	NodeUnreachable NodeState = "unreachable"
	// NodeRefusing: the node answers but refuses writes (the reason says
	// why: out of memory, persistence failing, read-only replica).
	NodeRefusing NodeState = "refusing"
	// NodeLost: the node lost data it acknowledged; it is being
	// quarantined.
	NodeLost NodeState = "lost"
	// NodeQuarantined: out of service until repaired.
	NodeQuarantined NodeState = "quarantined"
	// NodeUninitialized: the node holds no lockgate data yet.
	NodeUninitialized NodeState = "uninitialized"
)

// HealthObserver is an optional extension of Observer: the guard tells it
// when a node's state changes (and once for each node when it first checks
// it). reason says why for NodeRefusing, NodeUnreachable and NodeLost, and
// for NodeQuarantined how it ends (recovering from the other nodes, or
// when the quarantine ends); it is empty for the other states.
type HealthObserver interface {
	NodeState(node string, state NodeState, reason string)
}

// bulkTimeout bounds the guard's whole-node operations (quarantine, reading
// and repairing every slot's counter): thousands of pipelined commands.
const bulkTimeout = 10 * time.Second

// guard watches over the nodes' data (see the package doc, "Nodes that lose
// their data"). It checks every node every Options.CheckInterval, and at
// once when a node operation found a node quarantined; it initializes a new
// cluster, quarantines nodes found lost, and repairs quarantined nodes once
// their quarantine has lasted long enough.
type guard struct {
	r *Redlock

	startMu sync.Mutex    // held by the first pass
	started atomic.Bool   // the first pass is done and the loop runs
	kick    chan struct{} // a pass is wanted now
	stop    chan struct{} // closed by close
	done    chan struct{} // closed when the loop ended

	// suspects has one flag per node, set when a lock operation found the
	// node out of service (see suspect); audited has when each node's
	// slots were last audited. Only the guard's passes use audited.
	suspects []atomic.Bool
	audited  []time.Time

	mu     sync.Mutex
	states []NodeReport  // per node, as last reported
	last   []checkResult // the last pass's checks, and when (real time)
	lastAt time.Time
	wake   *time.Timer // a pass when the earliest quarantine ends

	// seen is set once a pass found any node initialized or lost: the
	// cluster is not new, and this guard never initializes one as new
	// again (see fresh). Only the guard's passes, one at a time, use it.
	seen bool
}

// bootGrace is how long a node may stay uninitialized but marked as being
// initialized (NodeHealth.Initializing, on the node's clock), in a cluster
// whose other nodes are initialized, before it is quarantined as one that
// lost its data. A node whose server process restarted since it was
// marked is not being initialized by anyone: it is found lost at once (see
// redisnode's judge), and recovers. Gateway replicas that start together on a new cluster
// initialize it together: each first marks every node (MarkInitializing),
// then initializes them (bootstrap, within bulkTimeout), so a replica can
// find some nodes initialized and others only marked. Quarantining those
// would keep them out of service for the quarantine (MaxTTL), and two of
// three would stop the cluster for as long. Waiting is safe: such a node
// has no counters, so every lock operation on it fails and changes
// nothing. A node without the mark (it restarted empty: the mark goes
// with the data) is quarantined at once, as is a node this gateway saw
// initialized before (Lost): either could otherwise be initialized with
// zero counters by a gateway that takes the cluster for a new one (see
// fresh).
const bootGrace = 2 * bulkTimeout

func newGuard(r *Redlock) *guard {
	return &guard{r: r, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		states: make([]NodeReport, len(r.nodes)), suspects: make([]atomic.Bool, len(r.nodes)),
		audited: make([]time.Time, len(r.nodes))}
}

// ready makes the first pass over the nodes on first use, in the calling
// goroutine, so that the first operations of a new gateway find new nodes
// initialized; then it starts the loop. Later calls return at once. The
// pass is not cut short by ctx (initializing a node takes thousands of
// pipelined commands, which a request's deadline must not leave half
// done), only bounded by the guard's own timeouts; ready returns ctx's
// error if ctx ended meanwhile.
func (g *guard) ready(ctx context.Context) error {
	if g.started.Load() {
		return nil
	}
	g.startMu.Lock()
	defer g.startMu.Unlock()
	if g.started.Load() || g.stopped() {
		return nil
	}
	g.pass(context.WithoutCancel(ctx))
	g.started.Store(true)
	go g.loop()
	return ctx.Err()
}

func (g *guard) stopped() bool {
	select {
	case <-g.stop:
		return true
	default:
		return false
	}
}

// suspect records that a lock operation found node i out of service, and
// asks for a pass: the node may be quarantined, or, if its check finds it
// in service, a slot of it lost its counter (see audit).
func (g *guard) suspect(i int) {
	g.suspects[i].Store(true)
	g.poke()
}

// auditEvery bounds how often a node's slots are audited (16384 counters
// read): lock operations on a node out of service suspect it at every
// call.
const auditEvery = 10 * time.Second

// audit reads every slot counter of node i, which its check found in
// service but a lock operation found out of service: a slot whose counter
// is gone (deleted by hand, evicted before the policy was fixed) refuses
// every lock of its resources on that node, while the node looks whole.
// Such a node is quarantined, which removes its record, and recovers like
// any other. It reports whether it quarantined the node.
func (g *guard) audit(ctx context.Context, i int) bool {
	if !g.suspects[i].Swap(false) || time.Since(g.audited[i]) < auditEvery {
		return false
	}
	g.audited[i] = time.Now()
	bctx, cancel := context.WithTimeout(ctx, bulkTimeout)
	defer cancel()
	if _, err := g.r.nodes[i].Counters(bctx); !isQuarantined(err) {
		return false
	}
	g.set(i, NodeLost, "a slot's fencing counter is missing (deleted, or evicted)")
	g.do(ctx, i, "quarantine", func(ctx context.Context) error { return g.r.nodes[i].Quarantine(ctx) })
	return true
}

// poke asks for a pass soon (a node operation found a node quarantined).
func (g *guard) poke() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// close stops the loop, if it runs, and waits for it.
func (g *guard) close() {
	g.startMu.Lock()
	defer g.startMu.Unlock()
	if g.stopped() {
		return
	}
	close(g.stop)
	if g.started.Load() {
		<-g.done
	}
	g.mu.Lock()
	if g.wake != nil {
		g.wake.Stop()
	}
	g.mu.Unlock()
}

func (g *guard) loop() {
	defer close(g.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Real time, not Options.Clock: the checks are I/O against the nodes'
	// own clocks, and a fake clock driving waits in tests must not move
	// them (nor they it).
	t := time.NewTicker(g.r.opt.CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-g.kick:
		case <-t.C:
		}
		pctx, stop := context.WithCancel(ctx)
		go func() {
			select {
			case <-g.stop:
			case <-pctx.Done():
			}
			stop()
		}()
		g.pass(pctx)
		stop()
	}
}

// checkResult is one node's Check.
type checkResult struct {
	h   NodeHealth
	err error
}

// check runs Check on every node in parallel.
func (g *guard) check(ctx context.Context) []checkResult {
	out := make([]checkResult, len(g.r.nodes))
	var wg sync.WaitGroup
	for i := range g.r.nodes {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, g.r.checkTimeout())
			defer cancel()
			out[i].h, out[i].err = g.r.calls[i].Check(cctx)
		})
	}
	wg.Wait()
	return out
}

// pass checks every node and acts on what it finds.
func (g *guard) pass(ctx context.Context) {
	res := g.check(ctx)
	g.report(res)
	g.mu.Lock()
	g.last, g.lastAt = res, time.Now()
	g.mu.Unlock()
	if g.r.opt.UnsafeNoLossProtection {
		return
	}
	if g.fresh(res) {
		g.bootstrap(ctx, res)
		return
	}
	next := time.Duration(-1) // until the earliest quarantine still running ends
	for i, c := range res {
		if c.err != nil {
			continue
		}
		switch h := c.h; {
		case !h.Lost && !h.Initialized && h.Initializing && h.InitializingFor < bootGrace:
			// Look again soon: it may be initialized meanwhile.
			next = pick(next, min(g.r.opt.CheckInterval, bootGrace-h.InitializingFor))
		case h.Lost || !h.Initialized:
			g.do(ctx, i, "quarantine", func(ctx context.Context) error { return g.r.nodes[i].Quarantine(ctx) })
			if g.recoverable(i, res) {
				next = 0 // recover it at the next pass, once its quarantine is marked
			} else {
				next = pick(next, g.r.quarantine())
			}
		case h.Quarantined && h.QuarantinedFor >= g.r.quarantine():
			g.do(ctx, i, "repair", func(ctx context.Context) error { return g.repair(ctx, i, res, false) })
		case h.Quarantined && g.recoverable(i, res):
			g.do(ctx, i, "recover", func(ctx context.Context) error { return g.repair(ctx, i, res, true) })
		case h.Quarantined:
			next = pick(next, g.r.quarantine()-h.QuarantinedFor)
		case healthError(h) == nil && g.audit(ctx, i):
			next = 0 // recover it at the next pass
		}
	}
	if next >= 0 {
		g.wakeIn(next)
	}
}

// lastPass returns the checks of the guard's last pass and when it made
// them (nil before the first).
func (g *guard) lastPass() ([]checkResult, time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.last, g.lastAt
}

// pick returns the shorter of d and e, where a negative d means none yet.
func pick(d, e time.Duration) time.Duration {
	if d < 0 {
		return e
	}
	return min(d, e)
}

// wakeIn asks for a pass in d (plus a little, so the node's own clock has
// passed the quarantine too), instead of up to CheckInterval later: a
// repaired node serves as soon as its quarantine allows.
func (g *guard) wakeIn(d time.Duration) {
	d += 10 * time.Millisecond
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.wake != nil {
		g.wake.Stop()
	}
	g.wake = time.AfterFunc(d, g.poke)
}

// fresh reports whether the nodes form a new cluster: none of those that
// answered (at least a quorum) was ever initialized or is known to have
// lost data, and no earlier pass of this guard found one that was. Such
// nodes are initialized at once, without quarantine.
func (g *guard) fresh(res []checkResult) bool {
	answered := 0
	for _, c := range res {
		if c.err != nil {
			continue
		}
		if c.h.Initialized || c.h.Lost {
			g.seen = true
		}
		answered++
	}
	return !g.seen && answered >= g.r.quorum
}

// bootstrap initializes the nodes of a new cluster with zero counters. It
// first marks every node that answered as being initialized, then checks
// every node again, and initializes the nodes it marked (each with its
// mark's epoch) only if the cluster still looks new: a gateway that
// decided late (it was paused between its check and its marks, say) finds
// the nodes another one initialized meanwhile, and stops. A node whose
// mark is gone by the time it is initialized (it lost its data, or was
// quarantined: see Node.Repair) is left as it is. A replica that finds
// some nodes initialized finds every other node of the new cluster marked,
// and waits for it (see bootGrace).
func (g *guard) bootstrap(ctx context.Context, res []checkResult) {
	epochs := make([]string, len(res))
	var wg sync.WaitGroup
	for i, c := range res {
		if c.err == nil {
			wg.Go(func() {
				g.do(ctx, i, "initialize", func(ctx context.Context) (err error) {
					epochs[i], err = g.r.nodes[i].MarkInitializing(ctx)
					return err
				})
			})
		}
	}
	wg.Wait()
	if !g.fresh(g.check(ctx)) {
		return
	}
	zero := make([]int64, FenceSlots)
	for i, epoch := range epochs {
		if epoch != "" {
			wg.Go(func() {
				g.do(ctx, i, "initialize", func(ctx context.Context) error { return g.r.nodes[i].Repair(ctx, zero, epoch) })
			})
		}
	}
	wg.Wait()
}

// do runs a bulk operation on node i and reports a failure as the node's
// state.
func (g *guard) do(ctx context.Context, i int, what string, fn func(context.Context) error) {
	bctx, cancel := context.WithTimeout(ctx, bulkTimeout)
	defer cancel()
	if err := fn(bctx); err != nil && ctx.Err() == nil {
		g.set(i, NodeUnreachable, fmt.Sprintf("%s failed: %v", what, err))
	}
}

// recoverNeed is how many other nodes in service a node that lost data
// must read to recover at once (see the package doc, step 7): every lock
// that holds a quorum, and every token fenced on a quorum, is on at least
// quorum − 1 nodes other than the lost one, so any recoverNeed of the
// other n − 1 nodes include one of them. With 3 nodes both others, with 5
// three of the other four; a single node never recovers at once.
func recoverNeed(n, quorum int) int { return n - quorum + 1 }

// sources lists the nodes other than i that res found in service.
func sources(i int, res []checkResult) []int {
	var out []int
	for j, c := range res {
		if j != i && c.err == nil && healthError(c.h) == nil {
			out = append(out, j)
		}
	}
	return out
}

// recoverable reports whether node i can recover from the other nodes now
// instead of waiting out its quarantine: it takes in locks (Adopter),
// enough others are in service and each can list its locks (Lister).
func (g *guard) recoverable(i int, res []checkResult) bool {
	if _, ok := g.r.nodes[i].(Adopter); !ok {
		return false
	}
	src := sources(i, res)
	for _, j := range src {
		if _, ok := g.r.nodes[j].(Lister); !ok {
			return false
		}
	}
	return len(src) >= recoverNeed(len(g.r.nodes), g.r.quorum)
}

// repair raises node i's counters to the highest each slot has on the other
// nodes in service, and puts it back in service. For a recovery (early:
// its quarantine has not lasted the largest TTL), it first takes in the
// locks those nodes hold (Adopter). Either needs recoverNeed such nodes:
// they share a node with the quorum that fenced any token, and that holds
// any live lock (see the package doc). A recovery that cannot read enough
// of them fails and the quarantine goes on; a repair after the quarantine
// (no lock the node held can still be live) raises the counters to
// clockFloor as well when it has fewer (one node alone, or a majority that
// lost data). The repair takes the epoch of the check that found the node
// quarantined: if the node was quarantined again or lost its data since, it
// does nothing (see Node.Repair).
func (g *guard) repair(ctx context.Context, i int, res []checkResult, early bool) error {
	floor := make([]int64, FenceSlots)
	var locks []HeldLock
	read := 0
	for _, j := range sources(i, res) {
		var held []HeldLock
		if early {
			var err error
			if held, err = heldLocks(ctx, g.r.nodes[j]); err != nil {
				continue
			}
		}
		// After the locks: Counters fails if the node lost its data
		// while it was read.
		counters, err := g.r.nodes[j].Counters(ctx)
		if err != nil || len(counters) != FenceSlots {
			continue
		}
		locks = append(locks, held...)
		for s, v := range counters {
			floor[s] = max(floor[s], v)
		}
		read++
	}
	need := recoverNeed(len(g.r.nodes), g.r.quorum)
	switch {
	case early && read < need:
		return fmt.Errorf("recovery read %d of the %d other nodes in service it needs; the quarantine goes on", read, need)
	case early:
		if err := g.r.nodes[i].(Adopter).AdoptLocks(ctx, locks, res[i].h.Epoch); err != nil {
			return err
		}
	case read < need:
		if len(g.r.nodes) > 1 {
			g.r.opt.Observer.QuorumFailed("repair")
		}
		cf := clockFloor(g.r.opt.Clock.Now())
		for s := range floor {
			floor[s] = max(floor[s], cf)
		}
	}
	return g.r.nodes[i].Repair(ctx, floor, res[i].h.Epoch)
}

// heldLocks reads every lock node n holds, by bounded listing steps.
func heldLocks(ctx context.Context, n Node) ([]HeldLock, error) {
	l := n.(Lister)
	var out []HeldLock
	cursor := ""
	for {
		names, next, err := l.ScanLocks(ctx, "", cursor, 1000)
		if err != nil {
			return nil, err
		}
		if len(names) > 0 {
			views, err := l.InspectLocks(ctx, names)
			if err != nil {
				return nil, err
			}
			for k, v := range views {
				if v.Found && k < len(names) {
					out = append(out, HeldLock{Resource: names[k], NodeLock: v})
				}
			}
		}
		if next == "" {
			return out, nil
		}
		cursor = next
	}
}

// ClockFloor is the counter floor the guard raises a node's counters to
// when it cannot read enough other nodes (see clockFloor), exported for
// stores that start without any memory of earlier tokens, such as the
// embedded node: a token minted from a counter that starts at ClockFloor(now)
// is above every token minted before from a counter that started at an
// earlier ClockFloor, as long as fewer than 1000 tokens per millisecond
// were minted on one slot on average since, and the wall clock has not
// gone back.
func ClockFloor(now time.Time) int64 { return clockFloor(now) }

// clockFloor is a counter floor from the wall clock: 1000 per millisecond
// since 1970. A counter repaired to it is above every token granted before,
// as long as fewer than 1000 grants per millisecond were made on the slot
// on average since it was last set this way, and the clock has not gone
// back. It stays below MaxToken until the year 2255.
func clockFloor(now time.Time) int64 { return now.UnixMilli() * 1000 }

// report turns check results into states and tells the HealthObserver of
// changes.
func (g *guard) report(res []checkResult) {
	now := g.r.opt.Clock.Now()
	for i, c := range res {
		state, reason, until := NodeServing, "", time.Time{}
		switch h := c.h; {
		case c.err != nil:
			state, reason = NodeUnreachable, c.err.Error()
		case h.Refusing != "":
			state, reason = NodeRefusing, h.Refusing
		case h.Lost && g.recoverable(i, res):
			state, reason, until = NodeLost, h.Reason, now.Add(2*g.r.opt.CheckInterval)
		case h.Lost:
			state, reason, until = NodeLost, h.Reason, now.Add(g.r.quarantine())
		case h.Quarantined && g.recoverable(i, res):
			state, reason, until = NodeQuarantined, "recovering from the other nodes", now.Add(2*g.r.opt.CheckInterval)
		case h.Quarantined:
			until = now.Add(g.r.quarantine() - h.QuarantinedFor)
			state, reason = NodeQuarantined, fmt.Sprintf("too few other nodes in service to recover from; serves again after %s, once no lock it held can be live",
				until.UTC().Format(time.RFC3339))
		case !h.Initialized:
			state = NodeUninitialized
		}
		g.setUntil(i, state, reason, until)
	}
}

// NodeReport is what the node guard last found of one node.
type NodeReport struct {
	// Node names the node (its String: host:port, never a password).
	Node  string
	State NodeState
	// Reason says why the node is not serving (see HealthObserver); it
	// may name the node's address.
	Reason string
	// Since is when the node entered State, on the gateway's clock.
	Since time.Time
	// Until is when the node is expected to serve again: the end of its
	// quarantine, or about two checks while it recovers from the other
	// nodes. Zero when serving or when nothing tells (unreachable,
	// refusing, not initialized).
	Until time.Time
}

// NodeReports reports every node's state as the node guard last found it,
// in the order of the nodes. Before the guard's first pass every state is
// empty.
func (r *Redlock) NodeReports() []NodeReport {
	g := r.guard
	g.mu.Lock()
	defer g.mu.Unlock()
	out := slices.Clone(g.states)
	for i := range out {
		out[i].Node = r.nodes[i].String()
	}
	return out
}

// backIn is how long until a quorum of nodes is expected in service, from
// the guard's last pass (see QuorumError.RetryAfter).
func (g *guard) backIn() time.Duration {
	now := g.r.opt.Clock.Now()
	g.mu.Lock()
	waits := make([]time.Duration, len(g.states))
	for i, st := range g.states {
		switch {
		case st.State == NodeServing:
		case !st.Until.IsZero():
			waits[i] = max(st.Until.Sub(now), 0)
		default:
			waits[i] = time.Second
		}
	}
	g.mu.Unlock()
	slices.Sort(waits)
	return waits[g.r.quorum-1]
}

// noQuorum fills in e's RetryAfter and returns it.
func (r *Redlock) noQuorum(e *QuorumError) *QuorumError {
	e.RetryAfter = r.guard.backIn()
	return e
}

func (g *guard) set(i int, state NodeState, reason string) { g.setUntil(i, state, reason, time.Time{}) }

func (g *guard) setUntil(i int, state NodeState, reason string, until time.Time) {
	g.mu.Lock()
	st := &g.states[i]
	changed := st.State != state
	if changed {
		st.Since = g.r.opt.Clock.Now()
	}
	st.State, st.Reason, st.Until = state, reason, until
	g.mu.Unlock()
	if ho, ok := g.r.opt.Observer.(HealthObserver); ok && changed {
		ho.NodeState(g.r.nodes[i].String(), state, reason)
	}
}

// healthError is why a node that answered its check does not count as
// ready, or nil.
func healthError(h NodeHealth) error {
	switch {
	case h.Refusing != "":
		return fmt.Errorf("refuses writes: %s", h.Refusing)
	case h.Lost, h.Quarantined, !h.Initialized:
		return ErrQuarantined
	}
	return nil
}

// isQuarantined reports whether err says a node was out of service.
func isQuarantined(err error) bool { return errors.Is(err, ErrQuarantined) }
