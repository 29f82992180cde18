package lockcore

import (
	"context"
	"errors"
	"time"
)

// ErrQuarantined is what a node's operations fail with while the node is
// out of service: it has lost data it acknowledged (or never had any) and
// has not been repaired yet (see NodeHealth and the package doc). Such a
// failure changed nothing on the node.
var ErrQuarantined = errors.New("lockcore: node is quarantined until repaired (it lost data or was never initialized)")

// ErrNodeChanged is what Node.Repair fails with when the node is no longer
// in the state the repair was decided on: it was quarantined again, marked
// again, or lost its data since (its epoch changed).
var ErrNodeChanged = errors.New("lockcore: the node changed since it was checked (quarantined again, or lost its data); not repaired")

// Node is one independent lock store, as New takes it: a Redis master, or
// the in-memory node. It is the two views of the store that lockcore uses,
// each where it is used: LockNode, which the lock operations fan out to,
// and GuardNode, through which the node guard keeps the store's data
// whole (see the package doc, "Nodes that lose their data"). A Node must
// be safe for concurrent use; every method acts atomically on the node and
// is bounded by ctx.
//
// A node keeps a lock per held resource (lease id, the node's token for that
// lease, owner label, TTL; it expires with the TTL) and a fencing counter per
// slot (FenceSlots of them, see FenceSlot: they never expire and never
// decrease while the node keeps its data). The lock and its slot's counter
// change in one atomic step.
//
// Every LockNode operation, and Counters, fails with ErrQuarantined,
// changing nothing, while the node is quarantined, before it was first
// initialized (Repair), and after it lost its data, until Repair.
type Node interface {
	LockNode
	GuardNode
}

// LockNode is what a lock needs of a node: the operations Acquire, Extend,
// Release, Inspect and the fencing write-back fan out to. Each fails with
// ErrQuarantined, changing nothing, while the node is out of service (see
// Node).
type LockNode interface {
	// Acquire takes the lock for req.Lease if it is free, incrementing the
	// node's fencing counter in the same step (StatusGranted, Token = the new
	// counter value). If req.Lease already holds it, the TTL is reset to
	// req.TTL (StatusReentered, Token = the token stored for the lease).
	// Otherwise it leaves the lock as it is (StatusTaken, PTTL = holder's
	// remaining TTL), but for marking it wanted elsewhere (see
	// NodeAcquire.Replica).
	Acquire(ctx context.Context, req NodeAcquire) (NodeReply, error)
	// Extend resets the TTL if lease holds the lock (StatusOK); ttl 0 means
	// the TTL the lock was last set with. StatusAbsent, StatusMismatch or
	// StatusTaken otherwise, changing nothing.
	//
	// ifToken non-zero is a precondition checked in the same atomic step:
	// when the lock is held (by any lease) with another token, the answer
	// is StatusMismatch with Token = the lock's token. A free lock is
	// StatusAbsent whatever ifToken. 0 checks nothing.
	Extend(ctx context.Context, resource, lease string, ttl time.Duration, ifToken int64) (NodeReply, error)
	// Release deletes the lock if lease holds it (StatusOK, Token = the
	// lease's token, Wanted as recorded with the lock) and, if the node is
	// a Watcher, announces the release to the resource's watchers in the
	// same atomic step. StatusAbsent, StatusMismatch (ifToken as for
	// Extend) or StatusTaken otherwise, changing and announcing nothing.
	Release(ctx context.Context, resource, lease string, ifToken int64) (NodeReply, error)
	// RaiseFence sets the fencing counter to token if it is lower, and sets
	// the token stored with the lock to token if lease holds it with a lower
	// one. It never lowers anything.
	RaiseFence(ctx context.Context, resource, lease string, token int64) error
	// Inspect reads the lock. Found is false when nothing holds it.
	Inspect(ctx context.Context, resource string) (NodeLock, error)
	// String names the node in errors and logs (never a password).
	String() string
}

// Watcher is implemented by nodes that announce releases, so that waiters
// learn of a release at once instead of polling.
type Watcher interface {
	// Watch calls notify once for every release of resource on this node (a
	// Release that returned StatusOK, or a HandOff that released without
	// passing the lock on), until stop is called. A refused
	// release and an expiry are not announced. notify may also be called
	// when no release happened (e.g. after a lost connection, in case one
	// was missed): a waiter then tries once more for nothing. It returns only once the
	// subscription is in place, so a release that happens after Watch returns
	// is never missed. notify must not block.
	Watch(ctx context.Context, resource string, notify func()) (stop func(), err error)
}

// HandOffer is implemented by nodes that can pass a lock from its holder
// straight to the next waiter, so that a hand-off costs one round trip
// instead of a release, a wake-up and a new acquisition.
type HandOffer interface {
	// HandOff releases the lock on next.Resource if lease holds it, exactly
	// as Release does, ifToken included (released: StatusOK, StatusAbsent,
	// StatusMismatch or StatusTaken; only StatusOK grants anything), and
	// then, in the same atomic step, grants the lock to next exactly as
	// Acquire would grant a free lock (granted: StatusGranted, with the
	// counter incremented and Token its new value) when the hand-off is
	// allowed:
	//   - the released lock was granted for the same replica (its
	//     NodeAcquire.Replica equals next.Replica, which is not empty);
	//   - no acquisition for another replica was refused while it was held
	//     (see NodeAcquire.Replica);
	//   - next.Lease is not lease.
	//
	// Otherwise nothing is granted (granted.Status is StatusAbsent) and a
	// release is announced to watchers as Release announces it. A hand-off
	// itself is not announced as a release: the lock was never free (an
	// AcquireWatcher announces it as a grant). released.Wanted is
	// set as Release sets it.
	HandOff(ctx context.Context, lease string, ifToken int64, next NodeAcquire) (released, granted NodeReply, err error)
}

