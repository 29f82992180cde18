package quorum

import "time"

// phase is where a call stands; see the table in the package doc.
type phase uint8

const (
	open  phase = iota // undecided: every answer is read
	grace              // decided: waiting for the nodes still to answer
)

// view is what decide looks at: one call at one moment.
type view struct {
	phase    phase
	complete bool // every node has answered
	// holds: the caller's policy holds of the answers heard (read in the
	// open phase only).
	holds bool
	// waiting: a node still to answer is not behind, so the grace waits
	// for it (read in the grace phase only).
	waiting  bool
	now      time.Time
	graceEnd time.Time
}

// step is what a call does next.
type step uint8

const (
	read   step = iota // wait for the next answer, however long it takes
	begin              // begin the grace, then decide again
	await              // wait for the next answer or the end of the grace
	expire             // the grace ended: the nodes still to answer missed it; stop
	stop               // return to the caller
)

var stepNames = [...]string{"read", "begin", "await", "expire", "stop"}

func (s step) String() string { return stepNames[s] }

// decide returns a call's next step. It holds every rule of when a call
// stops reading answers; Run only gathers the view and carries it out.
func decide(v view) step {
	switch {
	case v.complete:
		return stop
	case v.phase == open && !v.holds:
		return read
	case v.phase == open:
		return begin
	case !v.waiting:
		return stop
	case !v.now.Before(v.graceEnd):
		return expire
	default:
		return await
	}
}

// graceFrom returns when a grace that begins at t ends, in a call that
// began at began: once the call has taken twice as long as it had at t,
// and at least least after t (rule 2).
func graceFrom(began, t time.Time, least time.Duration) time.Time {
	return t.Add(max(t.Sub(began), least))
}

// timing is what a call knows of its grace (rule 2).
type timing struct {
	began    time.Time
	answered int // answers heard that are not failures
	// end is when the grace ends: zero until a quorum of answers that are
	// not failures has come or the call is decided.
	end time.Time
}

// hear returns what t becomes once an answer that came at at (failed if
// it is a failure) is heard, and whether that answer came in time (rules
// 2 and 5).
func (t timing) hear(at time.Time, failed bool, quorum int, least time.Duration) (next timing, inTime bool) {
	if !failed {
		t.answered++
		if t.answered == quorum && t.end.IsZero() {
			t.end = graceFrom(t.began, at, least)
		}
	}
	return t, t.end.IsZero() || !at.After(t.end)
}

// decided returns what t becomes when the call is decided at now: the
// grace never ends before one begun then would (rule 2).
func (t timing) decided(now time.Time, least time.Duration) timing {
	if end := graceFrom(t.began, now, least); end.After(t.end) {
		t.end = end
	}
	return t
}

// judgeLate reports whether an answer that came at at, after its call
// returned, is judged, and whether in time (rule 5): a call that set no
// grace judges nothing; after an expiry, which judged the node late, only
// an answer that had come by the grace's end is judged again.
func judgeLate(at, graceEnd time.Time, ranOut bool) (judged, inTime bool) {
	if graceEnd.IsZero() {
		return false, false
	}
	inTime = !at.After(graceEnd)
	return inTime || !ranOut, inTime
}

// behindAfter is how many graces in a row a node must miss to be behind:
// one miss may be a healthy node held up for a moment on a busy machine.
const behindAfter = 2

// paceState is what pace keeps of a node: the number of the newest call
// judged for it, shifted left by 2, and how many graces in a row it missed
// (the low 2 bits, at most 3).
type paceState uint64

// judged returns the state after the node's answer to call seq was judged
// in time or not, and false when a newer call was judged already (rule 6).
func (s paceState) judged(seq uint64, inTime bool) (paceState, bool) {
	if uint64(s)>>2 > seq {
		return s, false
	}
	misses := uint64(s) & 3
	switch {
	case inTime:
		misses = 0
	case misses < 3:
		misses++
	}
	return paceState(seq<<2 | misses), true
}

// missed returns how many graces in a row the node missed.
func (s paceState) missed() int { return int(s & 3) }

// behind reports whether the node is behind (rule 6).
func (s paceState) behind() bool { return s.missed() >= behindAfter }
