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
	s := &suite{newNode: inService(newNode)}
	for _, c := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"a free lock is granted with a positive token", s.freeLockIsGranted},
		{"the holder re-entering keeps its token", s.reentryKeepsTheToken},
		{"another lease is refused with the holder's remaining TTL", s.anotherLeaseIsRefused},
		{"each new holder gets a higher token", s.newHoldersGetHigherTokens},
		{"extend", s.extend},
		{"release", s.release},
		{"RaiseFence raises the counter and the holder's token, never lowers", s.raiseFence},
		{"inspect", s.inspect},
		{"a lock expires after its TTL and the next holder gets a higher token", s.expiry},
		{"exactly one of many concurrent leases wins a free lock", s.oneOfManyWins},
		{"watchers hear the holder's release, once per watch, until stopped", s.watch},
		{"If-Match", s.ifToken},
		{"hand-off", s.handOff},
		{"ping", s.ping},
	} {
		t.Run(c.name, c.run)
	}
}

// suite is what the conformance subtests share.
type suite struct {
	newNode func(t *testing.T) lockcore.Node
	seq     atomic.Int64
}

// The TTL and leases of the suite's locks.
const (
	ttl            = 10 * time.Second
	leaseA, leaseB = "lease-A-0123456789", "lease-B-0123456789"
)

// res returns a resource name no other subtest uses.
func (s *suite) res(t *testing.T) string {
	name := strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())
	return fmt.Sprintf("%s.%d", name, s.seq.Add(1))
}

// acq acquires resource on n for lease, failing t on an error.
func (s *suite) acq(t *testing.T, n lockcore.Node, resource, lease string, ttl time.Duration) lockcore.NodeReply {
	t.Helper()
	r, err := n.Acquire(context.Background(), lockcore.NodeAcquire{Resource: resource, Lease: lease, TTL: ttl, Owner: "owner-" + lease})
	if err != nil {
		t.Fatalf("Acquire(%s, %s): %v", resource, lease, err)
	}
	return r
}

// freeLockIsGranted: a free lock is granted with a positive token.
func (s *suite) freeLockIsGranted(t *testing.T) {
	n, r := s.newNode(t), s.res(t)
	got := s.acq(t, n, r, leaseA, ttl)
	if got.Status != lockcore.StatusGranted || got.Token < 1 {
		t.Fatalf("got %+v, want granted with token ≥ 1", got)
	}
}

// reentryKeepsTheToken: the holder re-entering keeps its token.
func (s *suite) reentryKeepsTheToken(t *testing.T) {
	ctx := context.Background()
	n, r := s.newNode(t), s.res(t)
	first := s.acq(t, n, r, leaseA, ttl)
	again := s.acq(t, n, r, leaseA, 2*ttl)
	if again.Status != lockcore.StatusReentered || again.Token != first.Token {
		t.Fatalf("re-entry got %+v, want reentered with token %d", again, first.Token)
	}
	l, _ := n.Inspect(ctx, r)
	if l.TTL != 2*ttl || l.Remaining <= ttl {
		t.Fatalf("re-entry did not refresh the TTL: %+v", l)
	}
}

// anotherLeaseIsRefused: another lease is refused with the holder's remaining TTL.
func (s *suite) anotherLeaseIsRefused(t *testing.T) {
	n, r := s.newNode(t), s.res(t)
	s.acq(t, n, r, leaseA, ttl)
	got := s.acq(t, n, r, leaseB, ttl)
	if got.Status != lockcore.StatusTaken || got.PTTL <= 0 || got.PTTL > ttl {
		t.Fatalf("got %+v, want taken with 0 < pttl ≤ %v", got, ttl)
	}
}

