package nodetest

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
)

// RunDataLoss checks what a node does about lost data (see lockcore.Node
// and lockcore.NodeHealth): a node that lost its data refuses every
// operation that reads or writes a lock until it is repaired, a quarantine
// starts its clock at every call, Counters reports each slot's counter, and Repair raises
// counters (never lowers them) and puts the node back in service.
//
// loseData must make n lose everything it stored, as a restart with an
// empty data set would (memnode.Node.LoseData, FLUSHALL on Redis). Nodes
// newNode returns are put in service first, as in Run.
func RunDataLoss(t *testing.T, newNode func(t *testing.T) lockcore.Node, loseData func(t *testing.T, n lockcore.Node)) {
	s := lossSuite{newNode: inService(newNode), loseData: loseData}
	for _, c := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"a node that lost its data says so and refuses every lock operation", s.lostNodeRefuses},
		{"a quarantine refuses, starts its clock at every call, and lets counters be read", s.quarantineRestartsItsClock},
		{"repair raises the counters and puts a lost node back in service", s.repairPutsBackInService},
		{"repair never lowers a counter", s.repairNeverLowers},
		{"resources of one slot share its counter", s.slotSharesItsCounter},
		{"the mark of a bootstrap shows on an empty node only, and goes with the data", s.markInitializing},
		{"a recovering node takes in other nodes' locks, within its epoch", s.adoptLocks},
		{"one holder at a time claims a node's recovery, and the claim lapses", s.recoveryClaims},
	} {
		t.Run(c.name, c.run)
	}
}

// lossSuite is what the data-loss subtests share.
type lossSuite struct {
	newNode  func(t *testing.T) lockcore.Node
	loseData func(t *testing.T, n lockcore.Node)
}

// lossLease is the lease the data-loss subtests try to use.
const lossLease = "lease-loss-0123456789"

// grant acquires resource on n for a new lease and returns its token.
func (lossSuite) grant(t *testing.T, n lockcore.Node, resource string) int64 {
	t.Helper()
	return mustGrant(t, n, lockcore.NodeAcquire{Resource: resource, Lease: lockcore.NewLeaseID(), TTL: ttl}).Token
}

// lostNodeRefuses: a node that lost its data says so and refuses every lock operation.
func (s lossSuite) lostNodeRefuses(t *testing.T) {
	ctx := context.Background()
	n := s.newNode(t)
	s.grant(t, n, "loss-held")
	s.loseData(t, n)
	// Before anyone checked it: its counters are gone, not zero, or a repair
	// that read them would rest on a node that forgot the tokens it granted.
	if _, err := n.Counters(ctx); !errors.Is(err, lockcore.ErrQuarantined) {
		t.Fatalf("Counters of a node that lost its data: %v, want ErrQuarantined", err)
	}
	h, err := n.Check(ctx)
	if err != nil || !h.Lost || h.Initialized {
		t.Fatalf("Check after the loss: %+v, %v; want lost and not initialized", h, err)
	}
	wantRefused(t, n, "loss-held", lossLease)
}

// quarantineRestartsItsClock: counters are read while in service; a
// quarantine refuses (counters too: a node out of service is no source for
// a repair), and a second Quarantine starts its clock again (a node back
// from a copy made during an earlier quarantine carries that one's start).
func (s lossSuite) quarantineRestartsItsClock(t *testing.T) {
	ctx := context.Background()
	n := s.newNode(t)
	tok := s.grant(t, n, "loss-q")
	c, err := n.Counters(ctx)
	if err != nil || len(c) != lockcore.FenceSlots || c[lockcore.FenceSlot("loss-q")] != tok {
		t.Fatalf("Counters: %d values, slot %d = %d, %v; want %d values and %d", len(c),
			lockcore.FenceSlot("loss-q"), valueAt(c, lockcore.FenceSlot("loss-q")), err, lockcore.FenceSlots, tok)
	}
	if err := n.Quarantine(ctx); err != nil {
		t.Fatal(err)
	}
	wantClockRestarts(t, n)
	wantRefused(t, n, "loss-q", lossLease)
	if _, err := n.Counters(ctx); !errors.Is(err, lockcore.ErrQuarantined) {
		t.Fatalf("Counters of a quarantined node: %v, want ErrQuarantined", err)
	}
}

