package lockcore

import (
	"context"
	"strings"
	"time"
)

// RWNode is implemented by nodes that keep readers-writer locks (see the
// package doc, "Readers-writer locks"). Every method acts atomically on the
// node, in one step with the name's slot counter, and fails with
// ErrQuarantined, changing nothing, while the node is out of service. A
// node that implements it lists every live hold through its Lister as a
// lock named RWHoldResource (with the hold's lease, token, owner, TTL and
// remaining time) and takes such locks back in through its Adopter as
// holds of that mode (rule R6), so that a recovery restores them.
type RWNode interface {
	// RWAcquire grants req.Lease a hold on req.Name in its mode (rule R1):
	// StatusGranted with the slot's counter incremented and Token its new
	// value; StatusReentered (TTL reset, Token the hold's) when the lease
	// holds in that mode; StatusMismatch, changing nothing, when the lease
	// holds in the other mode (rule R5); StatusTaken otherwise (PTTL the
	// longest remaining TTL among the holds that refused it, or the wait
	// mark's). An exclusive request that Waits and is refused sets or
	// renews its lease's wait mark for req.Mark, unless another lease's
	// mark is live (rule R4); a grant to the lease clears its mark.
	RWAcquire(ctx context.Context, req NodeRWAcquire) (NodeReply, error)
	// RWExtend resets the TTL of lease's hold (ttl 0: the TTL it was last
	// set with): StatusOK with Token and TTL. StatusAbsent when the lease
	// holds nothing here; StatusTaken, changing nothing, when a hold of a
	// conflicting mode is on the node too (adopted copies that disagree,
	// rule R6).
	RWExtend(ctx context.Context, name, lease string, ttl time.Duration) (NodeReply, error)
	// RWRelease deletes lease's hold (StatusOK, Token the hold's) or finds
	// none (StatusAbsent), and clears lease's wait mark either way.
	RWRelease(ctx context.Context, name, lease string) (NodeReply, error)
	// RWRaise sets the slot's counter to token if it is lower, and the
	// token of lease's hold to token if it is lower (step 3 of the package
	// doc). It never lowers anything.
	RWRaise(ctx context.Context, name, lease string, token int64) error
	// RWInspect reads the name's live holds and whether a writer's wait
	// mark is live.
	RWInspect(ctx context.Context, name string) (NodeRW, error)
}

// NodeRWAcquire is one node's share of a readers-writer acquisition.
type NodeRWAcquire struct {
	Name, Lease, Owner string
	TTL                time.Duration
	// Exclusive asks for the writer's hold; false for a reader's.
	Exclusive bool
	// Waits is true when the request waits if refused: only such an
	// exclusive request marks the name (rule R4).
	Waits bool
	// Mark is how long a wait mark set or renewed by this request lives.
	Mark time.Duration
}

// NodeRW is a node's view of a readers-writer lock.
type NodeRW struct {
	Holds []NodeRWHold
	// Waiting is true while a writer's wait mark is live.
	Waiting bool
}

// NodeRWHold is one live hold on a node. Lease is the hold's lease id.
type NodeRWHold struct {
	Exclusive bool
	NodeLock
}

// RWHoldSep joins a readers-writer lock's name and a hold's mode and lease
// into the name under which a node lists the hold (RWHoldResource). It lies
// outside the resource alphabet, so the name is no lock's and List never
// shows it.
const RWHoldSep = '#'

// RWHoldResource is the name under which a node lists lease's hold on the
// readers-writer lock name (rule R6): name, RWHoldSep, "w" for the writer
// or "r" for a reader, and the lease id. It carries a lease id: never log
// it.
func RWHoldResource(name string, exclusive bool, lease string) string {
	mode := "r"
	if exclusive {
		mode = "w"
	}
	return name + string(RWHoldSep) + mode + lease
}

// ParseRWHold splits a name made by RWHoldResource; ok is false for any
// other name (a lock's, a permit's: neither has RWHoldSep). The name is
// cut at the first RWHoldSep, which no name the readers-writer calls
// accept holds.
func ParseRWHold(resource string) (name string, exclusive bool, lease string, ok bool) {
	name, rest, found := strings.Cut(resource, string(RWHoldSep))
	if !found || len(rest) < 2 || (rest[0] != 'r' && rest[0] != 'w') || name == "" {
		return "", false, "", false
	}
	return name, rest[0] == 'w', rest[1:], true
}
