package lockcore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockgate/lockgate/internal/unprotected"
	"github.com/lockgate/lockgate/lockcore/internal/quorum"
)

// Clock tells time and sets timers, for everything a Redlock times:
// validity, retry hints, and every wait (its deadline, the retries of a
// waiting Acquire, its pauses). Elapsed time is measured as
// Now().Sub(start), which uses Go's monotonic clock for the real clock;
// tests inject a fake (nodetest.Clock). Node calls are bounded by the
// node timeout (Options.NodeTimeout to MaxNodeTimeout) in real time
// whatever the clock, and so is the grace a round gives the nodes still to
// answer (see quorum.Run): both measure how long the nodes take to answer,
// which no fake clock governs.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed on this
	// clock (at once when d <= 0), unless stop is called first; stop
	// reports whether it prevented the call.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }

// Options tune a Redlock. A nil *Options or a zero field means the default
// documented on the field.
type Options struct {
	// NodeTimeout bounds each call to one node while the nodes answer
	// quickly, from the moment the call is made: time spent waiting in the
	// node's client (package redisnode queues calls behind the round trip
	// in flight and pipelines them) counts. Default 50ms. A call that a
	// quorum has settled does not wait for the other nodes (see the
	// package doc), so a slow or hung minority costs nothing; the bound
	// matters when fewer than a quorum answer in time, and the call then
	// fails with *QuorumError. When a quorum of nodes answers slower than
	// this (a gateway whose CPU is saturated by other work, where calls
	// wait to be scheduled), the bound follows them up to MaxNodeTimeout.
	// It must be at most half of MinTTL, so that the shortest lock keeps
	// half its TTL when its acquisition took the whole of NodeTimeout: a
	// lock's validity is its TTL minus the time spent acquiring (see
	// MaxNodeTimeout for slower acquisitions).
	NodeTimeout time.Duration
	// MaxNodeTimeout is the most a call to one node is ever given: the
	// node timeout follows the latency the nodes show, three times the
	// decaying maximum of the answer times of the quorum-th fastest node,
	// from NodeTimeout up to MaxNodeTimeout (package quorum, rule 8), so
	// that load that slows every node makes calls slower, not failed. A
	// slow, hung or failing minority never raises it. Default 10 ×
	// NodeTimeout (500ms with the default), at most half of MaxTTL; set it
	// to NodeTimeout to keep the bound fixed. What it guarantees: no node
	// call lasts longer, so an operation that a majority does not answer
	// fails within it (rather than NodeTimeout once the majority's failures
	// have raised the timeout), and a node that lost data stays out of
	// service for MaxTTL, its drift allowance and MaxNodeTimeout (see
	// quarantine). Validity stays measured: a lock acquired by slower
	// calls is valid for less of its TTL, and one whose acquisition took
	// its whole TTL fails with ErrValidityExhausted, its grants undone. It
	// must be at least NodeTimeout and at most half of MaxTTL.
	MaxNodeTimeout time.Duration
	// DriftFactor is the share of the TTL set aside for clock drift between
	// nodes; 2 ms are added to it. Default 0.01. A lease's validity is its
	// TTL less the time its acquisition or extension took less this
	// allowance: with the default, a 1 s TTL granted at once is valid for
	// 988 ms.
	DriftFactor float64
	// MinTTL and MaxTTL bound lock TTLs. Defaults 100ms and 1h.
	MinTTL, MaxTTL time.Duration
	// MaxWait bounds how long an Acquire may wait for a held lock. Default 5m.
	MaxWait time.Duration
	// MaxWaiters bounds the Acquire calls waiting at once on this Redlock;
	// past it Acquire returns ErrTooManyWaiters. Default 10000.
	MaxWaiters int
	// Clock is the time source of validity, retry hints and waits, and
	// the timers of waits. Default: the real clock.
	Clock Clock
	// Observer is told of node calls, quorum failures and fencing
	// write-backs, for metrics, and of node state changes if it is a
	// HealthObserver. Default: nobody.
	Observer Observer
	// CheckInterval is how often every node is checked for lost data,
	// refused writes and the end of its quarantine (see the package doc).
	// Default 1s.
	CheckInterval time.Duration
}

