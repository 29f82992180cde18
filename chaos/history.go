package chaos

import (
	"fmt"
	"sort"
	"sync"
	"time"
)

// Besides locks, the fault suite's clients take permits of two semaphores
// of workloadK permits in one cycle of permitEvery, and act as an operator
// who force-releases a hot lock, whoever holds it, in one cycle of
// forceEvery.
const (
	workloadK   = 2
	permitEvery = 8
	forceEvery  = 100
)

const (
	// driftAllowance is the gateways' drift allowance for the fault
	// suite's TTL of 1 s (lockcore: 1 % of the TTL plus 2 ms).
	driftAllowance = time.Second/100 + 2*time.Millisecond
	// clockStep is how far the fault suite's clock-step kind moves a
	// node's clock ahead (and back).
	clockStep = 700 * time.Millisecond
)

// Op is the kind of a recorded operation.
type Op uint8

// The operations a client performs.
const (
	OpAcquire Op = iota // PUT /locks/{resource}
	OpExtend            // PATCH /locks/{resource}
	OpRelease           // DELETE /locks/{resource}
	OpWrite             // a write to the fenced register carrying a token
	// OpForceRelease breaks a lock whatever lease holds it (DELETE
	// /locks/{resource}?force=true).
	OpForceRelease
	// OpPermitAcquire, OpPermitExtend and OpPermitRelease act on one permit
	// of a semaphore of Permits permits; Resource names the semaphore.
	OpPermitAcquire
	OpPermitExtend
	OpPermitRelease
)

var opNames = [...]string{"acquire", "extend", "release", "write", "force-release",
	"permit-acquire", "permit-extend", "permit-release"}

// String names the operation.
func (o Op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("op%d", o)
}

// Outcome is what the client learned about an operation.
type Outcome uint8

// Outcomes: Ok means the operation took effect; Fail means it surely did
// not (a definite refusal, or a connection that could not even be made);
// Unknown means it may or may not have (a timeout, a cut connection).
const (
	Ok Outcome = iota
	Fail
	Unknown
)

var outcomeNames = [...]string{"ok", "fail", "unknown"}

// String names the outcome.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("outcome%d", o)
}

// Event is one operation in a history. Invoke and Complete are read from
// the run's single monotonic clock (time since the run began), Invoke just
// before the request is sent and Complete just after the answer or error.
type Event struct {
	Client   int // -1 for the nemesis's deterministic episode
	Op       Op
	Resource string
	Lease    string
	// Token: for an acquire or extend that answered, the token returned;
	// for a write, the token carried.
	Token   uint64
	Status  int // HTTP status; 0 when no answer came (and for writes)
	Outcome Outcome
	// ValidFor is validity_ms of an acquire or extend that succeeded, to be
	// counted from Invoke.
	ValidFor time.Duration
	// TTL is the TTL an acquire or extend asked for (0: the gateway's
	// default).
	TTL time.Duration
	// Permit is the permit a permit operation took or named (an Ok
	// acquire's answer, or the permit an extend or release was sent for);
	// Permits is the semaphore's K.
	Permit, Permits  int
	Invoke, Complete time.Duration
	Gateway          int
	// Foreign marks an extend or release sent with a lease that is not the
	// client's live grant: one already released, or (NeverGranted) one that
	// was never handed out.
	Foreign, NeverGranted bool
	// Minted marks an acquire sent without a Lease-Id: the gateway mints the
	// lease, and Lease is the one its answer named (empty when no 2xx came).
	Minted bool
	// Value is what a write stored.
	Value string
	// Stale marks a write the register refused for a lower token.
	Stale bool
}

// String is one line for a failure report; the lease is shortened, since
// lease ids are secrets outside tests.
func (e Event) String() string {
	lease := e.Lease
	if len(lease) > 12 {
		lease = lease[:12] + "…" // the suite's leases are unique in their first 12 characters
	}
	return fmt.Sprintf("client %d %s %s lease %s token %d → %s (status %d) [%v, %v]",
		e.Client, e.Op, e.Resource, lease, e.Token, e.Outcome, e.Status,
		e.Invoke.Round(time.Millisecond), e.Complete.Round(time.Millisecond))
}

// Recorder collects events from many goroutines against one clock.
type Recorder struct {
	t0     time.Time
	mu     sync.Mutex
	events []Event
}

// NewRecorder starts the clock.
func NewRecorder() *Recorder { return &Recorder{t0: time.Now()} }

// Now is the time since the recorder started, read from the monotonic clock.
func (r *Recorder) Now() time.Duration { return time.Since(r.t0) }

// Add records e.
func (r *Recorder) Add(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// Events returns a copy of the history, ordered by Invoke.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	out := append([]Event(nil), r.events...)
	r.mu.Unlock()
	sort.SliceStable(out, func(i, j int) bool { return out[i].Invoke < out[j].Invoke })
	return out
}

// Fault is one fault the nemesis injected, from when it began to when it
// was healed.
type Fault struct {
	Kind   string
	Target string
	Start  time.Duration
	End    time.Duration
	// Nodes are the Redis nodes (indexes) the fault made faulty.
	Nodes []int
	// DataLoss marks a node that came back without its data.
	DataLoss bool
	// Gateways are the gateways (indexes) the fault stopped: a request
	// sent to one of them waits, unanswered, until the fault ends.
	Gateways []int
	// Outside marks a fault outside lockgate's stated model (a node's
	// clock stepped past the drift allowance): what the checkers find in
	// its window is counted apart and fails no test (see Outside).
	Outside bool
}

// Outside returns the windows of the faults outside the model: each from
// its start to its end plus settle.
func Outside(faults []Fault, settle time.Duration) windows {
	var out []Fault
	for _, f := range faults {
		if f.Outside {
			out = append(out, f)
		}
	}
	return faultWindows(out, settle)
}

// SplitOutside moves the violations whose moment (At) lies in a window of
// w out of v.
func SplitOutside(v []Violation, w windows) (inside, outside []Violation) {
	for _, x := range v {
		if w.touches(x.At, x.At) {
			outside = append(outside, x)
		} else {
			inside = append(inside, x)
		}
	}
	return inside, outside
}

// Stall is an event a node recorded as slower than the latency monitor's
// threshold (Redis's LATENCY HISTORY), such as an fsync of its AOF. At is
// in run time, to the second (Redis records whole seconds).
type Stall struct {
	Node  int
	Event string
	At    time.Duration
	Took  time.Duration
}
