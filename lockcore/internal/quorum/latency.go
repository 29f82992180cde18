package quorum

import (
	"math"
	"sync/atomic"
	"time"
)

// timeoutFactor is k in rule 8: a call's timeout is k times the
// quorum-th smallest estimate. The estimate is the worst answer time seen
// lately, and on a saturated CPU the next answer may take a few times the
// last bad one (it waits behind whatever else is runnable); 3 leaves that
// room, and lets a call that failed at the base timeout (censored: its
// estimate becomes the base) be followed by calls with three times as
// long, so that a cluster that slowed all at once needs one failing call,
// two if it slowed by more than 3×, before calls succeed again.
const timeoutFactor = 3

// halfLife is how fast an estimate forgets (rule 8): a sample counts half
// as much after halfLife. Seconds, because overload comes and goes over
// seconds (a CPU-bound neighbour, a GC cycle, a CI step): the timeout must
// hold across the gaps between slow moments, or each new one would fail
// a batch of calls again. Decay is by time, not by the number of calls,
// so that a busy gateway forgets no faster than an idle one. Holding the
// timeout high costs little: a call a quorum answers is not slower for
// it; only a call that fails for want of a quorum, and the calls to a
// hung minority, last longer, up to MaxTimeout. An estimate of 500 ms is
// back below 50/3 ms, where it no longer raises a 50 ms base, after
// log2(30) ≈ 5 half-lives: 10 s.
const halfLife = 2 * time.Second

// latency is what a Group's calls remember of how long each node takes to
// answer (rule 8): a decaying maximum of its samples. Lock-free, as pace
// is, and free of allocation: one compare-and-swap per answer.
type latency struct {
	// epoch is when the Group was made: times are kept as milliseconds
	// since then (monotonic, since epoch carries Go's monotonic clock).
	epoch time.Time
	nodes []atomic.Uint64 // estimate by node
}

// The packing of an estimate: its value in microseconds in the high
// estBits bits (up to 268 s, more than any node call is given), and when
// it was last set, in milliseconds since the epoch modulo 2^atBits (2.2
// years: a node is sampled far more often than that).
const (
	estBits = 28
	atBits  = 64 - estBits
	atMask  = 1<<atBits - 1
	maxEst  = (1<<estBits - 1) * time.Microsecond
)

// estimate is one node's packed estimate (see estBits).
type estimate uint64

func packEstimate(d time.Duration, atMs uint64) estimate {
	us := uint64(min(max(d, 0), maxEst) / time.Microsecond)
	return estimate(us<<atBits | atMs&atMask)
}

func (e estimate) value() time.Duration { return time.Duration(e>>atBits) * time.Microsecond }
func (e estimate) atMs() uint64         { return uint64(e) & atMask }

// since returns how many milliseconds after e was set nowMs is, or 0 and
// false when nowMs is earlier (a sample from a call that began before the
// newest one heard).
func (e estimate) since(nowMs uint64) (uint64, bool) {
	d := (nowMs - e.atMs()) & atMask
	if d >= 1<<(atBits-1) {
		return 0, false
	}
	return d, true
}

// at returns the estimate as of nowMs: its value, halved every halfLife
// since it was set.
func (e estimate) at(nowMs uint64) time.Duration {
	d, _ := e.since(nowMs)
	return decayed(e.value(), time.Duration(d)*time.Millisecond)
}

// sampled returns the estimate once a sample d, taken at nowMs, is added:
// the larger of d and the estimate as of nowMs. A sample older than the
// estimate does not move it back in time.
func (e estimate) sampled(d time.Duration, nowMs uint64) estimate {
	since, later := e.since(nowMs)
	if !later {
		return packEstimate(max(d, e.value()), e.atMs())
	}
	return packEstimate(max(d, decayed(e.value(), time.Duration(since)*time.Millisecond)), nowMs)
}

// decayed returns est once elapsed has passed: halved every halfLife.
func decayed(est, elapsed time.Duration) time.Duration {
	if elapsed <= 0 || est <= 0 {
		return est
	}
	return time.Duration(float64(est) * math.Exp2(-float64(elapsed)/float64(halfLife)))
}

// ms returns t as milliseconds since the epoch (0 before it).
func (l *latency) ms(t time.Time) uint64 { return uint64(max(t.Sub(l.epoch), 0) / time.Millisecond) }

// observe adds the sample d, taken at t, to node i's estimate.
func (l *latency) observe(i int, d time.Duration, t time.Time) {
	now := l.ms(t)
	for {
		old := l.nodes[i].Load()
		next := uint64(estimate(old).sampled(d, now))
		if next == old || l.nodes[i].CompareAndSwap(old, next) {
			return
		}
	}
}

// estimate returns node i's estimate as of t.
func (l *latency) estimate(i int, t time.Time) time.Duration {
	return estimate(l.nodes[i].Load()).at(l.ms(t))
}

// sample returns the sample a node's answer gives (rule 8), for a call
// that began at began with its node calls bounded by deadline: how long
// an answer took; for a failure, the time the node was given (censored:
// it gave no answer within it); nothing for a failure of a call the
// caller canceled, which says nothing of the node.
func sample(began, at, deadline time.Time, failed, canceled bool) (time.Duration, bool) {
	switch {
	case !failed:
		return at.Sub(began), true
	case canceled:
		return 0, false
	default:
		return deadline.Sub(began), true
	}
}

// callTimeout returns the timeout of a call (rule 8): timeoutFactor times
// the quorum-th smallest of the nodes' estimates, within [base, most];
// base alone when most is not above base (no adaptation).
func callTimeout(estimates []time.Duration, quorum int, base, most time.Duration) time.Duration {
	if most <= base || quorum < 1 || quorum > len(estimates) {
		return base
	}
	est := nthSmallest(estimates, quorum)
	if est >= most/timeoutFactor {
		return most
	}
	return max(timeoutFactor*est, base)
}

// nthSmallest returns the n-th smallest of ds (1 ≤ n ≤ len(ds)), leaving
// ds as it is: a few nodes, so counting beats sorting a copy.
func nthSmallest(ds []time.Duration, n int) time.Duration {
	for _, d := range ds {
		below, upTo := 0, 0
		for _, e := range ds {
			if e < d {
				below++
			}
			if e <= d {
				upTo++
			}
		}
		if below < n && n <= upTo {
			return d
		}
	}
	return ds[len(ds)-1] // unreachable for 1 ≤ n ≤ len(ds)
}
