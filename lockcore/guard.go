package lockcore

import (
	"context"
	"errors"
	"fmt"
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

// GuardNode is what the node guard needs of a node to keep its data whole:
// checks, quarantine, initialization and repair. Check, Quarantine,
// MarkInitializing, Repair and Ping work whatever the node's state;
// Counters fails with ErrQuarantined while the node is out of service (see
// Node).
type GuardNode interface {
	// Ping checks that the node answers.
	Ping(ctx context.Context) error
	// Check probes the node: whether it answers, accepts writes, kept its
	// data, and whether it is in quarantine (see NodeHealth). It may write
	// (a heartbeat), so that a node that refuses writes shows.
	Check(ctx context.Context) (NodeHealth, error)
	// Quarantine takes the node out of service until Repair, and starts the
	// quarantine's clock (NodeHealth.QuarantinedFor), again at every call:
	// a node back from a copy of its data taken during an earlier
	// quarantine must not count that one's time.
	Quarantine(ctx context.Context) error
	// MarkInitializing records, on a node that is not initialized, that a
	// gateway is about to initialize it as a node of a new cluster (see
	// NodeHealth.Initializing), and returns the epoch to Repair it with:
	// a new one, or the one of a mark already on the node (gateways that
	// initialize a cluster together share it). The mark goes with the
	// node's data. On an initialized node it changes nothing and returns
	// "". It grants nothing.
	MarkInitializing(ctx context.Context) (epoch string, err error)
	// Counters returns the node's fencing counters, FenceSlots of them. It
	// fails with ErrQuarantined while the node is out of service (see
	// Node), also when it lost its data since it was last checked: only a
	// node in service may be a source for a repair.
	Counters(ctx context.Context) ([]int64, error)
	// Repair raises every slot's counter to at least floor[slot] (floor has
	// FenceSlots entries) and puts the node in service: initialized, not
	// quarantined, its data trusted as of now. It acts only while the
	// node's epoch (NodeHealth.Epoch) is epoch, which must not be empty:
	// the epoch of the check that found the node's quarantine long enough,
	// or of MarkInitializing. A node quarantined again, marked again or
	// that lost its data since has another epoch: Repair then fails with
	// ErrNodeChanged, and any step it had taken before the change is
	// undone by what changed it (a quarantine marks every slot again).
	// Serving ends the epoch (rule 7a): a second Repair with it, whenever
	// it comes and whatever copy of the data the node then holds, fails
	// with ErrNodeChanged. It serves only the server process the
	// quarantine or mark was made for, checked in the step that serves
	// (rule 7b): a node whose process changed since fails with
	// ErrNodeChanged too.
	Repair(ctx context.Context, floor []int64, epoch string) error
	// String names the node in errors and logs (never a password).
	String() string
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
	// nodes are the Redlock's nodes, and checks the same nodes with their
	// Check reported to the Observer.
	nodes, checks []GuardNode
	// ctx is the guard's passes' context, cancelled by close.
	ctx    context.Context
	cancel context.CancelFunc

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
	g := &guard{r: r, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		states: make([]NodeReport, len(r.nodes)), suspects: make([]atomic.Bool, len(r.nodes)),
		audited: make([]time.Time, len(r.nodes))}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	for i, n := range r.nodes {
		g.nodes = append(g.nodes, n)
		g.checks = append(g.checks, r.calls[i])
	}
	return g
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
	g.cancel()
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
		g.pass(g.ctx) // close cancels g.ctx, ending a pass under way
	}
}

// checkResult is one node's Check.
type checkResult struct {
	h   NodeHealth
	err error
}

// check runs Check on every node in parallel.
func (g *guard) check(ctx context.Context) []checkResult {
	out := make([]checkResult, len(g.checks))
	var wg sync.WaitGroup
	for i, n := range g.checks {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, g.r.checkTimeout())
			defer cancel()
			out[i].h, out[i].err = n.Check(cctx)
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
	if g.r.unprotected {
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
		rec := g.recoverable(i, res)
		rejoin := !rec && g.rejoinable(i, res)
		if d := g.act(ctx, i, decide(c.h, g.r.quarantine(), rec, rejoin), res); d >= 0 {
			next = pick(next, d)
		}
	}
	g.witness(ctx, res)
	if next >= 0 {
		g.wakeIn(next)
	}
}

// nodeAction is what a pass does with a node that answered its check.
type nodeAction int

