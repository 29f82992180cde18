package lockcore

import (
	"slices"
	"time"
)

// nodeResult is node i's answer to a round.
type nodeResult struct {
	i     int
	reply NodeReply
	err   error
}

// Failed reports whether the call failed (see quorum.Answer).
func (res nodeResult) Failed() bool { return res.err != nil }

// tally counts node results by outcome.
type tally struct {
	ok, taken, absent, mismatch int
	maxToken                    int64
	causes                      []error
	// busy holds, per node that answered, how long until another lease's
	// lock there expires (0 where no other lease holds it).
	busy []time.Duration
}

func count(results []nodeResult, okStatus ...NodeStatus) tally {
	t := tally{busy: make([]time.Duration, 0, len(results))}
	for _, res := range results {
		switch {
		case res.err != nil:
			t.causes = append(t.causes, res.err)
		case slices.Contains(okStatus, res.reply.Status):
			t.ok++
			t.maxToken = max(t.maxToken, res.reply.Token)
		case res.reply.Status == StatusTaken:
			t.taken++
			t.busy = append(t.busy, max(0, res.reply.PTTL))
			continue
		case res.reply.Status == StatusMismatch:
			t.mismatch++
		default:
			t.absent++
		}
		if res.err == nil {
			t.busy = append(t.busy, 0)
		}
	}
	return t
}

// freeIn is how long until a quorum of the nodes that answered is free of
// other leases' locks: the quorum-th shortest remaining TTL. A leftover copy
// of a lock on a minority of nodes does not count.
func (t tally) freeIn(quorum int) time.Duration {
	if len(t.busy) < quorum {
		return slices.Max(append(t.busy, 0))
	}
	b := slices.Clone(t.busy)
	slices.Sort(b)
	return b[quorum-1]
}

func (t tally) answered() int { return t.ok + t.taken + t.absent + t.mismatch }
