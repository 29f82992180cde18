package quorum

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// Answer is one node's answer to a call. Failed reports whether it is a
// failure, which does not count towards the quorum of answers that sets
// the grace (rule 2).
type Answer interface{ Failed() bool }

// DefaultGraceMin is the least grace (rule 2) unless Config says
// otherwise.
const DefaultGraceMin = 500 * time.Microsecond

// Config describes a Group.
type Config struct {
	Nodes  int // how many nodes every call goes to
	Quorum int // how many answers that are not failures set the grace
	// Timeout bounds each node call (rule 8) while the nodes answer
	// quickly, and always when MaxTimeout is not above it.
	Timeout time.Duration
	// MaxTimeout bounds each node call whatever the nodes' latency (rule
	// 8): a call's timeout follows the answer times of the nodes, from
	// Timeout up to MaxTimeout. 0, or any value not above Timeout, means
	// no adaptation: Timeout alone.
	MaxTimeout time.Duration
	// GraceMin is the least grace (rule 2); 0 means DefaultGraceMin.
	GraceMin time.Duration
	// Kept is how many goroutines are kept for node calls (rule 10); 0
	// keeps none.
	Kept int
	// Spawn runs f on a goroutine of its own: where Rest acts on the late
	// answers, so that the Group's owner can count and await them. nil
	// means go f().
	Spawn func(f func())
}

// A Group is the state that the calls over one set of nodes share: each
// node's pace and the goroutines kept for the node calls. It is safe for
// concurrent use.
type Group struct {
	cfg     Config
	pace    pace
	lat     latency
	adapts  bool // MaxTimeout is above Timeout: lat is kept (rule 8)
	callers *callers
	graces  atomic.Int64 // calls that waited a grace
}

// New returns a Group of cfg.Nodes nodes.
func New(cfg Config) *Group {
	if cfg.GraceMin <= 0 {
		cfg.GraceMin = DefaultGraceMin
	}
	if cfg.Spawn == nil {
		cfg.Spawn = func(f func()) { go f() }
	}
	g := &Group{cfg: cfg, callers: newCallers(cfg.Kept), adapts: cfg.MaxTimeout > cfg.Timeout}
	g.pace.nodes = make([]atomic.Uint64, cfg.Nodes)
	g.lat.epoch = time.Now()
	g.lat.nodes = make([]atomic.Uint64, cfg.Nodes)
	return g
}

// Close lets go of the kept goroutines: each exits once its node call
// ends. Later calls still work, each node call on a goroutine of its own.
// Close may be called more than once.
func (g *Group) Close() { g.callers.close() }

// Behind reports whether node i is behind: no call waits a grace for it
// (rule 6).
func (g *Group) Behind(i int) bool { return g.pace.behind(i) }

// Missed returns how many graces in a row node i has missed (at most 3).
func (g *Group) Missed(i int) int { return g.pace.missed(i) }

// Timeout returns the timeout a call made now gives its node calls (rule
// 8): between Config.Timeout and Config.MaxTimeout.
func (g *Group) Timeout() time.Duration { return g.timeoutAt(time.Now()) }

// Estimate returns node i's latency estimate now (rule 8): 0 when the
// Group does not adapt its timeout.
func (g *Group) Estimate(i int) time.Duration { return g.lat.estimate(i, time.Now()) }

// timeoutAt is the timeout of a call made at t (rule 8).
func (g *Group) timeoutAt(t time.Time) time.Duration {
	if !g.adapts {
		return g.cfg.Timeout
	}
	var inline [8]time.Duration
	ests := inline[:0]
	if len(g.lat.nodes) > len(inline) {
		ests = make([]time.Duration, 0, len(g.lat.nodes))
	}
	for i := range g.lat.nodes {
		ests = append(ests, g.lat.estimate(i, t))
	}
	return callTimeout(ests, g.cfg.Quorum, g.cfg.Timeout, g.cfg.MaxTimeout)
}

// observe adds to node i's estimate the sample that its answer, which
// came at at, gives (rule 8).
func (g *Group) observe(i int, began, at, deadline time.Time, failed, canceled bool) {
	if !g.adapts {
		return
	}
	if d, ok := sample(began, at, deadline, failed, canceled); ok {
		g.lat.observe(i, d, at)
	}
}

