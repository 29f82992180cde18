package lockcore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
)

// An Extend without a TTL answers the shortest TTL the nodes that extended
// last set: the one the quorum is sure of. Nodes that failed or did not
// extend do not count.
func TestShortestTTL(t *testing.T) {
	ok := func(ttl time.Duration) lockcore.NodeReply {
		return lockcore.NodeReply{Status: lockcore.StatusOK, TTL: ttl}
	}
	tests := []struct {
		name    string
		replies []lockcore.NodeReply
		errs    []error
		want    time.Duration
	}{
		{"the shortest of those that extended",
			[]lockcore.NodeReply{ok(3 * time.Second), ok(time.Second), ok(2 * time.Second)}, []error{nil, nil, nil}, time.Second},
		{"in any order",
			[]lockcore.NodeReply{ok(time.Second), ok(3 * time.Second), ok(2 * time.Second)}, []error{nil, nil, nil}, time.Second},
		{"a node that failed does not count",
			[]lockcore.NodeReply{ok(3 * time.Second), {TTL: time.Millisecond}, ok(2 * time.Second)}, []error{nil, errOff, nil}, 2 * time.Second},
		{"nor one that did not extend",
			[]lockcore.NodeReply{ok(3 * time.Second), {Status: lockcore.StatusAbsent, TTL: time.Millisecond}, ok(2 * time.Second)}, []error{nil, nil, nil}, 2 * time.Second},
		{"none extended: 0",
			[]lockcore.NodeReply{{Status: lockcore.StatusAbsent}}, []error{nil}, 0},
	}
	for _, tt := range tests {
		if got := lockcore.ShortestTTL(tt.replies, tt.errs); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

// A round that cannot start (the guard's first pass failed) fails on
// every node with the error, named by node.
func TestFailAllFailsEveryNode(t *testing.T) {
	nodes := []lockcore.Node{memnode.New(nil), memnode.New(nil)}
	cause := errors.New("not ready")
	errs := lockcore.FailAll(nodes, cause)
	if len(errs) != len(nodes) {
		t.Fatalf("%d errors for %d nodes", len(errs), len(nodes))
	}
	for i, err := range errs {
		ne, ok := errors.AsType[*lockcore.NodeError](err)
		if !ok || !errors.Is(err, cause) || ne.Node != nodes[i].String() {
			t.Fatalf("node %d: %v; want a *NodeError of %s wrapping the cause", i, err, nodes[i])
		}
	}
}

// A late answer granted the lease when the node granted it, or when it
// re-entered a lease that held nothing before the request (minted, or
// known fresh): that copy is the round's own (see lateAcquire).
func TestGrantedLate(t *testing.T) {
	granted := lockcore.NodeReply{Status: lockcore.StatusGranted}
	reentered := lockcore.NodeReply{Status: lockcore.StatusReentered}
	taken := lockcore.NodeReply{Status: lockcore.StatusTaken}
	tests := []struct {
		name          string
		minted, fresh bool
		reply         lockcore.NodeReply
		err           error
		want          bool
	}{
		{"a grant", false, false, granted, nil, true},
		{"a re-entry of a lease that may have held the lock is no grant", false, false, reentered, nil, false},
		{"a re-entry of a fresh lease is", false, true, reentered, nil, true},
		{"a re-entry of a minted lease is", true, false, reentered, nil, true},
		{"a refusal is not", true, true, taken, nil, false},
		{"a failure is not", true, true, granted, errOff, false},
	}
	for _, tt := range tests {
		if got := lockcore.GrantedLate(tt.minted, tt.fresh, tt.reply, tt.err); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}
