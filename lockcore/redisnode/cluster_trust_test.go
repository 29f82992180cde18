package redisnode_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
)

// A Check probes the primaries, then records what it found. A replica
// promoted after the probe, to which lock traffic connects before the
// record, is a process the Check did not judge: the record must not trust
// the node over that connection (the review's finding 2). The test
// promotes a replica (CLUSTER FAILOVER) between probe and record and
// makes lock traffic connect to it; the Check that began before it must
// leave the node out of service, and the next Check finds the loss.
func TestClusterCheckDoesNotTrustAPrimaryDialedDuringIt(t *testing.T) {
	c := redistest.StartCluster(t, 3, 1)
	n := newClusterNode(t, c)
	ctx := context.Background()
	out, err := c.Primaries()[0].Do("CLUSTER", "KEYSLOT", "lockgate:{meta}:node")
	if err != nil {
		t.Fatal(err)
	}
	metaSlot, _ := strconv.Atoi(out)
	var p *redistest.Server
	for _, s := range c.Primaries() {
		if s != c.OwnerOf(metaSlot) {
			p = s
			break
		}
	}
	var names []string
	for i := 0; len(names) < 2; i++ {
		if r := fmt.Sprintf("dial-%d", i); c.OwnerOf(lockcore.FenceSlot(r)) == p {
			names = append(names, r)
		}
	}
	r := c.ReplicaOf(p)
	promoted := false
	n.SetAfterProbe(func() {
		if promoted {
			return
		}
		promoted = true
		if _, err := r.Do("CLUSTER", "FAILOVER"); err != nil {
			t.Errorf("CLUSTER FAILOVER: %v", err)
			return
		}
		for deadline := time.Now().Add(10 * time.Second); r.Info("role") != "master"; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Errorf("%s not promoted after 10s", r.Addr())
				return
			}
		}
		c.WaitStable()
		// Lock traffic follows the slot to the new primary and connects
		// to it: the node stops serving at once (onConnect).
		req := lockcore.NodeAcquire{Resource: names[0], Lease: lockcore.NewLeaseID(), TTL: time.Minute}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			_, err := n.Acquire(ctx, req)
			if errors.Is(err, lockcore.ErrQuarantined) {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("Acquire after the failover: %v, want ErrQuarantined", err)
				return
			}
		}
	})
	h, err := n.Check(ctx)
	if err != nil {
		t.Fatalf("the Check around the failover: %v", err)
	}
	if !promoted || t.Failed() {
		t.FailNow()
	}
	t.Logf("the Check begun before the failover: %+v", h)
	req := lockcore.NodeAcquire{Resource: names[1], Lease: lockcore.NewLeaseID(), TTL: time.Minute}
	if rep, err := n.Acquire(ctx, req); !errors.Is(err, lockcore.ErrQuarantined) {
		t.Fatalf("Acquire on the promoted primary after a Check that did not judge it: %+v, %v; want ErrQuarantined", rep, err)
	}
	h = checkWithin(t, n, func(h lockcore.NodeHealth) bool { return h.Lost })
	t.Logf("the next Check: %s", h.Reason)
}

// A Check judges the slot map it read from one node, and every primary
// must agree with it: a primary whose own map differs (here, one told by
// hand that another primary serves a slot, as a stale or cut-off node
// would be) fails the Check, which then changes nothing.
func TestClusterCheckFailsWhenPrimariesDisagreeOnTheSlotMap(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	n := newClusterNode(t, c)
	ctx := context.Background()
	ps := c.Primaries()
	// A has the highest config epoch: C's claim of its slot, gossiped to
	// B, does not override B's view that A serves it.
	epoch := func(s *redistest.Server) int {
		out, err := s.Do("CLUSTER", "NODES")
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(out) {
			if f := strings.Fields(line); len(f) > 6 && strings.Contains(f[2], "myself") {
				e, _ := strconv.Atoi(f[6])
				return e
			}
		}
		t.Fatalf("no myself line in %s's CLUSTER NODES", s.Addr())
		return 0
	}
	slices.SortFunc(ps, func(x, y *redistest.Server) int { return epoch(y) - epoch(x) })
	a, b, cc := ps[0], ps[1], ps[2]
	slot := 0
	for c.OwnerOf(slot) != cc {
		slot += 97
	}
	restore := func() {
		if _, err := b.Do("CLUSTER", "SETSLOT", strconv.Itoa(slot), "NODE", cc.NodeID()); err != nil {
			t.Fatal(err)
		}
		c.WaitStable()
	}
	if _, err := b.Do("CLUSTER", "SETSLOT", strconv.Itoa(slot), "NODE", a.NodeID()); err != nil {
		t.Fatal(err)
	}
	h, err := n.Check(ctx)
	if err == nil || !strings.Contains(err.Error(), "another slot map") {
		restore()
		t.Fatalf("Check while %s names another primary for slot %d: %+v, %v; want it to fail", b.Addr(), slot, h, err)
	}
	t.Logf("the Check: %v", err)
	restore()
	checkWithin(t, n, func(h lockcore.NodeHealth) bool { return h.Initialized && !h.Lost && !h.Quarantined })
}
