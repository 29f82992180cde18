package redisnode_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/redisnode"
)

// A recovery is decided on a check and carried out later, after reads of
// the other nodes that may take seconds (a slow link, a paused gateway).
// These tests put a second gateway's slow recovery of node A around
// another gateway's whole recovery of A, a lock granted on A, and a loss
// of A, and check that the slow recovery puts nothing in service: rule 7a
// (serving ends the epoch) and rule 7b (a repair serves only the process
// its quarantine was made for) of package lockcore's doc.

// slowRecovery is gateway G2's recovery of a, decided on a check made now:
// the epoch it found, and what it read of node b (its counters; b holds
// no lock yet).
type slowRecovery struct {
	node  *redisnode.Node
	epoch string
	floor []int64
}

// decideRecovery checks a with G2's node, which must find it quarantined,
// and reads b's counters, as G2's recovery does before its writes.
func decideRecovery(t *testing.T, a, b *redistest.Server) slowRecovery {
	t.Helper()
	ctx := context.Background()
	g2 := connect(t, a)
	h, err := g2.Check(ctx)
	if err != nil || !h.Quarantined || h.Lost {
		t.Fatalf("G2's check of A: %+v, %v; want quarantined", h, err)
	}
	src := connect(t, b)
	if _, err := src.Check(ctx); err != nil {
		t.Fatal(err)
	}
	floor, err := src.Counters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return slowRecovery{node: g2, epoch: h.Epoch, floor: floor}
}

// finish carries out G2's recovery with what it read before.
func (r slowRecovery) finish(locks []lockcore.HeldLock) error {
	ctx := context.Background()
	if err := r.node.AdoptLocks(ctx, locks, r.epoch); err != nil {
		return err
	}
	return r.node.Repair(ctx, r.floor, r.epoch)
}

// recoverOnce is gateway G1: it recovers a quarantined node in its first
// pass (Ready) and checks nothing after it, so that it does not find the
// later loss before G2's recovery lands. Its link to node 1 is cut while
// cut is set.
func recoverOnce(t *testing.T, srvs []*redistest.Server, cut *atomic.Bool) *lockcore.Redlock {
	t.Helper()
	opts := recoverOptions()
	opts.CheckInterval = time.Hour
	g1 := gatewayCutOff(t, srvs, opts, cut)
	if err := g1.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	if h := health(t, srvs[0]); !inService(h) {
		t.Fatalf("G1 did not recover A in its first pass: %+v", h)
	}
	return g1
}

// noSecondHolder asks for res through a new gateway while b is paused:
// only A and C can grant it, and A must not, while l1 holds.
func noSecondHolder(t *testing.T, srvs []*redistest.Server, b *redistest.Server, res string, l1 *lockcore.Lease) {
	t.Helper()
	g3 := recoverGateway(t, urlsOf(srvs), true, nil)
	if l2 := secondHolder(t, g3, b, res, l1); l2 != nil {
		t.Fatalf("L2 granted (token %d) on A and C while L1 (token %d) holds on A and B", l2.Token, l1.Token)
	}
}

// TestARecoveryDecidedBeforeALaterLossDoesNotServe is the attack of the
// recovery issue: G2 decides to recover A and reads B; meanwhile G1
// recovers A, L1 is granted on A and B (C's link is cut), and A comes back
// from a copy of its data taken after its recovery, which lacks L1 (an
// everysec crash, or a backup). G2's repair then lands. Both rules refuse
// it: the copy carries no epoch (7a), and the process is not the one the
// quarantine was made for (7b). Without either, A served without L1 and
// L2 was granted on A and C.
func TestARecoveryDecidedBeforeALaterLossDoesNotServe(t *testing.T) {
	srvs := redistest.StartN(t, 3, &redistest.Options{AOF: true})
	a, b := srvs[0], srvs[2] // node 1, C, is the one whose link gatewayCutOff cuts
	for _, s := range srvs {
		initializeServer(t, s)
	}
	quarantinedOnce(t, a)
	g2 := decideRecovery(t, a, b)

	var cut atomic.Bool
	g1 := recoverOnce(t, srvs, &cut)
	copied := copyAOF(t, a) // after A's recovery, before L1
	cut.Store(true)
	l1 := acquireWithin(t, g1, lockcore.AcquireRequest{Resource: "r", TTL: recoverTTL}, 3*time.Second)
	cut.Store(false)
	restoreAOF(t, a, copied)

	if err := g2.finish(nil); !errors.Is(err, lockcore.ErrNodeChanged) {
		t.Errorf("G2's recovery after A's loss: %v, want ErrNodeChanged", err)
	}
	if h := health(t, a); inService(h) {
		t.Errorf("A is in service after G2's stale recovery, without L1: %+v", h)
	}
	noSecondHolder(t, srvs, b, "r", l1)
}

