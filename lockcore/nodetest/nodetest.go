// Package nodetest holds test support for lockcore.Node implementations and
// their users.
//
// Run is the conformance suite for lockcore.Node implementations. Every node
// lockgate ships (memnode, redisnode) runs it; a new node must pass it before
// lockcore can trust it.
//
// Faulty wraps a node to inject faults (down, hanging, slow, lost replies)
// and to hook its acquisitions; Clock is a fake clock for a Redlock and its
// nodes. Both are meant for tests only.
package nodetest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
)

// Run runs the suite against the node that newNode returns. Subtests use
// distinct resource names, so one node may serve them all.
//
// A node newNode returns that was never initialized is initialized first
// (Repair with zero counters), as lockcore does for a new cluster.
func Run(t *testing.T, newNode func(t *testing.T) lockcore.Node) {
	newNode = inService(newNode)
	var seq atomic.Int64
	res := func(t *testing.T) string {
		name := strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())
		return fmt.Sprintf("%s.%d", name, seq.Add(1))
	}
	ctx := context.Background()
	acq := func(t *testing.T, n lockcore.Node, resource, lease string, ttl time.Duration) lockcore.NodeReply {
		t.Helper()
		r, err := n.Acquire(ctx, lockcore.NodeAcquire{Resource: resource, Lease: lease, TTL: ttl, Owner: "owner-" + lease})
		if err != nil {
			t.Fatalf("Acquire(%s, %s): %v", resource, lease, err)
		}
		return r
	}
	const ttl = 10 * time.Second
	const leaseA, leaseB = "lease-A-0123456789", "lease-B-0123456789"

	t.Run("a free lock is granted with a positive token", func(t *testing.T) {
		n, r := newNode(t), res(t)
		got := acq(t, n, r, leaseA, ttl)
		if got.Status != lockcore.StatusGranted || got.Token < 1 {
			t.Fatalf("got %+v, want granted with token ≥ 1", got)
		}
	})

	t.Run("the holder re-entering keeps its token", func(t *testing.T) {
		n, r := newNode(t), res(t)
		first := acq(t, n, r, leaseA, ttl)
		again := acq(t, n, r, leaseA, 2*ttl)
		if again.Status != lockcore.StatusReentered || again.Token != first.Token {
			t.Fatalf("re-entry got %+v, want reentered with token %d", again, first.Token)
		}
		l, _ := n.Inspect(ctx, r)
		if l.TTL != 2*ttl || l.Remaining <= ttl {
			t.Fatalf("re-entry did not refresh the TTL: %+v", l)
		}
	})

	t.Run("another lease is refused with the holder's remaining TTL", func(t *testing.T) {
		n, r := newNode(t), res(t)
		acq(t, n, r, leaseA, ttl)
		got := acq(t, n, r, leaseB, ttl)
		if got.Status != lockcore.StatusTaken || got.PTTL <= 0 || got.PTTL > ttl {
			t.Fatalf("got %+v, want taken with 0 < pttl ≤ %v", got, ttl)
		}
	})

	t.Run("each new holder gets a higher token", func(t *testing.T) {
		n, r := newNode(t), res(t)
		var last int64
		for i := range 5 {
			lease := fmt.Sprintf("lease-%d-0123456789", i)
			got := acq(t, n, r, lease, ttl)
			if got.Status != lockcore.StatusGranted || got.Token <= last {
				t.Fatalf("grant %d: got %+v, want granted with token > %d", i, got, last)
			}
			last = got.Token
			if rel, err := n.Release(ctx, r, lease, 0); err != nil || rel.Status != lockcore.StatusOK {
				t.Fatalf("release %d: %+v, %v", i, rel, err)
			}
		}
	})

	t.Run("extend", func(t *testing.T) {
		n, r := newNode(t), res(t)
		g := acq(t, n, r, leaseA, ttl)
		cases := []struct {
			name   string
			lease  string
			ttl    time.Duration
			want   lockcore.NodeStatus
			wantTT time.Duration
		}{
			{"the holder sets a new TTL", leaseA, 3 * ttl, lockcore.StatusOK, 3 * ttl},
			{"TTL 0 keeps the TTL last set", leaseA, 0, lockcore.StatusOK, 3 * ttl},
			{"another lease is refused", leaseB, ttl, lockcore.StatusTaken, 0},
		}
		for _, c := range cases {
			got, err := n.Extend(ctx, r, c.lease, c.ttl, 0)
			if err != nil || got.Status != c.want {
				t.Fatalf("%s: got %+v, %v; want %v", c.name, got, err, c.want)
			}
			if c.want == lockcore.StatusOK && (got.TTL != c.wantTT || got.Token != g.Token) {
				t.Fatalf("%s: got %+v, want ttl %v token %d", c.name, got, c.wantTT, g.Token)
			}
		}
		if got, err := n.Extend(ctx, res(t), leaseA, ttl, 0); err != nil || got.Status != lockcore.StatusAbsent {
			t.Fatalf("extend of a free lock: %+v, %v; want absent", got, err)
		}
	})

	t.Run("release", func(t *testing.T) {
		n, r := newNode(t), res(t)
		g := acq(t, n, r, leaseA, ttl)
		if got, err := n.Release(ctx, r, leaseB, 0); err != nil || got.Status != lockcore.StatusTaken {
			t.Fatalf("release by another lease: %+v, %v; want taken", got, err)
		}
		if l, _ := n.Inspect(ctx, r); !l.Found || l.Lease != leaseA {
			t.Fatalf("release by another lease changed the lock: %+v", l)
		}
		if got, err := n.Release(ctx, r, leaseA, 0); err != nil || got.Status != lockcore.StatusOK || got.Token != g.Token {
			t.Fatalf("release by the holder: %+v, %v; want ok with token %d", got, err, g.Token)
		}
		if got, err := n.Release(ctx, r, leaseA, 0); err != nil || got.Status != lockcore.StatusAbsent {
			t.Fatalf("second release: %+v, %v; want absent", got, err)
		}
	})

	t.Run("RaiseFence raises the counter and the holder's token, never lowers", func(t *testing.T) {
		n, r := newNode(t), res(t)
		g := acq(t, n, r, leaseA, ttl)
		if err := n.RaiseFence(ctx, r, leaseA, g.Token+100); err != nil {
			t.Fatal(err)
		}
		if err := n.RaiseFence(ctx, r, leaseA, 1); err != nil {
			t.Fatal(err)
		}
		if err := n.RaiseFence(ctx, r, leaseB, g.Token+500); err != nil { // not the holder
			t.Fatal(err)
		}
		if l, _ := n.Inspect(ctx, r); l.Token != g.Token+100 {
			t.Fatalf("holder's token = %d, want %d (raised by its lease only)", l.Token, g.Token+100)
		}
		n.Release(ctx, r, leaseA, 0)
		if got := acq(t, n, r, leaseB, ttl); got.Token != g.Token+501 {
			t.Fatalf("next token = %d, want %d (counter raised to %d)", got.Token, g.Token+501, g.Token+500)
		}
	})

	t.Run("inspect", func(t *testing.T) {
		n, r := newNode(t), res(t)
		if l, err := n.Inspect(ctx, r); err != nil || l.Found {
			t.Fatalf("inspect of a free lock: %+v, %v", l, err)
		}
		g := acq(t, n, r, leaseA, ttl)
		l, err := n.Inspect(ctx, r)
		if err != nil || !l.Found || l.Lease != leaseA || l.Token != g.Token || l.Owner != "owner-"+leaseA ||
			l.TTL != ttl || l.Remaining <= 0 || l.Remaining > ttl {
			t.Fatalf("inspect: %+v, %v", l, err)
		}
	})

	t.Run("a lock expires after its TTL and the next holder gets a higher token", func(t *testing.T) {
		n, r := newNode(t), res(t)
		g := acq(t, n, r, leaseA, 100*time.Millisecond)
		deadline := time.Now().Add(2 * time.Second)
		for {
			got := acq(t, n, r, leaseB, ttl)
			if got.Status == lockcore.StatusGranted {
				if got.Token <= g.Token {
					t.Fatalf("token after expiry %d, want > %d", got.Token, g.Token)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("lock with a 100ms TTL still held after 2s: %+v", got)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if got, _ := n.Extend(ctx, r, leaseA, ttl, 0); got.Status != lockcore.StatusTaken {
			t.Fatalf("expired lease extended the new holder's lock: %+v", got)
		}
		if got, _ := n.Release(ctx, r, leaseA, 0); got.Status != lockcore.StatusTaken {
			t.Fatalf("expired lease released the new holder's lock: %+v", got)
		}
	})

	t.Run("exactly one of many concurrent leases wins a free lock", func(t *testing.T) {
		n, r := newNode(t), res(t)
		var wg sync.WaitGroup
		var granted atomic.Int64
		errs := make(chan error, 32)
		for i := range 32 {
			wg.Go(func() {
				got, err := n.Acquire(ctx, lockcore.NodeAcquire{Resource: r, Lease: fmt.Sprintf("lease-%02d-0123456789", i), TTL: ttl})
				if err != nil {
					errs <- err
				} else if got.Status == lockcore.StatusGranted {
					granted.Add(1)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if granted.Load() != 1 {
			t.Fatalf("%d leases granted, want 1", granted.Load())
		}
	})

	t.Run("watchers hear the holder's release, once per watch, until stopped", func(t *testing.T) {
		n, r := newNode(t), res(t)
		w, ok := n.(lockcore.Watcher)
		if !ok {
			t.Skip("node does not implement lockcore.Watcher")
		}
		heard := make(chan struct{}, 16)
		stop, err := w.Watch(ctx, r, func() { heard <- struct{}{} })
		if err != nil {
			t.Fatal(err)
		}
		acq(t, n, r, leaseA, ttl)
		if got, _ := n.Release(ctx, r, leaseB, 0); got.Status != lockcore.StatusTaken {
			t.Fatalf("release by another lease: %+v, want taken", got)
		}
		if got, _ := n.Release(ctx, r, leaseA, 0); got.Status != lockcore.StatusOK {
			t.Fatalf("release by the holder: %+v, want ok", got)
		}
		select {
		case <-heard:
		case <-time.After(2 * time.Second):
			t.Fatal("release not announced within 2s")
		}
		// The holder's release was announced once; the refused one must not
		// have been. Announcements arrive in order, so a second one would
		// follow the first.
		select {
		case <-heard:
			t.Fatal("heard two announcements for one release (a refused release must not be announced)")
		case <-time.After(100 * time.Millisecond):
		}
		stop()
		acq(t, n, r, leaseA, ttl)
		n.Release(ctx, r, leaseA, 0)
		select {
		case <-heard:
			t.Fatal("heard a release after stop")
		case <-time.After(100 * time.Millisecond):
		}
	})

	t.Run("If-Match", func(t *testing.T) { runIfToken(t, newNode, res) })

	t.Run("hand-off", func(t *testing.T) {
		if _, ok := newNode(t).(lockcore.HandOffer); !ok {
			t.Skip("node does not implement lockcore.HandOffer")
		}
		runHandOff(t, newNode, res)
	})

	t.Run("ping", func(t *testing.T) {
		if err := newNode(t).Ping(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// runHandOff checks lockcore.HandOffer: a release and, when allowed, a grant
// to the next lease in one step, announced only when nothing was passed on.
func runHandOff(t *testing.T, newNode func(t *testing.T) lockcore.Node, res func(t *testing.T) string) {
	ctx := context.Background()
	const ttl = 10 * time.Second
	const holder, next, other = "lease-holder-0123456789", "lease-next-0123456789", "lease-other-0123456789"
	const replicaA, replicaB = "replica-A", "replica-B"
	nodeAcq := func(r, lease, replica string) lockcore.NodeAcquire {
		return lockcore.NodeAcquire{Resource: r, Lease: lease, TTL: ttl, Owner: "owner-" + lease, Replica: replica, Waits: true}
	}
	cases := []struct {
		name string
		// setup prepares resource r on node n.
		setup   func(t *testing.T, n lockcore.Node, r string)
		release string // the lease that hands off
		next    lockcore.NodeAcquire
		// Expected released and granted statuses, and whether the release
		// is announced.
		wantRel, wantGot  lockcore.NodeStatus
		wanted, announced bool
	}{
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
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n, r := newNode(t), res(t)
			c.setup(t, n, r)
			before, _ := n.Inspect(ctx, r)
			heard := make(chan struct{}, 4)
			if w, ok := n.(lockcore.Watcher); ok {
				stop, err := w.Watch(ctx, r, func() { heard <- struct{}{} })
				if err != nil {
					t.Fatal(err)
				}
				defer stop()
			}
			c.next.Resource = r
			rel, got, err := n.(lockcore.HandOffer).HandOff(ctx, c.release, 0, c.next)
			if err != nil {
				t.Fatal(err)
			}
			if rel.Status != c.wantRel || got.Status != c.wantGot || rel.Wanted != c.wanted {
				t.Fatalf("HandOff: released %+v, granted %+v; want %v (wanted %v), %v", rel, got, c.wantRel, c.wanted, c.wantGot)
			}
			after, _ := n.Inspect(ctx, r)
			switch {
			case c.wantGot == lockcore.StatusGranted:
				if rel.Token != before.Token || got.Token <= before.Token {
					t.Fatalf("tokens: released %d (held %d), granted %d; want the held one and a higher one", rel.Token, before.Token, got.Token)
				}
				if !after.Found || after.Lease != c.next.Lease || after.Token != got.Token || after.Owner != c.next.Owner || after.TTL != ttl {
					t.Fatalf("after the hand-off the node holds %+v, want %s with token %d", after, c.next.Lease, got.Token)
				}
			case c.wantRel == lockcore.StatusOK:
				if after.Found {
					t.Fatalf("released without a hand-off, yet the node holds %+v", after)
				}
			default:
				if after != before && (after.Lease != before.Lease || after.Token != before.Token) {
					t.Fatalf("a refused hand-off changed the lock: %+v, was %+v", after, before)
				}
			}
			if _, ok := n.(lockcore.Watcher); !ok {
				return
			}
			select {
			case <-heard:
				if !c.announced {
					t.Fatal("announced, want silence (the lock was never free)")
				}
			case <-time.After(300 * time.Millisecond):
				if c.announced {
					t.Fatal("the release was not announced within 300ms")
				}
			}
		})
	}

	t.Run("Release tells whether another replica was refused the lock", func(t *testing.T) {
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
	})

	t.Run("a handed lock belongs to the replica, unmarked, and expires with its TTL", func(t *testing.T) {
		n, r := newNode(t), res(t)
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
	})

	t.Run("the next holder's token is above every token the counter gave", func(t *testing.T) {
		n, r := newNode(t), res(t)
		first := mustGrant(t, n, nodeAcq(r, holder, replicaA))
		if err := n.RaiseFence(ctx, r, holder, first.Token+40); err != nil {
			t.Fatal(err)
		}
		_, got, err := n.(lockcore.HandOffer).HandOff(ctx, holder, 0, nodeAcq(r, next, replicaA))
		if err != nil || got.Token != first.Token+41 {
			t.Fatalf("granted %+v, %v; want token %d", got, err, first.Token+41)
		}
	})
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

// inService wraps newNode so that every node it returns is in service.
func inService(newNode func(t *testing.T) lockcore.Node) func(t *testing.T) lockcore.Node {
	return func(t *testing.T) lockcore.Node {
		t.Helper()
		n := newNode(t)
		h, err := n.Check(context.Background())
		if err != nil {
			t.Fatalf("Check: %v", err)
		}
		if !h.Initialized {
			if err := n.Repair(context.Background(), make([]int64, lockcore.FenceSlots)); err != nil {
				t.Fatalf("Repair (initialize): %v", err)
			}
		}
		return n
	}
}

// runIfToken checks the expected token (If-Match) of Extend, Release and
// HandOff: checked in the same step, against the lock whoever holds it;
// StatusMismatch with the lock's token changes nothing.
func runIfToken(t *testing.T, newNode func(t *testing.T) lockcore.Node, res func(t *testing.T) string) {
	ctx := context.Background()
	const ttl = 10 * time.Second
	const holder, other = "lease-holder-0123456789", "lease-other-0123456789"
	type op func(n lockcore.Node, r, lease string, ifToken int64) (lockcore.NodeReply, error)
	extend := func(n lockcore.Node, r, lease string, ifToken int64) (lockcore.NodeReply, error) {
		return n.Extend(ctx, r, lease, 3*ttl, ifToken)
	}
	release := func(n lockcore.Node, r, lease string, ifToken int64) (lockcore.NodeReply, error) {
		return n.Release(ctx, r, lease, ifToken)
	}
	handOff := func(n lockcore.Node, r, lease string, ifToken int64) (lockcore.NodeReply, error) {
		h, ok := n.(lockcore.HandOffer)
		if !ok {
			t.Skip("node does not implement lockcore.HandOffer")
		}
		rel, got, err := h.HandOff(ctx, lease, ifToken, lockcore.NodeAcquire{Resource: r, Lease: "lease-next-0123456789", TTL: ttl, Replica: "rep"})
		if rel.Status != lockcore.StatusOK && got.Status != lockcore.StatusAbsent {
			t.Fatalf("a refused hand-off granted: %+v", got)
		}
		return rel, err
	}
	for _, o := range []struct {
		name string
		do   op
	}{{"extend", extend}, {"release", release}, {"hand-off", handOff}} {
		t.Run(o.name, func(t *testing.T) {
			cases := []struct {
				name    string
				lease   string
				offset  int64 // ifToken = the lock's token + offset
				want    lockcore.NodeStatus
				changed bool
			}{
				{"the holder with another token: mismatch", holder, 1, lockcore.StatusMismatch, false},
				{"the holder with a lower token: mismatch", holder, -1, lockcore.StatusMismatch, false},
				{"another lease with another token: mismatch", other, 1, lockcore.StatusMismatch, false},
				{"another lease with the lock's token: taken", other, 0, lockcore.StatusTaken, false},
				{"the holder with its token: done", holder, 0, lockcore.StatusOK, true},
			}
			for _, c := range cases {
				n, r := newNode(t), res(t)
				// A token above 1, so that a lower one is not 0 (no check).
				if err := n.RaiseFence(ctx, r, holder, 10); err != nil {
					t.Fatal(err)
				}
				g := mustGrant(t, n, lockcore.NodeAcquire{Resource: r, Lease: holder, TTL: ttl, Replica: "rep"})
				got, err := o.do(n, r, c.lease, g.Token+c.offset)
				if err != nil || got.Status != c.want {
					t.Fatalf("%s: got %+v, %v; want %v", c.name, got, err, c.want)
				}
				if c.want == lockcore.StatusMismatch && got.Token != g.Token {
					t.Fatalf("%s: mismatch reports token %d, want the lock's %d", c.name, got.Token, g.Token)
				}
				l, err := n.Inspect(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				unchanged := l.Found && l.Lease == holder && l.Token == g.Token && l.TTL == ttl
				if unchanged == c.changed {
					t.Fatalf("%s: lock now %+v; changed = %v, want %v", c.name, l, !unchanged, c.changed)
				}
			}
			if got, err := o.do(newNode(t), res(t), holder, 7); err != nil || got.Status != lockcore.StatusAbsent {
				t.Fatalf("a free lock: got %+v, %v; want absent whatever the token", got, err)
			}
		})
	}
}
