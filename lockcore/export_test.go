package lockcore

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/lockgate/lockgate/lockcore/internal/quorum"
)

// Settle waits until the late answers of r's decided calls have been acted
// on, so that a test reads the nodes as the calls left them. A call is
// answered at the first quorum once the others have had a grace (see
// round.until): under load a healthy node can take longer than that, and
// its part may not be done yet when the call returns.
func Settle(r *Redlock) { r.bg.wait() }

// Graces returns how many of r's rounds have waited a grace for a node
// still to answer (see quorum.Run).
func Graces(r *Redlock) int64 { return r.q.Graces() }

// SetGraceMin sets the least grace of r's rounds (see quorum.Config). Call
// it before r is used.
func SetGraceMin(r *Redlock, d time.Duration) { r.q = quorum.New(r.quorumConfig(d, keptCallers())) }

// Behind returns r.Behind().
func Behind(r *Redlock) []bool { return r.Behind() }

// Missed returns, by node, how many graces in a row it missed (at most 3).
func Missed(r *Redlock) []int {
	out := make([]int, len(r.nodes))
	for i := range out {
		out[i] = r.q.Missed(i)
	}
	return out
}

// Pending returns how many of r's decided rounds still wait for late
// answers (see round.Rest).
func Pending(r *Redlock) int {
	r.bg.mu.Lock()
	defer r.bg.mu.Unlock()
	return r.bg.n
}

// Callers returns how many goroutines r keeps for its node calls, parked or
// busy (see quorum.Config.Kept).
func Callers(r *Redlock) int { return r.q.Kept() }

// RaceBuild reports whether the package was built with -race, where rounds
// keep no goroutines for node calls.
const RaceBuild = raceBuild

// TwoRounds runs two acquisition rounds of one waiting request, as its
// waiting room would: the first with a live context, then between, then
// the second with second (see attempt).
func TwoRounds(r *Redlock, req AcquireRequest, second context.Context, between func()) (first *Lease, err error) {
	q := acquisition{AcquireRequest: req, minted: true, rounds: new(atomic.Int64)}
	q.LeaseID = NewLeaseID()
	first, err = r.tryAcquire(context.Background(), &q)
	between()
	_, _ = r.tryAcquire(second, &q)
	return first, err
}