// wantClockRestarts checks that a Quarantine of n, a quarantined node,
// starts its quarantine's clock again: a Check right after it reads at most
// the time the Quarantine and the Check took, as measured here, while the
// clock read more than that just before. Measured rather than slept for,
// so that a loaded machine, which stretches the calls, cannot fail it:
// a round where the calls took longer than the clock had run proves
// nothing, and the next waits twice as long before its Quarantine.
func wantClockRestarts(t *testing.T, n lockcore.Node) {
	t.Helper()
	ctx := context.Background()
	// The node's clock counts whole milliseconds: a reading may exceed the
	// time measured here by one.
	const resolution = 2 * time.Millisecond
	deadline := time.Now().Add(time.Minute)
	for ran := 100 * time.Millisecond; ; ran *= 2 {
		before := mustCheck(t, n)
		for before.QuarantinedFor < ran && time.Now().Before(deadline) {
			if !before.Quarantined || before.Lost {
				t.Fatalf("Check of a quarantined node: %+v; want quarantined, not lost", before)
			}
			time.Sleep(ran / 10)
			before = mustCheck(t, n)
		}
		start := time.Now()
		if err := n.Quarantine(ctx); err != nil {
			t.Fatal(err)
		}
		again := mustCheck(t, n)
		took := time.Since(start)
		if !before.Quarantined || !again.Quarantined || again.Lost || again.QuarantinedFor > took+resolution {
			t.Fatalf("checks %+v, then, %v after a Quarantine began, %+v: want quarantined, its clock started again by that Quarantine",
				before, took, again)
		}
		if before.QuarantinedFor > took+resolution {
			return // a clock that ran on would have read more than took
		}
		if time.Now().After(deadline) {
			t.Fatalf("a Quarantine and a Check took %v, more than the quarantine's clock had run (%v), for a minute", took, before.QuarantinedFor)
		}
	}
}

// markInitializing: MarkInitializing changes nothing on a node in service;
// on a node without data it shows in Check (Initializing, for a time that
// grows), grants nothing, and a Repair ends it; a loss of the data takes
// the mark with it.
func (s lossSuite) markInitializing(t *testing.T) {
	n := s.newNode(t)
	markInService(t, n)
	s.grant(t, n, "loss-m")
	s.loseData(t, n)
	if h := mustCheck(t, n); h.Initializing {
		t.Fatalf("Check after the loss: %+v; want no mark", h)
	}
	epoch := markEmpty(t, n)
	wantRefused(t, n, "loss-m", lossLease)
	repairMarked(t, n, epoch)
	s.loseData(t, n)
	if h := mustCheck(t, n); h.Initializing || h.Epoch != "" {
		t.Fatalf("Check after a second loss: %+v; want no mark, no epoch", h)
	}
	if err := n.Repair(context.Background(), make([]int64, lockcore.FenceSlots), epoch); !errors.Is(err, lockcore.ErrNodeChanged) {
		t.Fatalf("Repair with the lost mark's epoch: %v; want ErrNodeChanged", err)
	}
}

// markInService checks that MarkInitializing changes nothing on n, a node
// in service.
func markInService(t *testing.T, n lockcore.Node) {
	t.Helper()
	if epoch, err := n.MarkInitializing(context.Background()); err != nil || epoch != "" {
		t.Fatalf("MarkInitializing of a node in service: %q, %v; want no epoch", epoch, err)
	}
	if h := mustCheck(t, n); !h.Initialized || h.Initializing {
		t.Fatalf("Check of a node in service after MarkInitializing: %+v; want initialized, no mark", h)
	}
}

