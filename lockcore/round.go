package lockcore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// errUnheard stands, in a round's results, for a node that has not
// answered yet when the round was decided: its call may still run.
var errUnheard = errors.New("lockcore: no answer yet")

// round is one call to every node in parallel, each bounded by NodeTimeout
// and by the caller's deadline. Its caller reads the answers as they come
// (until) and may decide before every node has answered: a slow or hung
// minority then does not slow the call down. The answers still to come are
// then handed to a function in the background (rest), which acts on them
// (see Redlock.late).
//
// While the round is undecided, the caller's context ending cancels the
// calls, as a plain fan-out would. Once it is decided, the calls still
// running are no longer tied to the caller, whose request may end at once
// with the answer: they run to their own deadline, so that their answers
// can be acted on.
type round struct {
	results []nodeResult // by node; errUnheard until heard
	heard   []bool
	n       int // answers heard
	began   time.Time
	// graceEnd is when an answer stops being in time (see pace); zero
	// until a quorum of nodes has answered or the round is decided.
	graceEnd time.Time
	pace     *pace
	seq      uint64 // the round's number in pace
	quorum   int
	answered int  // answers heard that are not errors
	ranOut   bool // the grace ran out: every node unheard then was judged late
	ch       chan nodeResult
	decided  atomic.Bool
	cancel   context.CancelFunc
	bg       *background // counts rest's goroutine
	stop     func() bool // stops the link from the caller's context
	after    func()      // if set, called once rest has passed on every answer
	// inline holds results and heard for up to 5 nodes, so that they need
	// no allocation of their own.
	inline struct {
		results [5]nodeResult
		heard   [5]bool
	}
}