// newHoldersGetHigherTokens: each new holder gets a higher token.
func (s *suite) newHoldersGetHigherTokens(t *testing.T) {
	ctx := context.Background()
	n, r := s.newNode(t), s.res(t)
	var last int64
	for i := range 5 {
		lease := fmt.Sprintf("lease-%d-0123456789", i)
		got := s.acq(t, n, r, lease, ttl)
		if got.Status != lockcore.StatusGranted || got.Token <= last {
			t.Fatalf("grant %d: got %+v, want granted with token > %d", i, got, last)
		}
		last = got.Token
		if rel, err := n.Release(ctx, r, lease, 0); err != nil || rel.Status != lockcore.StatusOK {
			t.Fatalf("release %d: %+v, %v", i, rel, err)
		}
	}
}

// extend: extend.
func (s *suite) extend(t *testing.T) {
	ctx := context.Background()
	n, r := s.newNode(t), s.res(t)
	g := s.acq(t, n, r, leaseA, ttl)
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
	if got, err := n.Extend(ctx, s.res(t), leaseA, ttl, 0); err != nil || got.Status != lockcore.StatusAbsent {
		t.Fatalf("extend of a free lock: %+v, %v; want absent", got, err)
	}
}

// release: release.
func (s *suite) release(t *testing.T) {
	ctx := context.Background()
	n, r := s.newNode(t), s.res(t)
	g := s.acq(t, n, r, leaseA, ttl)
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
}

// raiseFence: RaiseFence raises the counter and the holder's token, never lowers.
func (s *suite) raiseFence(t *testing.T) {
	ctx := context.Background()
	n, r := s.newNode(t), s.res(t)
	g := s.acq(t, n, r, leaseA, ttl)
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
	if got := s.acq(t, n, r, leaseB, ttl); got.Token != g.Token+501 {
		t.Fatalf("next token = %d, want %d (counter raised to %d)", got.Token, g.Token+501, g.Token+500)
	}
}

// inspect: inspect.
func (s *suite) inspect(t *testing.T) {
	ctx := context.Background()
	n, r := s.newNode(t), s.res(t)
	if l, err := n.Inspect(ctx, r); err != nil || l.Found {
		t.Fatalf("inspect of a free lock: %+v, %v", l, err)
	}
	g := s.acq(t, n, r, leaseA, ttl)
	l, err := n.Inspect(ctx, r)
	if err != nil || !l.Found || l.Lease != leaseA || l.Token != g.Token || l.Owner != "owner-"+leaseA ||
		l.TTL != ttl || l.Remaining <= 0 || l.Remaining > ttl {
		t.Fatalf("inspect: %+v, %v", l, err)
	}
}