// markEmpty marks n, a node without data, and checks that Check shows the
// mark, for a time that grows, and that a second mark shares the first's
// epoch, which it returns.
func markEmpty(t *testing.T, n lockcore.Node) string {
	t.Helper()
	ctx := context.Background()
	epoch, err := n.MarkInitializing(ctx)
	if err != nil || epoch == "" {
		t.Fatalf("MarkInitializing of an empty node: %q, %v; want an epoch", epoch, err)
	}
	first := mustCheck(t, n)
	time.Sleep(30 * time.Millisecond)
	again := mustCheck(t, n)
	if !first.Initializing || first.Initialized || !again.Initializing || again.InitializingFor < first.InitializingFor+25*time.Millisecond {
		t.Fatalf("checks %+v then %+v: want marked, not initialized, the mark's age growing", first, again)
	}
	if first.Epoch != epoch {
		t.Fatalf("Check's epoch %q, want the mark's %q", first.Epoch, epoch)
	}
	if e2, err := n.MarkInitializing(ctx); err != nil || e2 != epoch {
		t.Fatalf("MarkInitializing again: %q, %v; want the same epoch %q (gateways share a mark)", e2, err, epoch)
	}
	return epoch
}

// repairMarked checks that only a Repair with the mark's epoch puts n, a
// marked node, in service, and that it ends the mark.
func repairMarked(t *testing.T, n lockcore.Node, epoch string) {
	t.Helper()
	ctx := context.Background()
	for _, stale := range []string{"", "another-epoch"} {
		if err := n.Repair(ctx, make([]int64, lockcore.FenceSlots), stale); !errors.Is(err, lockcore.ErrNodeChanged) {
			t.Fatalf("Repair with epoch %q: %v; want ErrNodeChanged", stale, err)
		}
	}
	if err := n.Repair(ctx, make([]int64, lockcore.FenceSlots), epoch); err != nil {
		t.Fatal(err)
	}
	if h := mustCheck(t, n); !h.Initialized || h.Initializing || h.Quarantined {
		t.Fatalf("Check after Repair: %+v; want in service, no mark", h)
	}
}

// repairPutsBackInService: repair raises the counters and puts a lost node back in service.
func (s lossSuite) repairPutsBackInService(t *testing.T) {
	ctx := context.Background()
	n := s.newNode(t)
	s.loseData(t, n)
	if err := n.Quarantine(ctx); err != nil {
		t.Fatal(err)
	}
	floor := make([]int64, lockcore.FenceSlots)
	floor[lockcore.FenceSlot("loss-r")] = 1000
	q := mustCheck(t, n)
	if err := n.Quarantine(ctx); err != nil { // again: a new epoch
		t.Fatal(err)
	}
	if err := n.Repair(ctx, floor, q.Epoch); !errors.Is(err, lockcore.ErrNodeChanged) {
		t.Fatalf("Repair with the epoch of the quarantine before: %v; want ErrNodeChanged", err)
	}
	if err := RepairNow(ctx, n, floor); err != nil {
		t.Fatal(err)
	}
	if h := mustCheck(t, n); !h.Initialized || h.Lost || h.Quarantined || h.Refusing != "" {
		t.Fatalf("Check after Repair: %+v; want in service", h)
	}
	if tok := s.grant(t, n, "loss-r"); tok != 1001 {
		t.Fatalf("token after a repair to 1000: %d, want 1001", tok)
	}
}

// repairNeverLowers: repair never lowers a counter.
func (s lossSuite) repairNeverLowers(t *testing.T) {
	ctx := context.Background()
	n := s.newNode(t)
	var tok int64
	for range 3 {
		tok = s.grant(t, n, "loss-keep")
		if rep, err := n.Release(ctx, "loss-keep", mustInspect(t, n, "loss-keep").Lease, 0); err != nil || rep.Status != lockcore.StatusOK {
			t.Fatalf("release: %+v, %v", rep, err)
		}
	}
	if err := n.Quarantine(ctx); err != nil {
		t.Fatal(err)
	}
	if err := RepairNow(ctx, n, make([]int64, lockcore.FenceSlots)); err != nil {
		t.Fatal(err)
	}
	if next := s.grant(t, n, "loss-keep"); next <= tok {
		t.Fatalf("token after a repair to 0: %d, want above %d", next, tok)
	}
}