// start begins a round: fn is called on every node. Before the first call
// it waits for the guard's first pass over the nodes (see guard.ready); if
// that fails, the round is complete at once, every node answering the
// error.
func (r *Redlock) start(ctx context.Context, fn func(ctx context.Context, i int, n Node) (NodeReply, error)) *round {
	rd := &round{began: time.Now(), bg: &r.bg, pace: &r.pace, seq: r.pace.rounds.Add(1), quorum: r.quorum}
	if len(r.nodes) <= len(rd.inline.results) {
		rd.results, rd.heard = rd.inline.results[:len(r.nodes)], rd.inline.heard[:len(r.nodes)]
	} else {
		rd.results, rd.heard = make([]nodeResult, len(r.nodes)), make([]bool, len(r.nodes))
	}
	if err := r.guard.ready(ctx); err != nil {
		for i, n := range r.nodes {
			rd.results[i] = nodeResult{i: i, err: &NodeError{Node: n.String(), Err: err}}
			rd.heard[i] = true
		}
		rd.n = len(r.nodes)
		return rd
	}
	for i := range r.nodes {
		rd.results[i] = nodeResult{i: i, err: r.unheard[i]}
	}
	rd.ch = make(chan nodeResult, len(r.nodes))
	// The calls' deadline: NodeTimeout, or the caller's deadline if sooner.
	deadline := time.Now().Add(r.opt.NodeTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	cctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	rd.cancel = cancel
	if errors.Is(ctx.Err(), context.Canceled) {
		cancel() // no call of a caller that has left starts
	}
	rd.stop = context.AfterFunc(ctx, func() {
		// A deadline needs no cancel: the calls' own is no later.
		if !rd.decided.Load() && errors.Is(ctx.Err(), context.Canceled) {
			cancel()
		}
	})
	for i, n := range r.calls {
		r.callers.run(func() {
			rep, err := fn(cctx, i, n)
			if err != nil {
				if isQuarantined(err) {
					r.guard.suspect(i)
				}
				err = &NodeError{Node: n.String(), Err: err}
			}
			rd.ch <- nodeResult{i: i, reply: rep, err: err, at: time.Now()}
		})
	}
	return rd
}

// callers runs the rounds' node calls on goroutines it keeps between
// calls, at most max of them (busy or parked) at once. A node call goes
// deep into the node's client (go-redis), and a fresh goroutine grows its
// stack two or three times on the way, copying it each time. In an
// in-process benchmark of lockcore over three redis-server processes at
// one caller, stack growth was 22-24 % of the CPU; with kept goroutines it
// fell below the profile's threshold (the GC still halves a parked
// goroutine's stack when little of it is used, so some growth comes back
// after each GC). The same benchmark with the two builds alternating took
// 330-368 µs per acquire and release against 362-423 µs; in the throughput
// bench (two runs with and without, BENCHMARKS.md) acquire p50 at C = 1
// fell by 10 % and 12 %, while at C = 16 and 64 the two runs disagreed in
// sign.
//
// A kept goroutine keeps its stack (a few KB to a few tens of KB) until
// close. A call that finds none parked starts one, which runs only that
// call if max are kept already.
//
// Handing a call to a parked goroutine over a channel orders everything
// that goroutine did before (an earlier request's node call) before the new
// request's later steps: the race detector would no longer see a race
// between the two requests. Race builds (raceBuild) therefore start a
// goroutine per call, as before, unless a test turns keeping on
// (export_test.go).
type callers struct {
	keep bool        // false: a goroutine per call
	work chan func() // unbuffered: a send succeeds only to a parked goroutine
	stop chan struct{}
	once sync.Once
	max  int32
	live atomic.Int32 // kept goroutines, busy or parked
}

// maxCallers is the default callers.max: room for every node call of 64
// rounds over 3 nodes (192) in flight at once, and some more.
const maxCallers = 256

func newCallers(max int32, keep bool) *callers {
	return &callers{keep: keep, work: make(chan func()), stop: make(chan struct{}), max: max}
}

// run calls f on a parked goroutine, or on a new one. It never blocks.
func (c *callers) run(f func()) {
	if !c.keep {
		go f()
		return
	}
	select {
	case c.work <- f:
	default:
		go c.loop(f)
	}
}

// loop calls f, then the calls it is given, until close; or only f, if max
// goroutines are kept already.
func (c *callers) loop(f func()) {
	if c.live.Add(1) > c.max {
		c.live.Add(-1)
		f()
		return
	}
	defer c.live.Add(-1)
	for {
		f()
		f = nil // keep nothing of the last call while parked
		select {
		case f = <-c.work:
		case <-c.stop:
			return
		}
	}
}

// close makes every parked goroutine exit, and each busy one once its call
// ends (one that finds a call offered as it sees close may run that call
// first). Later calls run each on a goroutine that exits after it.
func (c *callers) close() { c.once.Do(func() { close(c.stop) }) }

// until reads answers until done reports true of the results so far, or
// every node has answered. done sees unheard nodes as errUnheard; nil
// waits for every node.
//
// Once done holds, the nodes still to answer get a grace period: until
// the round has taken twice as long as it had when a quorum of nodes had
// answered without an error, or when it was decided if that is later (at
// least pace.graceMin longer: the constant graceMin, except in tests).
// Healthy nodes answer within about the same time, and a round that hears
// every node needs no late handling (see Redlock.lateAcquire). Only a node
// slower than that is left behind.
// A node that is behind (see pace) gets no grace: a node that stays slow
// costs a grace only until it has missed behindAfter of them.
//
// Answering with no grace at all was measured on 2026-11-25 (bench
// TestThroughput, lockgate-3 and redsync-3, 2 rounds, one run after the
// other): acquire p50 at C = 1 went from 2.20 to 1.95 × redsync's, and
// uncontended pairs/s from 0.69 to 0.79 × at C = 16 and 0.76 to 0.90 × at
// C = 64. It was not kept: late answers then come with nearly every call,
// so rare paths become routine. A lease id the client chose got a copy
// with a higher token on the third node whenever its counter had moved
// (see Redlock.Extend for what that did to If-Match), a follower's first
// attempt often found the third node not yet granted to the holder (a
// split vote and a pause), and a release left a copy on a node that went
// down right after. Each is correct by the rules, but a user sees them.
// A node that stays slow brings them with every call whether the rounds
// wait a grace for it or not; waiting only made every call slower (see
// pace for what was measured).
func (rd *round) until(done func(rd *round) bool) {
	if !answerAtQuorum {
		done = nil
	}
	for rd.n < len(rd.results) && (done == nil || !done(rd)) {
		rd.hear(<-rd.ch, done != nil)
	}
	if rd.complete() {
		return
	}
	// Nor does the grace end before the round has taken twice as long as
	// it had when it was decided: on a busy machine the caller may notice
	// the quorum's answer well after it came.
	if end := rd.graceFrom(time.Now()); end.After(rd.graceEnd) {
		rd.graceEnd = end
	}
	if !rd.waiting() {
		return // every node still to answer is behind
	}
	rd.pace.graces.Add(1)
	grace := time.NewTimer(time.Until(rd.graceEnd))
	defer grace.Stop()
	for rd.waiting() {
		select {
		case res := <-rd.ch:
			rd.hear(res, true)
		case <-grace.C:
			rd.ranOut = true
			for i, heard := range rd.heard {
				if !heard {
					rd.pace.judge(i, rd.seq, false)
				}
			}
			return
		}
	}
}

// hear records an answer. Of a round that may be decided early (timed), it
// also judges whether the node answered in time: the answer that makes a
// quorum of answers without an error sets when the grace ends. An error
// does not count towards it: a node that fails at once (down, refusing
// connections) would otherwise end the grace early, and the node that the
// round then needs for its quorum would look slow.
func (rd *round) hear(res nodeResult, timed bool) {
	rd.read(res)
	if !timed {
		return
	}
	if res.err == nil {
		rd.answered++
		if rd.answered == rd.quorum && rd.graceEnd.IsZero() {
			rd.graceEnd = rd.graceFrom(res.at)
		}
	}
	rd.pace.judge(res.i, rd.seq, rd.graceEnd.IsZero() || !res.at.After(rd.graceEnd))
}

// graceFrom returns when a grace that begins at t ends: once the round has
// taken twice as long as it had at t, and at least pace.graceMin after t.
func (rd *round) graceFrom(t time.Time) time.Time {
	return t.Add(max(t.Sub(rd.began), rd.pace.graceMin))
}

// judgeLate judges an answer that came after the round was decided. Late
// answers come from nodes unheard at the decision; if the grace ran out,
// those were judged late then, and are judged again only if the answer had
// come by then (it was waiting to be read).
func (rd *round) judgeLate(res nodeResult) {
	if rd.graceEnd.IsZero() { // rest runs for decided rounds only, whose until set it
		return
	}
	if inTime := !res.at.After(rd.graceEnd); inTime || !rd.ranOut {
		rd.pace.judge(res.i, rd.seq, inTime)
	}
}

// waiting reports whether a node the grace waits for has not answered yet:
// one that is not behind.
func (rd *round) waiting() bool {
	for i, heard := range rd.heard {
		if !heard && !rd.pace.behind(i) {
			return true
		}
	}
	return false
}

// pace is what a Redlock's rounds remember of each node's speed, so that a
// node that stays slow does not slow every call by a grace (see until).
//
// A round that may be decided early judges each answer: it is in time if
// it came before a quorum had answered without an error, or by the end of the grace (see
// until), whether the round waited for it or had already been decided; a
// node that has not answered when the round's grace runs out missed it.
// Rounds that wait for every node because they fail or the answers
// disagree judge their answers the same way, by the grace they would have
// given. A node is behind once it has missed behindAfter graces in a row,
// until it answers a round in time. Rounds that hear every node by design
// (fanout: health checks) judge nothing. Rounds are numbered when they start, and an
// answer to a round older than the newest one already judged for the node
// is not judged, so a node's state follows its newest calls.
//
// Only speed is remembered, never an answer: a node that is behind is
// asked as always, counts for the quorum as soon as it answers, and its
// late answers are acted on as those of any node that missed a grace. So
// no rule of the package doc depends on pace.
//
// Measured on 2026-11-26 (a scratch run of the throughput bench's
// uncontended case, C = 16, the third server's replies 30 ms late, 5 s
// each, lockgate-3 and lockgate-3-slow alternating twice, this code and the
// code before it one after the other): with a grace for every call the
// slow cluster kept 0.56 and 0.63 of the healthy one's pairs/s, with pace
// 0.93 and 0.91; the healthy figures were within the machine's noise
// (3,680 and 3,515 pairs/s with pace, 3,501 and 3,281 without). See BENCHMARKS.md for the
// full bench.
type pace struct {
	// nodes holds, by node, the number of the newest round judged for it
	// (shifted left by 2) and how many graces in a row it missed (the low
	// 2 bits, at most 3).
	nodes  []atomic.Uint64
	rounds atomic.Uint64 // the last round number given
	graces atomic.Int64  // rounds that waited a grace, for tests
	// graceMin is the least grace: graceMin, or longer in tests whose
	// timing must not depend on a busy machine's scheduling.
	graceMin time.Duration
}

// behindAfter is how many graces in a row a node must miss to be behind:
// one miss may be a healthy node held up for a moment on a busy machine.
const behindAfter = 2

// behind reports whether node i is behind.
func (p *pace) behind(i int) bool { return p.nodes[i].Load()&3 >= behindAfter }

// judge records that node i answered round seq in time or not, unless a
// newer round was judged for it already.
func (p *pace) judge(i int, seq uint64, inTime bool) {
	for {
		old := p.nodes[i].Load()
		if old>>2 > seq {
			return
		}
		misses := old & 3
		switch {
		case inTime:
			misses = 0
		case misses < 3:
			misses++
		}
		if p.nodes[i].CompareAndSwap(old, seq<<2|misses) {
			return
		}
	}
}

// answerAtQuorum switches early answers on: acquisitions, hand-offs,
// extends, releases, fencing write-backs and reads are answered at the
// first quorum (see until and Redlock.checked). Off, every round hears
// every node (up to NodeTimeout) and no answer comes late.
//
// Its history, all on 2026-11-23. Extends and releases answered early
// first made the fault suite (package chaos) report "a holder's release
// answered 404 with about 950 ms of its validity left" (2 of 2 short
// runs), so they were made to wait for every node; the same report then
// came with early acquisitions alone, and the switch went off. Both
// reports were explained:
//   - the 404: releases sent to a gateway paused for 2 s, which acted on
//     them after the validity had run out, so "not held" was true. Check A
//     now excuses exactly that case and logs how often it happened (4
//     times in a 12-minute run);
//   - "a lease's first acquire answered 200" (1 run of 22): a waiting
//     request that joined a queue without trying forgot its retry check's
//     finding, so a hand-off whose grant was lost, then a round with a
//     node down, read as a retry. That happened with the switch off too.
//     It is fixed (testAFailedHandOffLeavesTheNextRoundAFirstGrant).
//
// With early acquisitions after the fix, 10 short runs and one 12-minute
// run, all with -race, passed. Extends, releases and hand-offs were then
// answered early too, and the fault suite passed with -race in every run
// since: short runs and 12-minute runs (RELIABILITY.md is one of the
// latter).
const answerAtQuorum = true

// graceMin is the least time a decided round waits for the nodes still to
// answer (see until).
const graceMin = 500 * time.Microsecond

func (rd *round) read(res nodeResult) {
	rd.results[res.i], rd.heard[res.i] = res, true
	rd.n++
}

// complete reports whether every node has answered.
func (rd *round) complete() bool { return rd.n == len(rd.results) }

// rest ends the round: the answers still to come, if any, are passed to
// late one by one in a goroutine, after which the calls' context is
// released. With late nil they are dropped. After rest, results and heard
// are the caller's alone: rest's goroutine reads only graceEnd, ranOut and
// seq (judgeLate), never results or heard, which callers still read and
// write (checked, Inspect, fanout).
func (rd *round) rest(late func(nodeResult)) {
	rd.decided.Store(true)
	if rd.ch == nil {
		return
	}
	if rd.complete() {
		rd.stop()
		rd.cancel()
		return
	}
	pending := len(rd.results) - rd.n
	rd.bg.add()
	go func() {
		defer rd.bg.done()
		for range pending {
			res := <-rd.ch
			rd.judgeLate(res)
			if late != nil {
				late(res)
			}
		}
		rd.stop()
		rd.cancel()
		if rd.after != nil {
			rd.after()
		}
	}()
}

// background counts the rounds whose late answers are still being acted on
// (see round.rest). Tests wait on it (export_test.go) before they read the
// nodes: a round decided at a quorum may leave a node's call under way.
type background struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0; nil while nobody waits
}

