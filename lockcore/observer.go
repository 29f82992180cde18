package lockcore

import (
	"context"
	"errors"
	"time"
)

// Observer is told what a Redlock does, for metrics. Its methods are called
// on the request path, from many goroutines at once: they must be safe for
// concurrent use, cheap, and must not block. lockcore never passes a
// resource name or a lease id to an Observer, so whatever it records stays
// of bounded cardinality.
type Observer interface {
	// NodeCall reports one call to one node: node is the node's String(),
	// op is "acquire", "extend", "release", "handoff", "fence", "inspect"
	// or "check" (the guard's and readiness's health check, see
	// Node.Check),
	// d is how long the call took, and err is nil when the node answered
	// (whatever its answer) or what went wrong: a timeout matches
	// context.DeadlineExceeded.
	NodeCall(node, op string, d time.Duration, err error)
	// QuorumFailed reports an operation that ended with a *QuorumError: op
	// is the error's Op ("acquire", "fence", "extend", "release", "inspect"
	// or "check"), or "repair" when a node that lost data was repaired
	// without a quorum of other nodes in service (see the package doc).
	QuorumFailed(op string)
	// Fenced reports a fencing write-back: an acquisition whose token fewer
	// than a quorum of nodes already had, so the gateway raised the others'
	// counters before answering (see the package doc).
	Fenced()
}

// nopObserver is the default Observer.
type nopObserver struct{}

func (nopObserver) NodeCall(string, string, time.Duration, error) {}
func (nopObserver) QuorumFailed(string)                           {}
func (nopObserver) Fenced()                                       {}

// quorumFailed tells the observer about err if it is a *QuorumError.
func (r *Redlock) quorumFailed(err error) {
	var qe *QuorumError
	if errors.As(err, &qe) {
		r.opt.Observer.QuorumFailed(qe.Op)
	}
}

// Behind reports, by node in the order given to New, whether this Redlock
// holds the node behind at this moment: the node missed the grace of two
// calls in a row, and calls that a quorum decides do not wait for it until
// it answers one in time again (see the package doc). It changes no
// answer; it is for metrics.
func (r *Redlock) Behind() []bool {
	out := make([]bool, len(r.nodes))
	for i := range out {
		out[i] = r.q.Behind(i)
	}
	return out
}

// Waiting returns the number of Acquire and AcquireRW calls waiting for a
// held lock on this Redlock at this moment.
func (r *Redlock) Waiting() int {
	return r.waits.room.Waiting() + int(r.rwWaiting.Load())
}

// observeNodes returns nodes whose calls are reported to o, or nodes itself
// when there is no Observer to tell.
func observeNodes(nodes []Node, o Observer) []Node {
	if _, nop := o.(nopObserver); nop {
		return nodes
	}
	out := make([]Node, len(nodes))
	for i, n := range nodes {
		out[i] = observedNode{Node: n, o: o, name: n.String()}
	}
	return out
}

// observedNode reports every call of the Node methods the Redlock fans out.
// It is used for those calls only: waiters subscribe through the original
// node, which may be a Watcher.
type observedNode struct {
	Node
	o    Observer
	name string
}

func (n observedNode) done(op string, start time.Time, err error) {
	n.o.NodeCall(n.name, op, time.Since(start), err)
}

func (n observedNode) Check(ctx context.Context) (NodeHealth, error) {
	start := time.Now()
	h, err := n.Node.Check(ctx)
	n.done("check", start, err)
	return h, err
}

func (n observedNode) Acquire(ctx context.Context, req NodeAcquire) (NodeReply, error) {
	start := time.Now()
	rep, err := n.Node.Acquire(ctx, req)
	n.done("acquire", start, err)
	return rep, err
}

func (n observedNode) Extend(ctx context.Context, resource, lease string, ttl time.Duration, ifToken int64) (NodeReply, error) {
	start := time.Now()
	rep, err := n.Node.Extend(ctx, resource, lease, ttl, ifToken)
	n.done("extend", start, err)
	return rep, err
}

func (n observedNode) Release(ctx context.Context, resource, lease string, ifToken int64) (NodeReply, error) {
	start := time.Now()
	rep, err := n.Node.Release(ctx, resource, lease, ifToken)
	n.done("release", start, err)
	return rep, err
}

// HandOff is called only when the observed node is a HandOffer.
func (n observedNode) HandOff(ctx context.Context, lease string, ifToken int64, next NodeAcquire) (NodeReply, NodeReply, error) {
	start := time.Now()
	rel, got, err := n.Node.(HandOffer).HandOff(ctx, lease, ifToken, next)
	n.done("handoff", start, err)
	return rel, got, err
}

func (n observedNode) RaiseFence(ctx context.Context, resource, lease string, token int64) error {
	start := time.Now()
	err := n.Node.RaiseFence(ctx, resource, lease, token)
	n.done("fence", start, err)
	return err
}

func (n observedNode) Inspect(ctx context.Context, resource string) (NodeLock, error) {
	start := time.Now()
	l, err := n.Node.Inspect(ctx, resource)
	n.done("inspect", start, err)
	return l, err
}

func (n observedNode) Ping(ctx context.Context) error {
	start := time.Now()
	err := n.Node.Ping(ctx)
	n.done("ping", start, err)
	return err
}