// TestARecoveryDoesNotServeAnotherProcess: as above, but A comes back from
// a copy taken during its quarantine, before G1 recovered it. That copy
// carries the quarantine's epoch (rule 7a does not apply): only rule 7b,
// the process the quarantine was made for, checked where serve.lua serves,
// refuses G2's repair. Without it A served without L1.
func TestARecoveryDoesNotServeAnotherProcess(t *testing.T) {
	srvs := redistest.StartN(t, 3, &redistest.Options{AOF: true})
	a, b := srvs[0], srvs[2]
	for _, s := range srvs {
		initializeServer(t, s)
	}
	quarantinedOnce(t, a)
	g2 := decideRecovery(t, a, b)
	copied := copyAOF(t, a) // during the quarantine

	var cut atomic.Bool
	g1 := recoverOnce(t, srvs, &cut)
	cut.Store(true)
	l1 := acquireWithin(t, g1, lockcore.AcquireRequest{Resource: "r", TTL: recoverTTL}, 3*time.Second)
	cut.Store(false)
	restoreAOF(t, a, copied)
	if h := health(t, a); h.Epoch != g2.epoch {
		t.Fatalf("the copy carries epoch %q, want the quarantine's %q (the case rule 7a does not cover)", h.Epoch, g2.epoch)
	}

	if err := g2.finish(nil); !errors.Is(err, lockcore.ErrNodeChanged) {
		t.Errorf("G2's recovery of another process: %v, want ErrNodeChanged", err)
	}
	if h := health(t, a); inService(h) {
		t.Errorf("A is in service after G2's recovery of another process, without L1: %+v", h)
	}
	noSecondHolder(t, srvs, b, "r", l1)
}

// TestARecoveryDecidedBeforeAServeChangesNothing: G2's recovery lands
// after G1's recovery served A, on the same process, with a lock G2 read
// that has changed hands since (lease x released it, lease y holds it).
// Rule 7a refuses it: without it, adopt.lua found two leases on one name
// and made y's copy on A held for nobody, so y lost A, and with one more
// node out its next extend failed.
func TestARecoveryDecidedBeforeAServeChangesNothing(t *testing.T) {
	srvs := redistest.StartN(t, 3, nil)
	a, b := srvs[0], srvs[2]
	for _, s := range srvs {
		initializeServer(t, s)
	}
	quarantinedOnce(t, a)
	g2 := decideRecovery(t, a, b)
	stale := []lockcore.HeldLock{{Resource: "r", NodeLock: lockcore.NodeLock{Found: true, Lease: "lease-x-0123456789abcdef",
		Token: 1, TTL: recoverTTL, Remaining: recoverTTL}}}

	var cut atomic.Bool
	g1 := recoverOnce(t, srvs, &cut)
	ly := acquireWithin(t, g1, lockcore.AcquireRequest{Resource: "r", TTL: recoverTTL}, 3*time.Second)

	if err := g2.finish(stale); !errors.Is(err, lockcore.ErrNodeChanged) {
		t.Errorf("G2's recovery after G1 served A: %v, want ErrNodeChanged", err)
	}
	got, err := connect(t, a).Client().HGet(context.Background(), "lockgate:{r}:lock", "lease").Result()
	if err != nil || got != ly.ID {
		t.Fatalf("A's copy of r after G2's stale recovery is held for %q (%v), want the holder's lease", got, err)
	}
}
