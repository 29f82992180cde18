package lockcore

import (
	"sync/atomic"
	"time"
)

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
// Without pace, a cluster with one slow node would pay a grace on every
// call and keep little more than half of a healthy cluster's throughput;
// with it, nearly all. Healthy nodes answer in time and are not behind,
// so a healthy cluster's throughput is the same with or without it.
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