// slotSharesItsCounter: resources of one slot share its counter.
func (s lossSuite) slotSharesItsCounter(t *testing.T) {
	n := s.newNode(t)
	a, b := SameSlot()
	ta := s.grant(t, n, a)
	tb := s.grant(t, n, b)
	if tb != ta+1 {
		t.Fatalf("tokens %d (%s) then %d (%s) in slot %d: want one counter", ta, a, tb, b, lockcore.FenceSlot(a))
	}
}

// adoptLocks: a quarantined node takes in locks (lockcore.Adopter) only
// with its quarantine's epoch: a free lock becomes held for the lease, a
// lock held for the same lease keeps the larger token, a lock held for
// another lease is held for neither; each lives at least its Remaining.
func (s lossSuite) adoptLocks(t *testing.T) {
	ctx := context.Background()
	n := s.newNode(t)
	ad, ok := n.(lockcore.Adopter)
	if !ok {
		t.Fatalf("%T is no lockcore.Adopter", n)
	}
	mine := mustGrant(t, n, lockcore.NodeAcquire{Resource: "adopt-mine", Lease: "adopt-lease-mine-0123", TTL: ttl})
	mustGrant(t, n, lockcore.NodeAcquire{Resource: "adopt-both", Lease: "adopt-lease-here-0123", TTL: ttl})
	if err := n.Quarantine(ctx); err != nil {
		t.Fatal(err)
	}
	q := mustCheck(t, n)
	locks := []lockcore.HeldLock{
		{Resource: "adopt-free", NodeLock: lockcore.NodeLock{Found: true, Lease: "adopt-lease-free-0123", Token: 50, Owner: "o", TTL: 3 * ttl, Remaining: 3 * ttl}},
		{Resource: "adopt-mine", NodeLock: lockcore.NodeLock{Found: true, Lease: "adopt-lease-mine-0123", Token: mine.Token + 100, TTL: ttl, Remaining: ttl}},
		{Resource: "adopt-both", NodeLock: lockcore.NodeLock{Found: true, Lease: "adopt-lease-else-0123", Token: 7, TTL: ttl, Remaining: ttl}},
	}
	if err := n.Quarantine(ctx); err != nil { // a new epoch: q's is stale
		t.Fatal(err)
	}
	if err := ad.AdoptLocks(ctx, locks, q.Epoch); !errors.Is(err, lockcore.ErrNodeChanged) {
		t.Fatalf("AdoptLocks with a stale epoch: %v, want ErrNodeChanged", err)
	}
	q = mustCheck(t, n)
	if err := ad.AdoptLocks(ctx, locks, q.Epoch); err != nil {
		t.Fatal(err)
	}
	if err := n.Repair(ctx, make([]int64, lockcore.FenceSlots), q.Epoch); err != nil {
		t.Fatal(err)
	}
	checkAdopted(t, n, mine.Token+100)
}

// checkAdopted checks the locks adoptLocks had n adopt: the free one held
// for its lease and beyond ttl, the same lease's with the larger token
// (mineToken), the disputed one held for neither lease.
func checkAdopted(t *testing.T, n lockcore.Node, mineToken int64) {
	t.Helper()
	if l := mustInspect(t, n, "adopt-free"); l.Lease != "adopt-lease-free-0123" || l.Token != 50 || l.Remaining <= ttl {
		t.Fatalf("adopted free lock: %+v", l)
	}
	if l := mustInspect(t, n, "adopt-mine"); l.Lease != "adopt-lease-mine-0123" || l.Token != mineToken {
		t.Fatalf("adopted lock of the same lease: %+v, want token %d", l, mineToken)
	}
	for _, lease := range []string{"adopt-lease-here-0123", "adopt-lease-else-0123"} {
		if rep, err := n.Extend(context.Background(), "adopt-both", lease, 0, 0); err != nil || rep.Status == lockcore.StatusOK {
			t.Fatalf("extend of a lock two leases' copies disagreed on, by %s: %+v, %v; want refused", lease, rep, err)
		}
		mustRefuse(t, n, lockcore.NodeAcquire{Resource: "adopt-both", Lease: lease, TTL: ttl})
	}
}

// recoveryClaims checks lockcore.RecoveryClaimer on a node that implements
// it (on a lost node: a claim works whatever the node's state): one holder
// at a time, renewed by its holder, dropped only by its holder, lapsing
// after its TTL, and gone with the node's data.
func (s lossSuite) recoveryClaims(t *testing.T) {
	n := s.newNode(t)
	c, ok := n.(lockcore.RecoveryClaimer)
	if !ok {
		t.Fatalf("%T is no lockcore.RecoveryClaimer", n)
	}
	ctx := context.Background()
	s.loseData(t, n)
	claim := func(holder string, ttl time.Duration, want bool) {
		t.Helper()
		if got, err := c.ClaimRecovery(ctx, holder, ttl); err != nil || got != want {
			t.Fatalf("ClaimRecovery(%s): %v, %v; want %v", holder, got, err, want)
		}
	}
	claim("a", time.Minute, true)
	claim("b", time.Minute, false)
	claim("a", time.Minute, true) // renewed
	if err := c.DropRecoveryClaim(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	claim("b", time.Minute, false) // b's drop did not remove a's claim
	if err := c.DropRecoveryClaim(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	claim("b", 100*time.Millisecond, true)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if got, err := c.ClaimRecovery(ctx, "a", time.Minute); err == nil && got {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("b's claim with a 100 ms TTL had not lapsed after 10 s")
		}
	}
	s.loseData(t, n)
	claim("b", time.Minute, true) // a's claim went with the data
}

// SameSlot returns two distinct resource names of one fencing slot.
func SameSlot() (a, b string) {
	a = "slot-mate-0"
	for i := 1; ; i++ {
		b = "slot-mate-" + strconv.Itoa(i)
		if lockcore.FenceSlot(b) == lockcore.FenceSlot(a) {
			return a, b
		}
	}
}

func valueAt(c []int64, i int) int64 {
	if i < len(c) {
		return c[i]
	}
	return -1
}

func mustCheck(t *testing.T, n lockcore.Node) lockcore.NodeHealth {
	t.Helper()
	h, err := n.Check(context.Background())
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	return h
}

func mustInspect(t *testing.T, n lockcore.Node, resource string) lockcore.NodeLock {
	t.Helper()
	l, err := n.Inspect(context.Background(), resource)
	if err != nil || !l.Found {
		t.Fatalf("Inspect(%s): %+v, %v", resource, l, err)
	}
	return l
}

// wantRefused checks that every lock operation on n fails with
// lockcore.ErrQuarantined.
func wantRefused(t *testing.T, n lockcore.Node, resource, lease string) {
	t.Helper()
	ctx := context.Background()
	req := lockcore.NodeAcquire{Resource: resource, Lease: lease, TTL: time.Second}
	ops := map[string]func() error{
		"acquire": func() error { _, err := n.Acquire(ctx, req); return err },
		"extend":  func() error { _, err := n.Extend(ctx, resource, lease, 0, 0); return err },
		"release": func() error { _, err := n.Release(ctx, resource, lease, 0); return err },
		"fence":   func() error { return n.RaiseFence(ctx, resource, lease, 5) },
		"inspect": func() error { _, err := n.Inspect(ctx, resource); return err },
	}
	if l, ok := n.(lockcore.Lister); ok { // a listing would miss what it lost
		ops["scan"] = func() error { _, _, err := l.ScanLocks(ctx, "", "", 100); return err }
		ops["inspect locks"] = func() error { _, err := l.InspectLocks(ctx, []string{resource}); return err }
	}
	if h, ok := n.(lockcore.HandOffer); ok {
		ops["handoff"] = func() error { _, _, err := h.HandOff(ctx, lease, 0, req); return err }
	}
	for op, do := range ops {
		if err := do(); !errors.Is(err, lockcore.ErrQuarantined) {
			t.Errorf("%s on a node out of service: %v, want ErrQuarantined", op, err)
		}
	}
}