// expiry: a lock expires after its TTL and the next holder gets a higher token.
func (s *suite) expiry(t *testing.T) {
	ctx := context.Background()
	n, r := s.newNode(t), s.res(t)
	g := s.acq(t, n, r, leaseA, 100*time.Millisecond)
	deadline := time.Now().Add(2 * time.Second)
	for {
		got := s.acq(t, n, r, leaseB, ttl)
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
}

// oneOfManyWins: exactly one of many concurrent leases wins a free lock.
func (s *suite) oneOfManyWins(t *testing.T) {
	ctx := context.Background()
	n, r := s.newNode(t), s.res(t)
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
}

// watch: watchers hear the holder's release, once per watch, until stopped.
func (s *suite) watch(t *testing.T) {
	ctx := context.Background()
	n, r := s.newNode(t), s.res(t)
	w, ok := n.(lockcore.Watcher)
	if !ok {
		t.Skip("node does not implement lockcore.Watcher")
	}
	heard := make(chan struct{}, 16)
	stop, err := w.Watch(ctx, r, func() { heard <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	s.acq(t, n, r, leaseA, ttl)
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
	s.acq(t, n, r, leaseA, ttl)
	n.Release(ctx, r, leaseA, 0)
	select {
	case <-heard:
		t.Fatal("heard a release after stop")
	case <-time.After(100 * time.Millisecond):
	}
}

// ifToken: If-Match.
func (s *suite) ifToken(t *testing.T) {
	runIfToken(t, s.newNode, s.res)
}

// handOff: hand-off.
func (s *suite) handOff(t *testing.T) {
	if _, ok := s.newNode(t).(lockcore.HandOffer); !ok {
		t.Skip("node does not implement lockcore.HandOffer")
	}
	runHandOff(t, s.newNode, s.res)
}

// ping: ping.
func (s *suite) ping(t *testing.T) {
	ctx := context.Background()
	if err := s.newNode(t).Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

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
			if err := Initialize(context.Background(), n); err != nil {
				t.Fatalf("Initialize: %v", err)
			}
		}
		return n
	}
}

// Initialize puts a node that is not initialized in service with zero
// counters, as the bootstrap of a new cluster does: MarkInitializing, then
// Repair with the mark's epoch. It leaves an initialized node as it is.
func Initialize(ctx context.Context, n lockcore.Node) error {
	epoch, err := n.MarkInitializing(ctx)
	if err != nil || epoch == "" {
		return err
	}
	return n.Repair(ctx, make([]int64, lockcore.FenceSlots), epoch)
}

// RepairNow repairs n with floor as the guard would once its quarantine has
// lasted long enough: with the epoch of a check made now.
func RepairNow(ctx context.Context, n lockcore.Node, floor []int64) error {
	h, err := n.Check(ctx)
	if err != nil {
		return err
	}
	return n.Repair(ctx, floor, h.Epoch)
}

// runIfToken checks the expected token (If-Match) of Extend, Release and
// HandOff: checked in the same step, against the lock whoever holds it;
// StatusMismatch with the lock's token changes nothing.
func runIfToken(t *testing.T, newNode func(t *testing.T) lockcore.Node, res func(t *testing.T) string) {
	ctx := context.Background()
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
		do   ifTokenOp
	}{{"extend", extend}, {"release", release}, {"hand-off", handOff}} {
		t.Run(o.name, func(t *testing.T) {
			for _, c := range ifTokenCases {
				c.check(t, newNode(t), res(t), o.do)
			}
			if got, err := o.do(newNode(t), res(t), holder, 7); err != nil || got.Status != lockcore.StatusAbsent {
				t.Fatalf("a free lock: got %+v, %v; want absent whatever the token", got, err)
			}
		})
	}
}

// ifTokenOp is an extend, release or hand-off of r by lease with ifToken.
type ifTokenOp func(n lockcore.Node, r, lease string, ifToken int64) (lockcore.NodeReply, error)

// ifTokenCase is one If-Match check on a lock held by the lease holder.
type ifTokenCase struct {
	name    string
	lease   string
	offset  int64 // ifToken = the lock's token + offset
	want    lockcore.NodeStatus
	changed bool
}

var ifTokenCases = []ifTokenCase{
	{"the holder with another token: mismatch", holder, 1, lockcore.StatusMismatch, false},
	{"the holder with a lower token: mismatch", holder, -1, lockcore.StatusMismatch, false},
	{"another lease with another token: mismatch", other, 1, lockcore.StatusMismatch, false},
	{"another lease with the lock's token: taken", other, 0, lockcore.StatusTaken, false},
	{"the holder with its token: done", holder, 0, lockcore.StatusOK, true},
}

// check has holder take r on n, runs do, and checks its answer and the lock.
func (c ifTokenCase) check(t *testing.T, n lockcore.Node, r string, do ifTokenOp) {
	t.Helper()
	ctx := context.Background()
	// A token above 1, so that a lower one is not 0 (no check).
	if err := n.RaiseFence(ctx, r, holder, 10); err != nil {
		t.Fatal(err)
	}
	g := mustGrant(t, n, lockcore.NodeAcquire{Resource: r, Lease: holder, TTL: ttl, Replica: "rep"})
	got, err := do(n, r, c.lease, g.Token+c.offset)
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

// MustAcquire acquires req on rl, failing t on an error: for tests of
// Redlocks over any nodes.
func MustAcquire(t testing.TB, rl *lockcore.Redlock, req lockcore.AcquireRequest) *lockcore.Lease {
	t.Helper()
	l, err := rl.Acquire(context.Background(), req)
	if err != nil {
		t.Fatalf("acquire %s: %v", req.Resource, err)
	}
	return l
}