const (
	// actNone: nothing (the node refuses writes: its check says why).
	actNone nodeAction = iota
	// actBootWait: the node is marked as being initialized, for less than
	// bootGrace: look again soon, it may be initialized meanwhile.
	actBootWait
	// actQuarantine: the node lost its data or was never initialized.
	actQuarantine
	// actRepair: its quarantine has lasted long enough (see quarantine).
	actRepair
	// actRecover: quarantined, and it can recover from the other nodes.
	actRecover
	// actRejoin: quarantined after a restart, and it can recover from the
	// other whole nodes (rule 8).
	actRejoin
	// actWait: quarantined: wait for the quarantine's end.
	actWait
	// actAudit: in service; audit its slots if a lock operation found it
	// out of service (see audit).
	actAudit
)

// decide is a pass's rule for one node whose check found h: quarantine
// is how long a quarantine lasts, recoverable whether the node can recover
// from the other nodes in service now (see recoverable), rejoinable
// whether it can recover from the other whole nodes after a restart of a
// majority (rule 8, see rejoinable).
func decide(h NodeHealth, quarantine time.Duration, recoverable, rejoinable bool) nodeAction {
	switch {
	case bootWaiting(h):
		return actBootWait
	case h.Lost || !h.Initialized:
		return actQuarantine
	case h.Quarantined && h.QuarantinedFor >= quarantine:
		return actRepair
	case h.Quarantined && recoverable:
		return actRecover
	case h.Quarantined && rejoinable:
		return actRejoin
	case h.Quarantined:
		return actWait
	case healthError(h) == nil:
		return actAudit
	}
	return actNone
}

// bootWaiting reports whether h is a node that a gateway marked for
// initialization less than bootGrace ago, and that lost nothing since.
func bootWaiting(h NodeHealth) bool {
	return !h.Lost && !h.Initialized && h.Initializing && h.InitializingFor < bootGrace
}

// act does a on node i, which res found as it is, and returns when the
// guard should pass again for it (negative: no sooner than its interval).
func (g *guard) act(ctx context.Context, i int, a nodeAction, res []checkResult) time.Duration {
	h := res[i].h
	switch a {
	case actBootWait:
		return min(g.r.opt.CheckInterval, bootGrace-h.InitializingFor)
	case actQuarantine:
		g.do(ctx, i, "quarantine", func(ctx context.Context) error { return g.nodes[i].Quarantine(ctx) })
		if g.recoverable(i, res) || (h.Durable && g.rejoins(i)) {
			return 0 // recover it at the next pass, once its quarantine is marked
		}
		return g.r.quarantine()
	case actRepair:
		g.do(ctx, i, "repair", func(ctx context.Context) error { return g.repair(ctx, i, res, false) })
	case actRecover:
		return g.recover(ctx, i, res)
	case actRejoin:
		return g.claimed(ctx, i, func(ctx context.Context) error { return g.rejoin(ctx, i, res) })
	case actWait:
		return g.r.quarantine() - h.QuarantinedFor
	case actAudit:
		if g.audit(ctx, i) {
			return 0 // recover it at the next pass
		}
	}
	return -1
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
// quarantined: see GuardNode.Repair) is left as it is. A replica that finds
// some nodes initialized finds every other node of the new cluster marked,
// and waits for it (see bootGrace).
func (g *guard) bootstrap(ctx context.Context, res []checkResult) {
	epochs := make([]string, len(res))
	var wg sync.WaitGroup
	for i, c := range res {
		if c.err == nil {
			wg.Go(func() {
				g.do(ctx, i, "initialize", func(ctx context.Context) (err error) {
					epochs[i], err = g.nodes[i].MarkInitializing(ctx)
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
				g.do(ctx, i, "initialize", func(ctx context.Context) error { return g.nodes[i].Repair(ctx, zero, epoch) })
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
	g.failed(ctx, i, what, fn(bctx))
}

// failed reports a failed bulk operation on node i as the node's state,
// unless ctx ended or err is ErrNodeChanged: another replica acted first
// (it served or quarantined the node), or the node changed under the
// operation, and the guard looks at it again at once.
func (g *guard) failed(ctx context.Context, i int, what string, err error) {
	switch {
	case err == nil || ctx.Err() != nil:
	case errors.Is(err, ErrNodeChanged):
		g.poke()
	default:
		g.set(i, NodeUnreachable, fmt.Sprintf("%s failed: %v", what, err), what+" failed: "+Cause(err))
	}
}