func (o *Options) withDefaults() Options {
	var v Options
	if o != nil {
		v = *o
	}
	if v.NodeTimeout <= 0 {
		v.NodeTimeout = 50 * time.Millisecond
	}
	if v.DriftFactor <= 0 {
		v.DriftFactor = 0.01
	}
	if v.MinTTL <= 0 {
		v.MinTTL = 100 * time.Millisecond
	}
	if v.MaxTTL <= 0 {
		v.MaxTTL = time.Hour
	}
	if v.MaxNodeTimeout <= 0 {
		// Ten times: the overload that saturates a gateway's CPU shows
		// answers a few times the quiet bound, and three times that is
		// what a call is given (quorum's timeoutFactor); more would only
		// make a call that a majority fails wait longer. Within half of
		// MaxTTL, so that a default never contradicts the TTL bounds.
		v.MaxNodeTimeout = max(v.NodeTimeout, min(10*v.NodeTimeout, v.MaxTTL/2))
	}
	if v.MaxWait <= 0 {
		v.MaxWait = 5 * time.Minute
	}
	if v.MaxWaiters <= 0 {
		v.MaxWaiters = 10000
	}
	if v.Clock == nil {
		v.Clock = realClock{}
	}
	if v.Observer == nil {
		v.Observer = nopObserver{}
	}
	if v.CheckInterval <= 0 {
		v.CheckInterval = time.Second
	}
	return v
}

// Redlock grants locks over a fixed set of independent nodes. It is safe for
// concurrent use. With one node it is a plain single-instance lock.
type Redlock struct {
	nodes  []Node
	quorum int
	opt    Options
	waits  *waitRoom
	calls  []Node // nodes as fanout calls them: reported to opt.Observer
	// id names this Redlock to the nodes (NodeAcquire.Replica): random, not
	// secret.
	id string
	// handOff is true when every node is a HandOffer.
	handOff bool
	guard   *guard
	// unprotected is set when every node runs with the data-loss
	// protection off (internal/unprotected: tests only): the guard then
	// only checks, and no lagging counter is raised in the background.
	unprotected bool
	lates       lateLeases // acquisitions answered with calls still under way
	// rwWaiting counts the readers-writer acquisitions waiting now (see
	// AcquireRW): they count against MaxWaiters and in Waiting.
	rwWaiting atomic.Int64
	bg        background // late answers being acted on, fencing catch-ups
	// retries are the undo retries under way (retryUndo): Close waits for
	// them too, but Settle does not, since one may last a lock's TTL.
	retries sync.WaitGroup
	// q makes the rounds' calls: each node's pace, the kept goroutines.
	q *quorum.Group
	// unheard holds, by node, the result a round holds until the node
	// answers (errUnheard): made once, shared by every round.
	unheard []nodeResult
}

