package nodetest

import (
	"context"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
)

// runHandOff checks lockcore.HandOffer: a release and, when allowed, a grant
// to the next lease in one step, announced only when nothing was passed on.
func runHandOff(t *testing.T, newNode func(t *testing.T) lockcore.Node, res func(t *testing.T) string) {
	for _, c := range handOffCases() {
		t.Run(c.name, func(t *testing.T) { c.check(t, newNode(t), res(t)) })
	}
	t.Run("Release tells whether another replica was refused the lock", func(t *testing.T) { releaseReportsWanted(t, newNode, res) })
	t.Run("a handed lock belongs to the replica, unmarked, and expires with its TTL", func(t *testing.T) { handedLockIsUnmarked(t, newNode(t), res(t)) })
	t.Run("the next holder's token is above every token the counter gave", func(t *testing.T) { handedTokenIsAboveTheCounter(t, newNode(t), res(t)) })
}

// The leases and replicas of the hand-off tests.
const (
	holder, next, other = "lease-holder-0123456789", "lease-next-0123456789", "lease-other-0123456789"
	replicaA, replicaB  = "replica-A", "replica-B"
)

// nodeAcq is a waiting acquisition of r for lease through replica.
func nodeAcq(r, lease, replica string) lockcore.NodeAcquire {
	return lockcore.NodeAcquire{Resource: r, Lease: lease, TTL: ttl, Owner: "owner-" + lease, Replica: replica, Waits: true}
}

// handOffCase is one HandOff and what it must do.
type handOffCase struct {
	name string
	// setup prepares resource r on node n.
	setup   func(t *testing.T, n lockcore.Node, r string)
	release string // the lease that hands off
	next    lockcore.NodeAcquire
	// Expected released and granted statuses, and whether the release
	// is announced.
	wantRel, wantGot  lockcore.NodeStatus
	wanted, announced bool
}

func handOffCases() []handOffCase {
	return []handOffCase{
		{
			name:    "the holder passes the lock to the next waiter of its replica",
			setup:   func(t *testing.T, n lockcore.Node, r string) { mustGrant(t, n, nodeAcq(r, holder, replicaA)) },
			release: holder, next: nodeAcq("", next, replicaA),
			wantRel: lockcore.StatusOK, wantGot: lockcore.StatusGranted,
		},
		{
			name: "a refusal within the replica does not stop the hand-off",
			setup: func(t *testing.T, n lockcore.Node, r string) {
				mustGrant(t, n, nodeAcq(r, holder, replicaA))
				mustRefuse(t, n, nodeAcq(r, other, replicaA))
			},
			release: holder, next: nodeAcq("", next, replicaA),
			wantRel: lockcore.StatusOK, wantGot: lockcore.StatusGranted,
		},
		{
			name: "a lock another replica asked for is released, not passed on",
			setup: func(t *testing.T, n lockcore.Node, r string) {
				mustGrant(t, n, nodeAcq(r, holder, replicaA))
				mustRefuse(t, n, nodeAcq(r, other, replicaB))
			},
			release: holder, next: nodeAcq("", next, replicaA),
			wantRel: lockcore.StatusOK, wantGot: lockcore.StatusAbsent, wanted: true, announced: true,
		},
		{
			name: "a refusal of an asker that will not wait does not stop the hand-off",
			setup: func(t *testing.T, n lockcore.Node, r string) {
				mustGrant(t, n, nodeAcq(r, holder, replicaA))
				once := nodeAcq(r, other, replicaB)
				once.Waits = false
				mustRefuse(t, n, once)
			},
			release: holder, next: nodeAcq("", next, replicaA),
			wantRel: lockcore.StatusOK, wantGot: lockcore.StatusGranted,
		},
		{
			name: "a refusal for the empty replica marks a lock granted for a replica",
			setup: func(t *testing.T, n lockcore.Node, r string) {
				mustGrant(t, n, nodeAcq(r, holder, replicaA))
				mustRefuse(t, n, nodeAcq(r, other, ""))
			},
			release: holder, next: nodeAcq("", next, replicaA),
			wantRel: lockcore.StatusOK, wantGot: lockcore.StatusAbsent, wanted: true, announced: true,
		},
		{
			name:    "a lock granted for another replica is released, not passed on",
			setup:   func(t *testing.T, n lockcore.Node, r string) { mustGrant(t, n, nodeAcq(r, holder, replicaB)) },
			release: holder, next: nodeAcq("", next, replicaA),
			wantRel: lockcore.StatusOK, wantGot: lockcore.StatusAbsent, announced: true,
		},
		{
			name:    "an empty replica matches none",
			setup:   func(t *testing.T, n lockcore.Node, r string) { mustGrant(t, n, nodeAcq(r, holder, "")) },
			release: holder, next: nodeAcq("", next, ""),
			wantRel: lockcore.StatusOK, wantGot: lockcore.StatusAbsent, announced: true,
		},
		{
			name:    "a lease is not handed the lock it releases",
			setup:   func(t *testing.T, n lockcore.Node, r string) { mustGrant(t, n, nodeAcq(r, holder, replicaA)) },
			release: holder, next: nodeAcq("", holder, replicaA),
			wantRel: lockcore.StatusOK, wantGot: lockcore.StatusAbsent, announced: true,
		},
		{
			name:    "another lease cannot hand off the holder's lock",
			setup:   func(t *testing.T, n lockcore.Node, r string) { mustGrant(t, n, nodeAcq(r, holder, replicaA)) },
			release: other, next: nodeAcq("", next, replicaA),
			wantRel: lockcore.StatusTaken, wantGot: lockcore.StatusAbsent,
		},
		{
			name:    "a free lock is not granted by a hand-off",
			setup:   func(t *testing.T, n lockcore.Node, r string) {},
			release: holder, next: nodeAcq("", next, replicaA),
			wantRel: lockcore.StatusAbsent, wantGot: lockcore.StatusAbsent,
		},
	}
}