// Graces returns how many calls have waited a grace for a node.
func (g *Group) Graces() int64 { return g.graces.Load() }

// Kept returns how many goroutines are kept for node calls, busy or
// parked.
func (g *Group) Kept() int { return int(g.callers.live.Load()) }

// View is the answers of a call so far, by node: Answers[i] is node i's
// answer when Heard[i], and the call's placeholder for it otherwise.
type View[A Answer] struct {
	Answers []A
	Heard   []bool
}

// A Call is one call over a Group's nodes (see Run).
type Call[A Answer] struct {
	g       *Group
	answers []A
	isHeard []bool
	n       int    // answers heard
	seq     uint64 // the call's number in pace
	// deadline is when the node calls' contexts end (rule 8).
	deadline time.Time
	phase    phase
	timing   timing
	ranOut   bool // the grace expired: every node unheard then was judged late
	ch       chan reply[A]
	decided  atomic.Bool // Rest was called: the caller no longer cancels the calls
	// left is set before the caller's leaving cancels the calls (rule 7):
	// their failures then say nothing of the nodes' latency.
	left   atomic.Bool
	cancel context.CancelFunc
	unlink func() bool // stops the link from the caller's context
	// inline holds answers and isHeard for up to 5 nodes, so that they
	// need no allocation of their own.
	inline struct {
		answers [5]A
		heard   [5]bool
	}
}

// reply is a node's answer and when it came.
type reply[A Answer] struct {
	i  int
	a  A
	at time.Time
}

// Answered returns a call that is complete at once, every node having
// answered answers (one per node): for a caller that fails a call
// without making it.
func Answered[A Answer](answers []A) *Call[A] {
	c := &Call[A]{answers: answers, isHeard: make([]bool, len(answers)), n: len(answers)}
	for i := range c.isHeard {
		c.isHeard[i] = true
	}
	return c
}

// Run calls call on every node of g in parallel and reads the answers
// until holds reports true of those heard (nil: until every node has
// answered), then gives the nodes still to answer their grace (see the
// package doc). unheard holds, by node, the answer a node has until it
// answers; call gets a context bounded by rule 8.
//
// The caller must call Rest once it has read the answers.
func Run[A Answer](ctx context.Context, g *Group, unheard []A, call func(ctx context.Context, i int) A, holds func(View[A]) bool) *Call[A] {
	c := &Call[A]{g: g, timing: timing{began: time.Now()}, seq: g.pace.calls.Add(1)}
	n := len(unheard)
	if n <= len(c.inline.answers) {
		c.answers, c.isHeard = c.inline.answers[:n], c.inline.heard[:n]
	} else {
		c.answers, c.isHeard = make([]A, n), make([]bool, n)
	}
	copy(c.answers, unheard)
	c.ch = make(chan reply[A], n)
	c.deadline = callDeadline(ctx, c.timing.began, g.timeoutAt(c.timing.began))
	cctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), c.deadline)
	c.cancel = cancel
	if errors.Is(ctx.Err(), context.Canceled) {
		c.left.Store(true)
		cancel() // no call of a caller that has left starts
	}
	c.unlink = context.AfterFunc(ctx, func() {
		// A deadline needs no cancel: the calls' own is no later.
		if !c.decided.Load() && errors.Is(ctx.Err(), context.Canceled) {
			c.left.Store(true)
			cancel()
		}
	})
	for i := range n {
		g.callers.run(func() {
			a := call(cctx, i)
			c.ch <- reply[A]{i: i, a: a, at: time.Now()}
		})
	}
	c.until(holds)
	return c
}

// All calls call on every node of g and returns the answers once every
// node has answered.
func All[A Answer](ctx context.Context, g *Group, unheard []A, call func(ctx context.Context, i int) A) []A {
	c := Run(ctx, g, unheard, call, nil)
	c.Rest(nil, nil)
	return c.answers
}