// NodeHealth is what Check found.
type NodeHealth struct {
	// Initialized is false when the node has no lockgate data at all: it
	// is new, or restarted empty.
	Initialized bool
	// Initializing is true when the node is not initialized but a gateway
	// began to initialize it as a node of a new cluster (MarkInitializing),
	// InitializingFor ago on the node's own clock. A node that restarted
	// empty has no such mark.
	Initializing    bool
	InitializingFor time.Duration
	// Epoch identifies the node's current quarantine or bootstrap mark: a
	// random id that every Quarantine and every new mark replace, and that
	// a loss of the node's data or a Repair takes away ("" then; a
	// Quarantine of a process still marking its slots goes on with its
	// epoch). Repair takes it, so that a repair decided on this check
	// does nothing once it changed.
	Epoch string
	// Lost is true when the node has lost data it acknowledged: it was
	// seen initialized and now is not, it went back to an older copy of
	// its data, or it restarted without syncing every write to disk
	// first. A lost node must be quarantined.
	Lost bool
	// Quarantined is true while the node is out of service;
	// QuarantinedFor is for how long so far, on the node's own clock.
	Quarantined    bool
	QuarantinedFor time.Duration
	// Refusing is non-empty when the node answers but refuses writes, or
	// must not count for another reason of its configuration, and says
	// why: "out of memory", "persistence failing" (MISCONF), "read-only
	// replica", an eviction policy that may drop locks, a data format newer
	// than this gateway's.
	Refusing string
	// Reason says, for a Lost node, which rule found the loss (for logs
	// and /readyz): for example a new server process since the node's data
	// was last recovered (a restart, a restore, a failover), or the node's
	// record gone (flushed, or restarted empty).
	Reason string

	// What a restart of a majority needs (rule 8 in the package doc; set
	// only by a Rejoiner):
	//
	// ID names the node's data: a random id drawn anew whenever the node
	// is put in service by a Repair ("" before the first).
	ID string
	// ServedAt is the node's own mark of the last check that found it in
	// service (Rejoiner.Witness), in milliseconds on the node's clock; it
	// only grows, and goes with the data.
	ServedAt int64
	// Witnessed is what this node's data holds of the others: by ID, the
	// highest ServedAt a gateway saw each of them with while it found
	// both in service. Nil when none.
	Witnessed map[string]int64
	// Durable is true when the node acknowledged no write before it was
	// on disk (Redis: appendonly with appendfsync always) at every check
	// that found it in service since it was last put in service, and,
	// when it is quarantined, its quarantine was begun because another
	// server process loaded its data (a restart, or a restore): such a
	// node lost nothing unless its data came from an older copy, which
	// the other nodes' Witnessed tells.
	Durable bool
}

// NodeAcquire is one node's share of an acquisition.
type NodeAcquire struct {
	Resource string
	Lease    string
	TTL      time.Duration
	Owner    string
	// Replica identifies the Redlock (gateway replica) asking. A node
	// records it with a grant and, when it refuses an acquisition that
	// Waits for a different replica than the holder's, marks the lock as
	// wanted elsewhere (see NodeReply.Wanted), which stops HandOff from
	// passing it on within a replica. A missing replica is the empty one.
	Replica string
	// Waits is true when the acquisition will wait for the lock if it is
	// refused; only such a refusal marks the lock wanted.
	Waits bool
}

// NodeStatus is what a node did with a request.
type NodeStatus int

// Node statuses.
const (
	// StatusTaken: another lease holds the lock; nothing changed.
	StatusTaken NodeStatus = iota
	// StatusGranted: the lock was free and is now held by the lease.
	StatusGranted
	// StatusReentered: the lease already held the lock; its TTL was reset.
	StatusReentered
	// StatusOK: the lease holds the lock and the extend or release was done.
	StatusOK
	// StatusAbsent: nothing holds the lock.
	StatusAbsent
	// StatusMismatch: the lock is held with another token than the one the
	// extend or release expected (If-Match); nothing changed.
	StatusMismatch
)

var statusNames = [...]string{"taken", "granted", "reentered", "ok", "absent", "mismatch"}

func (s NodeStatus) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "unknown"
}

// NodeReply is a node's answer to Acquire, Extend or Release.
type NodeReply struct {
	Status NodeStatus
	// Token is the node's token for the lease (Granted, Reentered, OK), or
	// the token the lock is held with (Mismatch).
	Token int64
	// PTTL is the holder's remaining TTL (Taken).
	PTTL time.Duration
	// TTL is the TTL the lock is now set with (OK from Extend).
	TTL time.Duration
	// Wanted (OK from Release and HandOff) is set when an acquisition for
	// another replica than the one the released lock was granted for was
	// refused while it was held: a waiter elsewhere may want it.
	Wanted bool
}

// NodeLock is a node's view of a lock.
type NodeLock struct {
	Found     bool
	Lease     string
	Token     int64
	Owner     string
	TTL       time.Duration // the TTL the lock was last set with
	Remaining time.Duration // time until the node expires it
}

// MaxToken bounds fencing tokens: they must stay exact in JSON numbers,
// JavaScript and Lua, which all use IEEE doubles.
const MaxToken = 1<<53 - 1