// New returns a Redlock over nodes. It fails with ErrInvalid when there are
// no nodes or the options contradict each other.
func New(nodes []Node, opts *Options) (*Redlock, error) {
	if len(nodes) == 0 || len(nodes) > 63 {
		return nil, &InvalidError{Field: "nodes", Reason: "between 1 and 63 nodes are needed"}
	}
	o := opts.withDefaults()
	if o.MinTTL > o.MaxTTL {
		return nil, &InvalidError{Field: "ttl bounds", Reason: fmt.Sprintf("minimum %v is above maximum %v", o.MinTTL, o.MaxTTL)}
	}
	if o.NodeTimeout*2 > o.MinTTL {
		return nil, &InvalidError{Field: "node timeout", Reason: fmt.Sprintf("%v leaves too little validity for the minimum TTL %v; keep it at most half of it", o.NodeTimeout, o.MinTTL)}
	}
	if o.MaxNodeTimeout < o.NodeTimeout {
		return nil, &InvalidError{Field: "max node timeout", Reason: fmt.Sprintf("%v is below the node timeout %v; equal keeps the node timeout fixed", o.MaxNodeTimeout, o.NodeTimeout)}
	}
	if o.MaxNodeTimeout*2 > o.MaxTTL {
		return nil, &InvalidError{Field: "max node timeout", Reason: fmt.Sprintf("%v leaves too little validity for the maximum TTL %v; keep it at most half of it", o.MaxNodeTimeout, o.MaxTTL)}
	}
	if o.DriftFactor >= 0.5 {
		return nil, &InvalidError{Field: "drift factor", Reason: "must be below 0.5"}
	}
	r := &Redlock{nodes: slices.Clone(nodes), quorum: len(nodes)/2 + 1, opt: o, id: NewLeaseID()[:16], handOff: true}
	for _, n := range nodes {
		if _, ok := n.(HandOffer); !ok {
			r.handOff = false
		}
	}
	r.unprotected = unprotected.All(nodes)
	r.unheard = unheardResults(r.nodes)
	r.q = quorum.New(r.quorumConfig(0, keptCallers())) // before the guard, which times its checks by it
	r.waits = newWaitRoom(r)
	r.calls = observeNodes(r.nodes, o.Observer)
	r.guard = newGuard(r)
	return r, nil
}

// MinValidity is the least validity a lease is granted or extended with:
// less is reported as ErrValidityExhausted. The HTTP API counts validity in
// whole milliseconds, so a lease always has at least 1 to report.
const MinValidity = time.Millisecond

// Quorum is the number of nodes that must agree: N/2+1.
func (r *Redlock) Quorum() int { return r.quorum }

// Nodes returns the nodes in the order they were given.
func (r *Redlock) Nodes() []Node { return slices.Clone(r.nodes) }

// Limits returns the effective TTL and wait bounds.
func (r *Redlock) Limits() (minTTL, maxTTL, maxWait time.Duration) {
	return r.opt.MinTTL, r.opt.MaxTTL, r.opt.MaxWait
}

// Close ends every wait in progress with ErrClosed, stops checking the
// nodes, lets go of the goroutines kept for node calls (up to 256 stay
// parked between calls until then), and returns once every goroutine the
// Redlock started in the background has ended: the guard's, those that act
// on late answers (each ends by its calls' node timeout, at most
// MaxNodeTimeout), and the fencing
// catch-ups. Later Acquire calls with a wait fail with ErrClosed; other
// calls still work (their node calls on goroutines that are not kept), but
// a node that loses data after Close is no longer found. Close may be
// called more than once.
func (r *Redlock) Close() {
	r.waits.close()
	r.guard.close() // retryUndo ends once the guard stops
	r.retries.Wait()
	r.bg.wait()
	r.q.Close()
}

// drift is the clock drift allowance of a lock with this TTL:
// Options.DriftFactor of it plus 2 ms.
func (r *Redlock) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*r.opt.DriftFactor) + 2*time.Millisecond
}

// validity is how long a lock set with ttl on the nodes at start is known
// to stand from now: the TTL, less the time since start, less the drift
// allowance. The one definition behind Lease.Validity and
// LockInfo.Remaining; below MinValidity a grant or extension fails.
func (r *Redlock) validity(start, now time.Time, ttl time.Duration) time.Duration {
	return ttl - now.Sub(start) - r.drift(ttl)
}

// ended returns ctx's error, or context.DeadlineExceeded once its deadline
// has passed even if its timer has not fired yet: a node's socket deadline,
// set from the same deadline, can end a call first, and a lease must not
// be given to a caller whose deadline has passed.
func ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

func withCtx(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return errors.Join(ctx.Err(), err)
	}
	return err
}