// callDeadline is the deadline of the node calls of a call made at now:
// timeout from now, or ctx's deadline if sooner (rule 8).
func callDeadline(ctx context.Context, now time.Time, timeout time.Duration) time.Time {
	deadline := now.Add(timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	return deadline
}

// View returns the answers so far. After Rest, they are the caller's alone.
func (c *Call[A]) View() View[A] { return View[A]{Answers: c.answers, Heard: c.isHeard} }

// Answers returns the answers by node; a node not heard has its
// placeholder (see Run).
func (c *Call[A]) Answers() []A { return c.answers }

// Complete reports whether every node has answered.
func (c *Call[A]) Complete() bool { return c.n == len(c.answers) }

// until carries out decide's steps.
func (c *Call[A]) until(holds func(View[A]) bool) {
	timed := holds != nil
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		switch decide(c.view(holds)) {
		case read:
			c.hear(<-c.ch, timed)
		case begin:
			c.beginGrace()
		case await:
			if timer == nil {
				timer = time.NewTimer(time.Until(c.timing.end))
			}
			select {
			case r := <-c.ch:
				c.hear(r, true)
			case <-timer.C:
			}
		case expire:
			c.expire()
			return
		default:
			return
		}
	}
}

// view gathers what decide looks at; the policy is asked only while the
// call is open, and pace only in the grace.
func (c *Call[A]) view(holds func(View[A]) bool) view {
	v := view{phase: c.phase, complete: c.Complete(), graceEnd: c.timing.end}
	switch {
	case v.complete:
	case c.phase == open:
		v.holds = holds != nil && holds(c.View())
	default:
		v.waiting, v.now = c.waiting(), time.Now()
	}
	return v
}

// beginGrace ends the open phase (rule 2).
func (c *Call[A]) beginGrace() {
	c.phase = grace
	c.timing = c.timing.decided(time.Now(), c.g.cfg.GraceMin)
	if c.waiting() {
		c.g.graces.Add(1)
	}
}

// expire records that the grace ended: every node unheard then missed it
// (rule 4).
func (c *Call[A]) expire() {
	c.ranOut = true
	for i, h := range c.isHeard {
		if !h {
			c.g.pace.judge(i, c.seq, false)
		}
	}
}

// hear records an answer and adds it to the node's latency (rule 8);
// timed, it also judges it (rule 5).
func (c *Call[A]) hear(r reply[A], timed bool) {
	c.answers[r.i], c.isHeard[r.i] = r.a, true
	c.n++
	c.g.observe(r.i, c.timing.began, r.at, c.deadline, r.a.Failed(), c.left.Load())
	if !timed {
		return
	}
	var inTime bool
	c.timing, inTime = c.timing.hear(r.at, r.a.Failed(), c.g.cfg.Quorum, c.g.cfg.GraceMin)
	c.g.pace.judge(r.i, c.seq, inTime)
}

// waiting reports whether a node the grace waits for has not answered
// yet: one that is not behind (rule 3).
func (c *Call[A]) waiting() bool {
	for i, h := range c.isHeard {
		if !h && !c.g.pace.behind(i) {
			return true
		}
	}
	return false
}

// Rest ends the call: the answers still to come, if any, are passed to
// late one by one, in the order they come, on a goroutine started by
// Config.Spawn, after which after (if not nil) is called on it. A
// complete call passes nothing and never calls after. From Rest on, the
// caller's context no longer cancels the node calls (rule 7), and the
// answers and View are the caller's alone: the goroutine reads neither.
// Rest must be called exactly once.
func (c *Call[A]) Rest(late func(A), after func()) {
	c.decided.Store(true)
	if c.ch == nil { // Answered
		return
	}
	if c.Complete() {
		c.unlink()
		c.cancel()
		return
	}
	pending := len(c.answers) - c.n
	graceEnd, ranOut := c.timing.end, c.ranOut
	began, deadline := c.timing.began, c.deadline
	c.g.cfg.Spawn(func() {
		for range pending {
			r := <-c.ch
			// left is final: Rest has ended the caller's cancel (rule 7).
			c.g.observe(r.i, began, r.at, deadline, r.a.Failed(), c.left.Load())
			if judged, inTime := judgeLate(r.at, graceEnd, ranOut); judged {
				c.g.pace.judge(r.i, c.seq, inTime)
			}
			if late != nil {
				late(r.a)
			}
		}
		c.unlink()
		c.cancel()
		if after != nil {
			after()
		}
	})
}