// check runs the case on resource r of node n.
func (c handOffCase) check(t *testing.T, n lockcore.Node, r string) {
	ctx := context.Background()
	c.setup(t, n, r)
	before, _ := n.Inspect(ctx, r)
	heard := watchReleases(t, n, r)
	c.next.Resource = r
	rel, got, err := n.(lockcore.HandOffer).HandOff(ctx, c.release, 0, c.next)
	if err != nil {
		t.Fatal(err)
	}
	if rel.Status != c.wantRel || got.Status != c.wantGot || rel.Wanted != c.wanted {
		t.Fatalf("HandOff: released %+v, granted %+v; want %v (wanted %v), %v", rel, got, c.wantRel, c.wanted, c.wantGot)
	}
	after, _ := n.Inspect(ctx, r)
	c.checkLock(t, before, after, rel, got)
	if heard != nil {
		checkAnnounced(t, heard, c.announced)
	}
}

// checkLock checks the lock after the hand-off against the lock before.
func (c handOffCase) checkLock(t *testing.T, before, after lockcore.NodeLock, rel, got lockcore.NodeReply) {
	t.Helper()
	switch {
	case c.wantGot == lockcore.StatusGranted:
		c.checkHandedOver(t, before, after, rel, got)
	case c.wantRel == lockcore.StatusOK:
		if after.Found {
			t.Fatalf("released without a hand-off, yet the node holds %+v", after)
		}
	default:
		if after != before && (after.Lease != before.Lease || after.Token != before.Token) {
			t.Fatalf("a refused hand-off changed the lock: %+v, was %+v", after, before)
		}
	}
}

// checkHandedOver checks a granted hand-off: the held token released, a
// higher one granted, and the lock now the next lease's.
func (c handOffCase) checkHandedOver(t *testing.T, before, after lockcore.NodeLock, rel, got lockcore.NodeReply) {
	t.Helper()
	if rel.Token != before.Token || got.Token <= before.Token {
		t.Fatalf("tokens: released %d (held %d), granted %d; want the held one and a higher one", rel.Token, before.Token, got.Token)
	}
	if !after.Found || after.Lease != c.next.Lease || after.Token != got.Token || after.Owner != c.next.Owner || after.TTL != ttl {
		t.Fatalf("after the hand-off the node holds %+v, want %s with token %d", after, c.next.Lease, got.Token)
	}
}

