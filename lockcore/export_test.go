package lockcore

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/lockgate/lockgate/lockcore/internal/quorum"
)

// Settle waits until the late answers of r's decided calls have been acted
// on and its fencing catch-ups are done (see background), so that a test
// reads the nodes as the calls left them. A call is
// answered at the first quorum once the others have had a grace (see
// quorum.Run): under load a healthy node can take longer than that, and
// its part may not be done yet when the call returns.
func Settle(r *Redlock) { r.bg.wait() }

// Graces returns how many of r's rounds have waited a grace for a node
// still to answer (see quorum.Run).
func Graces(r *Redlock) int64 { return r.q.Graces() }

// SetGraceMin sets the least grace of r's rounds (see quorum.Config). Call
// it before r is used.
func SetGraceMin(r *Redlock, d time.Duration) {
	r.q.Close()
	r.q = quorum.New(r.quorumConfig(d, keptCallers()))
}

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
// answers (see round.Rest), plus its fencing catch-ups under way (see
// catchUp).
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

// ShortestTTL returns shortestTTL of results made of replies (by node) and
// errs (nil where the node answered).
func ShortestTTL(replies []NodeReply, errs []error) time.Duration {
	return shortestTTL(results(replies, errs))
}

// FailAll returns the errors of a round that fails at once with err (see
// failAll), by node.
func FailAll(nodes []Node, err error) []error {
	var out []error
	for _, res := range failAll(nodes, err) {
		out = append(out, res.err)
	}
	return out
}

// GrantedLate returns grantedLate of a late answer (reply, err) to a
// round of a request whose lease was minted for it or known fresh.
func GrantedLate(minted, fresh bool, reply NodeReply, err error) bool {
	return grantedLate(attempt{minted: minted, fresh: fresh}, nodeResult{reply: reply, err: err})
}

func results(replies []NodeReply, errs []error) []nodeResult {
	out := make([]nodeResult, len(replies))
	for i := range replies {
		out[i] = nodeResult{i: i, reply: replies[i], err: errs[i]}
	}
	return out
}

// SetWitnessCheck switches rule 8's witness check on or off (on by
// default), for the tests that show what it catches.
func SetWitnessCheck(on bool) { checkWitnesses.Store(on) }

// AcquireSetInOrder is AcquireSet taking req.Resources in the order given
// rather than the canonical one: what rule S2 forbids, for the test that
// shows the deadlock the canonical order prevents.
func AcquireSetInOrder(ctx context.Context, r *Redlock, req SetAcquireRequest) (*SetLease, error) {
	minted := req.LeaseID == ""
	if minted {
		req.LeaseID = NewLeaseID()
	}
	return r.acquireSet(ctx, req.Resources, req, minted)
}
