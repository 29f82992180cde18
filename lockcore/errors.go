package lockcore

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sentinel errors. Functions of this package return them, or typed errors
// that match them with errors.Is.
var (
	// ErrTaken means another lease holds the lock. Returned errors are
	// *TakenError, which carries the holder's remaining TTL.
	ErrTaken = errors.New("lockcore: lock is held by another lease")
	// ErrNotHeld means nothing holds the lock: it was released, expired, or
	// never taken.
	ErrNotHeld = errors.New("lockcore: lock is not held")
	// ErrHeldByOther means the caller's lease no longer holds the lock because
	// another lease does.
	ErrHeldByOther = errors.New("lockcore: lock is held by another lease, not by this one")
	// ErrNoQuorum means too few nodes answered to decide. Returned errors are
	// *QuorumError with the per-node causes.
	ErrNoQuorum = errors.New("lockcore: no quorum of nodes")
	// ErrTokenMismatch means the caller's expected fencing token (If-Match)
	// is not the current holder's token.
	ErrTokenMismatch = errors.New("lockcore: fencing token does not match the holder's")
	// ErrInvalid means an argument is malformed or out of range. Returned
	// errors are *InvalidError naming the field.
	ErrInvalid = errors.New("lockcore: invalid argument")
	// ErrClosed means the Redlock is shutting down; waits end with it.
	ErrClosed = errors.New("lockcore: shutting down")
	// ErrTooManyWaiters means the replica already has its maximum number of
	// waiters (Options.MaxWaiters).
	ErrTooManyWaiters = errors.New("lockcore: too many waiters")
)

// TakenError reports that another lease holds the lock.
type TakenError struct {
	Resource string
	// RetryAfter is the holder's remaining TTL as the nodes reported it: the
	// lock frees itself by then unless it is extended.
	RetryAfter time.Duration
	// granted is how many nodes granted the failed attempt: more than none
	// means a split vote or a minority the holder does not have.
	granted int
}

func (e *TakenError) Error() string {
	return fmt.Sprintf("lockcore: %q is held by another lease (expires in %v)", e.Resource, e.RetryAfter)
}

// Is makes a *TakenError match ErrTaken.
func (e *TakenError) Is(target error) bool { return target == ErrTaken }

// HeldByOtherError reports that a lease the caller named no longer holds the
// lock, because another lease does.
type HeldByOtherError struct {
	Resource   string
	RetryAfter time.Duration
}

func (e *HeldByOtherError) Error() string {
	return fmt.Sprintf("lockcore: %q is held by another lease, not by this one", e.Resource)
}

// Is makes a *HeldByOtherError match ErrHeldByOther.
func (e *HeldByOtherError) Is(target error) bool { return target == ErrHeldByOther }

// QuorumError reports that an operation could not reach a majority of nodes.
// Causes holds one error per node that failed, each a *NodeError.
type QuorumError struct {
	Op       string // "acquire", "fence", "extend", "release", "inspect", "check"
	Needed   int    // the quorum, N/2+1
	Answered int    // nodes that gave a definite answer
	Causes   []error
	// RetryAfter is when a quorum of nodes is expected in service again,
	// from what the node guard last found: the end of the quarantines
	// that keep it from one, about a check interval while nodes recover
	// from the others, or a second when nothing tells (nodes unreachable).
	RetryAfter time.Duration
}

func (e *QuorumError) Error() string {
	var b strings.Builder
	noun := "nodes"
	if e.Needed == 1 {
		noun = "node"
	}
	fmt.Fprintf(&b, "lockcore: %s: %d of the %d %s needed answered", e.Op, e.Answered, e.Needed, noun)
	for i, c := range e.Causes {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(c.Error())
	}
	return b.String()
}

// Is makes a *QuorumError match ErrNoQuorum.
func (e *QuorumError) Is(target error) bool { return target == ErrNoQuorum }

// Unwrap returns the per-node causes, so errors.Is(err,
// context.DeadlineExceeded) tells whether a node timed out.
func (e *QuorumError) Unwrap() []error { return e.Causes }

// NodeError is one node's failure inside a QuorumError.
type NodeError struct {
	Node string
	Err  error
}

func (e *NodeError) Error() string { return e.Node + ": " + e.Err.Error() }

// Unwrap returns the node's error.
func (e *NodeError) Unwrap() error { return e.Err }

// ErrValidityExhausted is a QuorumError cause, from Acquire (and a hand-off
// to a waiter) and from Extend: a majority granted or extended the lock, but
// the round took so long that less than MinValidity of the TTL was left
// after the drift allowance. An Acquire undoes its grants; an Extend leaves
// the extended TTLs in place (they expire with them). Its text speaks of
// acquiring for both.
var ErrValidityExhausted = errors.New("lockcore: acquiring took longer than the lock's validity")

// InvalidError reports a malformed or out-of-range argument.
type InvalidError struct {
	Field  string // the request field, e.g. "ttl_ms", "resource", "lease_id"
	Reason string
}

func (e *InvalidError) Error() string {
	return "lockcore: invalid " + e.Field + ": " + e.Reason
}

// Is makes an *InvalidError match ErrInvalid.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }
