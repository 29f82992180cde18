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
		{"grant watchers hear grants and hand-offs, not re-entries or refusals", s.watchAcquired},
		{"If-Match", s.ifToken},
		{"hand-off", s.handOff},
		{"ping", s.ping},
		{"BreakLock puts a hold in the lock's place and reads the counter", s.breakLock},
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

// breakLock: a force release's step on one node (rules FR1–FR4 of lockcore's
// doc): the lock is replaced by a hold that refuses every other lease,
// including the broken one; the slot's counter read covers the broken
// token; releasing the hold frees the lock, and the next token is higher.
func (s *suite) breakLock(t *testing.T) {
	ctx := context.Background()
	n, r := s.newNode(t), s.res(t)
	f, ok := n.(lockcore.ForceReleaser)
	if !ok {
		t.Fatalf("%v is not a lockcore.ForceReleaser", n)
	}
	g := s.acq(t, n, r, leaseA, ttl)
	broken, counter, err := f.BreakLock(ctx, r, leaseB, ttl)
	if err != nil || broken != g.Token || counter < g.Token {
		t.Fatalf("BreakLock of a lock held with token %d: broke %d, counter %d, %v", g.Token, broken, counter, err)
	}
	for _, lease := range []string{leaseA, "another-lease"} {
		rep, err := n.Acquire(ctx, lockcore.NodeAcquire{Resource: r, Lease: lease, TTL: ttl, Owner: "owner-" + lease})
		if err != nil || rep.Status != lockcore.StatusTaken {
			t.Fatalf("acquire by %s under the hold: %+v, %v; want taken", lease, rep, err)
		}
	}
	if rep, err := n.Release(ctx, r, leaseB, 0); err != nil || rep.Status != lockcore.StatusOK {
		t.Fatalf("release of the hold: %+v, %v", rep, err)
	}
	if got := s.acq(t, n, r, leaseA, ttl); got.Token <= counter {
		t.Fatalf("token after the hold %d, not above the counter read %d", got.Token, counter)
	}
	free := s.res(t)
	if broken, counter, err := f.BreakLock(ctx, free, leaseB, ttl); err != nil || broken != 0 || counter < 0 {
		t.Fatalf("BreakLock of a free lock: broke %d, counter %d, %v; want 0", broken, counter, err)
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
