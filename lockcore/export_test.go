package lockcore

import "time"

// Settle waits until the late answers of r's decided calls have been acted
// on and its fencing catch-ups are done (see background), so that a test
// reads the nodes as the calls left them. A call is
// answered at the first quorum once the others have had a grace (see
// round.until): under load a healthy node can take longer than that, and
// its part may not be done yet when the call returns.
func Settle(r *Redlock) { r.bg.wait() }

// Graces returns how many of r's rounds have waited a grace for a node
// still to answer (see round.until).
func Graces(r *Redlock) int64 { return r.pace.graces.Load() }

// SetGraceMin sets the least grace of r's rounds (see round.until). Call it
// before r is used.
func SetGraceMin(r *Redlock, d time.Duration) { r.pace.graceMin = d }

// Behind returns r.Behind().
func Behind(r *Redlock) []bool { return r.Behind() }

// Missed returns, by node, how many graces in a row it missed (at most 3).
func Missed(r *Redlock) []int {
	out := make([]int, len(r.pace.nodes))
	for i := range out {
		out[i] = int(r.pace.nodes[i].Load() & 3)
	}
	return out
}

// Pending returns how many of r's decided rounds still wait for late
// answers (see round.rest), plus its fencing catch-ups under way (see
// catchUp).
func Pending(r *Redlock) int {
	r.bg.mu.Lock()
	defer r.bg.mu.Unlock()
	return r.bg.n
}

// Callers returns how many goroutines r keeps for its node calls, parked or
// busy (see callers).
func Callers(r *Redlock) int { return int(r.callers.live.Load()) }

// KeepCallers makes r keep goroutines for its node calls, at most max of
// them, also in a race build (see callers). Call it before r is used.
func KeepCallers(r *Redlock, max int) { r.callers.keep, r.callers.max = true, int32(max) }

// RaceBuild reports whether the package was built with -race, where rounds
// keep no goroutines for node calls unless KeepCallers says so.
const RaceBuild = raceBuild