func (b *background) add() {
	b.mu.Lock()
	b.n++
	b.mu.Unlock()
}

func (b *background) done() {
	b.mu.Lock()
	if b.n--; b.n == 0 && b.idle != nil {
		close(b.idle)
		b.idle = nil
	}
	b.mu.Unlock()
}

// wait returns once no round has late answers left to act on: each ends by
// its calls' deadlines.
func (b *background) wait() {
	b.mu.Lock()
	if b.n == 0 {
		b.mu.Unlock()
		return
	}
	if b.idle == nil {
		b.idle = make(chan struct{})
	}
	idle := b.idle
	b.mu.Unlock()
	<-idle
}

// fanout calls fn on every node in parallel, each bounded by NodeTimeout,
// and returns the results indexed by node once every node has answered.
func (r *Redlock) fanout(ctx context.Context, fn func(ctx context.Context, i int, n Node) (NodeReply, error)) []nodeResult {
	rd := r.start(ctx, fn)
	rd.until(nil)
	rd.rest(nil)
	return rd.results
}

// lateLease is a lease whose acquisition round was decided before every
// node had answered, while the late answers are acted on (see
// Redlock.lateAcquire). Two things follow:
//   - a node may grant it after the caller released it (the release can
//     reach that node first), so a Release of the lease marks it released,
//     and a grant heard after the mark is released again;
//   - acting on a late answer (undoing a grant, giving back a copy with a
//     higher token) must not touch a copy that a later round of the same
//     lease made: the next round of a waiting Acquire, or a client's retry
//     with the same lease id. So a round for the lease first waits, through
//     this Redlock, until the earlier round's late answers are done (at
//     most a node timeout). Another gateway replica does not know of it.
type lateLease struct {
	key      string
	released atomic.Bool
	done     chan struct{} // closed when the late answers are acted on
}

