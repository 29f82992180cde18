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
	w := &grantWatch{t: t, n: n, r: r, released: released}
	stop, err := aw.WatchAcquired(ctx, r, func() { w.grants.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	s.expectStatus(t, n, r, leaseA, lockcore.StatusGranted, "Acquire(A)")
	s.expectStatus(t, n, r, leaseA, lockcore.StatusReentered, "Acquire(A) again")
	s.expectStatus(t, n, r, leaseB, lockcore.StatusTaken, "Acquire(B)")
	w.release(leaseA)
	w.want(1, "by a grant, a re-entry, a refusal and a release")

	if h, ok := n.(lockcore.HandOffer); ok {
		mustGrant(t, n, nodeAcq(r, holder, replicaA))
		if _, got, err := h.HandOff(ctx, holder, 0, nodeAcq(r, next, replicaA)); err != nil || got.Status != lockcore.StatusGranted {
			t.Fatalf("HandOff = %+v, %v; want granted", got, err)
		}
		w.release(next)
		w.want(3, "after a grant and a hand-off")
	}

	before := w.grants.Load()
	stop()
	s.acq(t, n, r, leaseA, ttl)
	w.release(leaseA)
	w.want(before, "after stop")
}

// expectStatus acquires r for lease and fails the test unless the node
// answers want.
func (s *suite) expectStatus(t *testing.T, n lockcore.Node, r, lease string, want lockcore.NodeStatus, what string) {
	t.Helper()
	if got := s.acq(t, n, r, lease, ttl); got.Status != want {
		t.Fatalf("%s = %+v, want status %v", what, got, want)
	}
}

// grantWatch counts the grants announced on r and releases r in the order
// the node announces it.
type grantWatch struct {
	t        *testing.T
	n        lockcore.Node
	r        string
	released <-chan struct{}
	grants   atomic.Int64
}

// release releases r for lease and waits for its announcement: every
// grant announced before it has then been counted.
func (w *grantWatch) release(lease string) {
	w.t.Helper()
	if got, err := w.n.Release(context.Background(), w.r, lease, 0); err != nil || got.Status != lockcore.StatusOK {
		w.t.Fatalf("Release(%s) = %+v, %v; want ok", lease, got, err)
	}
	select {
	case <-w.released:
	case <-time.After(10 * time.Second):
		w.t.Fatal("release not announced within 10s")
	}
}

func (w *grantWatch) want(n int64, after string) {
	w.t.Helper()
	if got := w.grants.Load(); got != n {
		w.t.Fatalf("%d grants announced %s, want %d", got, after, n)
	}
}
