package redisnode_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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