// watchReleases watches r on n until t ends, reporting each announcement on
// the channel it returns; nil when n is no Watcher.
func watchReleases(t *testing.T, n lockcore.Node, r string) <-chan struct{} {
	w, ok := n.(lockcore.Watcher)
	if !ok {
		return nil
	}
	heard := make(chan struct{}, 4)
	stop, err := w.Watch(context.Background(), r, func() { heard <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return heard
}

// checkAnnounced checks that a release was announced on heard within 300ms
// when want is true, and that none was otherwise.
func checkAnnounced(t *testing.T, heard <-chan struct{}, want bool) {
	t.Helper()
	select {
	case <-heard:
		if !want {
			t.Fatal("announced, want silence (the lock was never free)")
		}
	case <-time.After(300 * time.Millisecond):
		if want {
			t.Fatal("the release was not announced within 300ms")
		}
	}
}

// releaseReportsWanted: Release tells whether another replica was refused
// the lock.
func releaseReportsWanted(t *testing.T, newNode func(t *testing.T) lockcore.Node, res func(t *testing.T) string) {
	ctx := context.Background()
	for _, c := range []struct {
		refusedFor string
		want       bool
	}{{"", false}, {replicaA, false}, {replicaB, true}} {
		n, r := newNode(t), res(t)
		mustGrant(t, n, nodeAcq(r, holder, replicaA))
		if c.refusedFor != "" {
			mustRefuse(t, n, nodeAcq(r, other, c.refusedFor))
		}
		rel, err := n.Release(ctx, r, holder, 0)
		if err != nil || rel.Status != lockcore.StatusOK || rel.Wanted != c.want {
			t.Fatalf("refused for %q: release %+v, %v; want ok with wanted %v", c.refusedFor, rel, err, c.want)
		}
	}
}

// handedLockIsUnmarked: a handed lock belongs to the replica, unmarked, and
// expires with its TTL.
func handedLockIsUnmarked(t *testing.T, n lockcore.Node, r string) {
	ctx := context.Background()
	h := n.(lockcore.HandOffer)
	mustGrant(t, n, nodeAcq(r, holder, replicaA))
	mustRefuse(t, n, nodeAcq(r, other, replicaB)) // marks the holder's lock
	if _, err := n.Release(ctx, r, holder, 0); err != nil {
		t.Fatal(err)
	}
	mustGrant(t, n, nodeAcq(r, holder, replicaA))
	// The handed lock is the replica's and carries no mark: it can be
	// passed on again, and its release reports no other replica.
	short := nodeAcq(r, next, replicaA)
	short.TTL = 200 * time.Millisecond
	if _, got, err := h.HandOff(ctx, holder, 0, short); err != nil || got.Status != lockcore.StatusGranted {
		t.Fatalf("first hand-off: %+v, %v", got, err)
	}
	if l, _ := n.Inspect(ctx, r); l.Remaining <= 0 || l.Remaining > short.TTL {
		t.Fatalf("handed lock expires in %v, want within its TTL %v", l.Remaining, short.TTL)
	}
	if rel, got, err := h.HandOff(ctx, next, 0, nodeAcq(r, other, replicaA)); err != nil || rel.Wanted || got.Status != lockcore.StatusGranted {
		t.Fatalf("second hand-off: released %+v, granted %+v, %v; want an unmarked lock passed on", rel, got, err)
	}
	if rel, err := n.Release(ctx, r, other, 0); err != nil || rel.Status != lockcore.StatusOK || rel.Wanted {
		t.Fatalf("release after hand-offs: %+v, %v; want ok, not wanted", rel, err)
	}
}

// handedTokenIsAboveTheCounter: the next holder's token is above every
// token the counter gave.
func handedTokenIsAboveTheCounter(t *testing.T, n lockcore.Node, r string) {
	ctx := context.Background()
	first := mustGrant(t, n, nodeAcq(r, holder, replicaA))
	if err := n.RaiseFence(ctx, r, holder, first.Token+40); err != nil {
		t.Fatal(err)
	}
	_, got, err := n.(lockcore.HandOffer).HandOff(ctx, holder, 0, nodeAcq(r, next, replicaA))
	if err != nil || got.Token != first.Token+41 {
		t.Fatalf("granted %+v, %v; want token %d", got, err, first.Token+41)
	}
}

func mustGrant(t *testing.T, n lockcore.Node, req lockcore.NodeAcquire) lockcore.NodeReply {
	t.Helper()
	got, err := n.Acquire(context.Background(), req)
	if err != nil || got.Status != lockcore.StatusGranted {
		t.Fatalf("Acquire(%s): %+v, %v; want granted", req.Lease, got, err)
	}
	return got
}

func mustRefuse(t *testing.T, n lockcore.Node, req lockcore.NodeAcquire) {
	t.Helper()
	got, err := n.Acquire(context.Background(), req)
	if err != nil || got.Status != lockcore.StatusTaken {
		t.Fatalf("Acquire(%s): %+v, %v; want taken", req.Lease, got, err)
	}
}
