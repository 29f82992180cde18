package lockcore

import (
	"context"
	"errors"
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
		rd.failAll(r.nodes, err)
		return rd
	}
	for i := range r.nodes {
		rd.results[i] = nodeResult{i: i, err: r.unheard[i]}
	}
	rd.ch = make(chan nodeResult, len(r.nodes))
	cctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), callDeadline(ctx, r.opt.NodeTimeout))
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
				err = r.callError(i, n, err)
			}
			rd.ch <- nodeResult{i: i, reply: rep, err: err, at: time.Now()}
		})
	}
	return rd
}

// callError is what a round's result holds for node i (n) whose call
// failed with err: a *NodeError, once the guard is told of a node that
// reports itself quarantined.
func (r *Redlock) callError(i int, n Node, err error) error {
	if isQuarantined(err) {
		r.guard.suspect(i)
	}
	return &NodeError{Node: n.String(), Err: err}
}

// failAll completes the round at once: every node answers err.
func (rd *round) failAll(nodes []Node, err error) {
	for i, n := range nodes {
		rd.results[i] = nodeResult{i: i, err: &NodeError{Node: n.String(), Err: err}}
		rd.heard[i] = true
	}
	rd.n = len(nodes)
}

// callDeadline is the deadline of a round's calls: timeout from now, or
// ctx's deadline if sooner.
func callDeadline(ctx context.Context, timeout time.Duration) time.Time {
	deadline := time.Now().Add(timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	return deadline
}

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
// The grace keeps late answers rare, though answering with none would be
// faster: with no grace, late answers come with nearly every call, and
// rare paths become routine. A lease id the client chose gets a copy with
// a higher token on the last node whenever its counter has moved (see
// Redlock.Extend for what that does to If-Match), a follower's first
// attempt often finds the last node not yet granted to the holder (a
// split vote and a pause), and a release leaves a copy on a node that
// goes down right after. Each is correct by the rules, but a user sees
// them. A node that stays slow brings them with every call whether the
// rounds wait a grace for it or not, and waiting for it would only make
// every call slower: hence pace.
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
			rd.graceRanOut()
			return
		}
	}
}

// graceRanOut records that the round's grace ran out: every node unheard
// then missed it (see pace).
func (rd *round) graceRanOut() {
	rd.ranOut = true
	for i, heard := range rd.heard {
		if !heard {
			rd.pace.judge(i, rd.seq, false)
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

// answerAtQuorum switches early answers on: acquisitions, hand-offs,
// extends, releases, fencing write-backs and reads are answered at the
// first quorum (see until and Redlock.checked). Off, every round hears
// every node (up to NodeTimeout) and no answer comes late: the way to
// tell whether a finding of the fault suite (package chaos) comes from
// early answers.
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

// fanout calls fn on every node in parallel, each bounded by NodeTimeout,
// and returns the results indexed by node once every node has answered.
func (r *Redlock) fanout(ctx context.Context, fn func(ctx context.Context, i int, n Node) (NodeReply, error)) []nodeResult {
	rd := r.start(ctx, fn)
	rd.until(nil)
	rd.rest(nil)
	return rd.results
}
