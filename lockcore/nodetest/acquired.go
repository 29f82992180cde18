package nodetest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
)

// watchAcquired: a node that is a lockcore.AcquireWatcher announces every
// grant (an Acquire of a free lock, a HandOff that passes the lock on) and
// nothing else: not a re-entry, a refused acquisition or a release.
//
// No silence is timed: the node's release announcements come over the same
// subscription connection as its grants, in the order they were made, so
// once a release is heard every grant announced before it has been heard.
func (s *suite) watchAcquired(t *testing.T) {
	ctx := context.Background()
	n, r := s.newNode(t), s.res(t)
	aw, ok := n.(lockcore.AcquireWatcher)
	if !ok {
		t.Skip("node does not implement lockcore.AcquireWatcher")
	}
	released := watchReleases(t, n, r)
	if released == nil {
		t.Skip("node does not implement lockcore.Watcher (the test orders grants by releases)")
	}
	var grants atomic.Int64
	stop, err := aw.WatchAcquired(ctx, r, func() { grants.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	release := func(lease string) {
		t.Helper()
		if got, err := n.Release(ctx, r, lease, 0); err != nil || got.Status != lockcore.StatusOK {
			t.Fatalf("Release(%s) = %+v, %v; want ok", lease, got, err)
		}
		select {
		case <-released:
		case <-time.After(10 * time.Second):
			t.Fatal("release not announced within 10s")
		}
	}
	wantGrants := func(want int64, after string) {
		t.Helper()
		if got := grants.Load(); got != want {
			t.Fatalf("%d grants announced %s, want %d", got, after, want)
		}
	}

	if got := s.acq(t, n, r, leaseA, ttl); got.Status != lockcore.StatusGranted {
		t.Fatalf("Acquire(A) = %+v, want granted", got)
	}
	if got := s.acq(t, n, r, leaseA, ttl); got.Status != lockcore.StatusReentered {
		t.Fatalf("Acquire(A) again = %+v, want reentered", got)
	}
	if got := s.acq(t, n, r, leaseB, ttl); got.Status != lockcore.StatusTaken {
		t.Fatalf("Acquire(B) = %+v, want taken", got)
	}
	release(leaseA)
	wantGrants(1, "by a grant, a re-entry, a refusal and a release")

	if h, ok := n.(lockcore.HandOffer); ok {
		mustGrant(t, n, nodeAcq(r, holder, replicaA))
		if _, got, err := h.HandOff(ctx, holder, 0, nodeAcq(r, next, replicaA)); err != nil || got.Status != lockcore.StatusGranted {
			t.Fatalf("HandOff = %+v, %v; want granted", got, err)
		}
		release(next)
		wantGrants(3, "after a grant and a hand-off")
	}

	before := grants.Load()
	stop()
	s.acq(t, n, r, leaseA, ttl)
	release(leaseA)
	wantGrants(before, "after stop")
}