// lateLeases tracks the leases whose acquisition still has calls under way.
type lateLeases struct {
	n  atomic.Int32 // len(m), read without the lock on the hot path
	mu sync.Mutex
	m  map[string]*lateLease
}

func lateKey(resource, lease string) string { return resource + "\x00" + lease }

// begin starts tracking a lease; end stops it.
func (ls *lateLeases) begin(resource, lease string) *lateLease {
	l := &lateLease{key: lateKey(resource, lease), done: make(chan struct{})}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.m == nil {
		ls.m = map[string]*lateLease{}
	}
	ls.m[l.key] = l
	ls.n.Store(int32(len(ls.m)))
	return l
}

func (ls *lateLeases) end(l *lateLease) {
	ls.mu.Lock()
	if ls.m[l.key] == l {
		delete(ls.m, l.key)
	}
	ls.n.Store(int32(len(ls.m)))
	ls.mu.Unlock()
	close(l.done)
}

func (ls *lateLeases) get(resource, lease string) *lateLease {
	if ls.n.Load() == 0 {
		return nil
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.m[lateKey(resource, lease)]
}

// release marks the lease released, if it is tracked.
func (ls *lateLeases) release(resource, lease string) {
	if l := ls.get(resource, lease); l != nil {
		l.released.Store(true)
	}
}

// wait returns once no earlier round of the lease has late answers still
// to act on, or ctx has ended.
func (ls *lateLeases) wait(ctx context.Context, resource, lease string) {
	for l := ls.get(resource, lease); l != nil; l = ls.get(resource, lease) {
		select {
		case <-l.done:
		case <-ctx.Done():
			return
		}
	}
}
