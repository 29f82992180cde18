package lockcore

import (
	"context"
	"fmt"
	"time"
)

// HeldLock is one lock a node holds, as Adopter takes it in.
type HeldLock struct {
	Resource string
	NodeLock
}

// Adopter is implemented by nodes that can recover from the other nodes
// instead of waiting out a quarantine of the largest TTL (see the package
// doc, "Nodes that lose their data"): the guard reads the locks that
// enough other nodes hold and hands them to AdoptLocks before Repair puts
// the node back in service.
type Adopter interface {
	// AdoptLocks takes in locks held on other nodes, each with at least its
	// Remaining time to live: a free lock becomes held for the lease with
	// the lock's token; a lock held here for another lease becomes held for
	// no lease until the later of the two expiries (neither lease may then
	// extend or take it here). The larger token stays. It acts only while
	// the node's epoch is epoch, as Repair does, and fails with
	// ErrNodeChanged otherwise.
	AdoptLocks(ctx context.Context, locks []HeldLock, epoch string) error
}

// suspect records that a lock operation found node i out of service, and
// asks for a pass: the node may be quarantined, or, if its check finds it
// in service, a slot of it lost its counter (see audit).
func (g *guard) suspect(i int) {
	g.suspects[i].Store(true)
	g.poke()
}

// auditEvery bounds how often a node's slots are audited (16384 counters
// read): lock operations on a node out of service suspect it at every
// call.
const auditEvery = 10 * time.Second

// audit reads every slot counter of node i, which its check found in
// service but a lock operation found out of service: a slot whose counter
// is gone (deleted by hand, evicted before the policy was fixed) refuses
// every lock of its resources on that node, while the node looks whole.
// Such a node is quarantined, which removes its record, and recovers like
// any other. It reports whether it quarantined the node.
func (g *guard) audit(ctx context.Context, i int) bool {
	if !g.suspects[i].Swap(false) || time.Since(g.audited[i]) < auditEvery {
		return false
	}
	g.audited[i] = time.Now()
	bctx, cancel := context.WithTimeout(ctx, bulkTimeout)
	defer cancel()
	if _, err := g.nodes[i].Counters(bctx); !isQuarantined(err) {
		return false
	}
	g.set(i, NodeLost, "a slot's fencing counter is missing (deleted, or evicted)")
	g.do(ctx, i, "quarantine", func(ctx context.Context) error { return g.nodes[i].Quarantine(ctx) })
	return true
}

// recoverNeed is how many other nodes in service a node that lost data
// must read to recover at once (see the package doc, step 7): every lock
// that holds a quorum, and every token fenced on a quorum, is on at least
// quorum − 1 nodes other than the lost one, so any recoverNeed of the
// other n − 1 nodes include one of them. With 3 nodes both others, with 5
// three of the other four; a single node never recovers at once.
func recoverNeed(n, quorum int) int { return n - quorum + 1 }

// sources lists the nodes other than i that res found in service.
func sources(i int, res []checkResult) []int {
	var out []int
	for j, c := range res {
		if j != i && c.err == nil && healthError(c.h) == nil {
			out = append(out, j)
		}
	}
	return out
}

// recoverable reports whether node i can recover from the other nodes now
// instead of waiting out its quarantine: it takes in locks (Adopter),
// enough others are in service and each can list its locks (Lister).
func (g *guard) recoverable(i int, res []checkResult) bool {
	if _, ok := g.nodes[i].(Adopter); !ok {
		return false
	}
	src := sources(i, res)
	for _, j := range src {
		if _, ok := g.nodes[j].(Lister); !ok {
			return false
		}
	}
	return len(src) >= recoverNeed(len(g.nodes), g.r.quorum)
}

// repair raises node i's counters to the highest each slot has on the other
// nodes in service, and puts it back in service. For a recovery (early:
// its quarantine has not lasted the largest TTL), it first takes in the
// locks those nodes hold (Adopter). Either needs recoverNeed such nodes:
// they share a node with the quorum that fenced any token, and that holds
// any live lock (see the package doc). A recovery that cannot read enough
// of them fails and the quarantine goes on; a repair after the quarantine
// (no lock the node held can still be live) raises the counters to
// clockFloor as well when it has fewer (one node alone, or a majority that
// lost data). The repair takes the epoch of the check that found the node
// quarantined: if the node was quarantined again or lost its data since, it
// does nothing (see GuardNode.Repair).
func (g *guard) repair(ctx context.Context, i int, res []checkResult, early bool) error {
	floor, locks, read := g.readSources(ctx, sources(i, res), early)
	need := recoverNeed(len(g.nodes), g.r.quorum)
	switch {
	case early && read < need:
		return fmt.Errorf("recovery read %d of the %d other nodes in service it needs; the quarantine goes on", read, need)
	case early:
		if err := g.nodes[i].(Adopter).AdoptLocks(ctx, locks, res[i].h.Epoch); err != nil {
			return err
		}
	case read < need:
		if len(g.nodes) > 1 {
			g.r.opt.Observer.QuorumFailed("repair")
		}
		raiseAll(floor, clockFloor(g.r.opt.Clock.Now()))
	}
	return g.nodes[i].Repair(ctx, floor, res[i].h.Epoch)
}

// readSources reads the nodes src: each one's counters and, for a recovery
// (early), the locks it holds. floor is the highest counter of each slot,
// locks every lock read, and read how many nodes were read in full.
func (g *guard) readSources(ctx context.Context, src []int, early bool) (floor []int64, locks []HeldLock, read int) {
	floor = make([]int64, FenceSlots)
	for _, j := range src {
		held, counters, ok := g.readSource(ctx, j, early)
		if !ok {
			continue
		}
		locks = append(locks, held...)
		for s, v := range counters {
			floor[s] = max(floor[s], v)
		}
		read++
	}
	return floor, locks, read
}

// readSource reads node j's counters and, when early, first its locks; ok
// is false when either failed.
func (g *guard) readSource(ctx context.Context, j int, early bool) (held []HeldLock, counters []int64, ok bool) {
	if early {
		var err error
		if held, err = heldLocks(ctx, g.nodes[j].(Lister)); err != nil {
			return nil, nil, false
		}
	}
	// After the locks: Counters fails if the node lost its data while they
	// were read.
	counters, err := g.nodes[j].Counters(ctx)
	if err != nil || len(counters) != FenceSlots {
		return nil, nil, false
	}
	return held, counters, true
}

// raiseAll raises every entry of floor to at least v.
func raiseAll(floor []int64, v int64) {
	for s := range floor {
		floor[s] = max(floor[s], v)
	}
}

// heldLocks reads every lock l holds, by bounded listing steps.
func heldLocks(ctx context.Context, l Lister) ([]HeldLock, error) {
	var out []HeldLock
	cursor := ""
	for {
		names, next, err := l.ScanLocks(ctx, "", cursor, 1000)
		if err != nil {
			return nil, err
		}
		if out, err = appendHeld(ctx, l, out, names); err != nil {
			return nil, err
		}
		if next == "" {
			return out, nil
		}
		cursor = next
	}
}

// appendHeld reads the locks on names from l and appends to out those held.
func appendHeld(ctx context.Context, l Lister, out []HeldLock, names []string) ([]HeldLock, error) {
	if len(names) == 0 {
		return out, nil
	}
	views, err := l.InspectLocks(ctx, names)
	if err != nil {
		return nil, err
	}
	for k, v := range views {
		if v.Found && k < len(names) {
			out = append(out, HeldLock{Resource: names[k], NodeLock: v})
		}
	}
	return out, nil
}

// ClockFloor is the counter floor the guard raises a node's counters to
// when it cannot read enough other nodes (see clockFloor), exported for
// stores that start without any memory of earlier tokens, such as the
// embedded node: a token minted from a counter that starts at ClockFloor(now)
// is above every token minted before from a counter that started at an
// earlier ClockFloor, as long as fewer than 1000 tokens per millisecond
// were minted on one slot on average since, and the wall clock has not
// gone back.
func ClockFloor(now time.Time) int64 { return clockFloor(now) }

// clockFloor is a counter floor from the wall clock: 1000 per millisecond
// since 1970. A counter repaired to it is above every token granted before,
// as long as fewer than 1000 grants per millisecond were made on the slot
// on average since it was last set this way, and the clock has not gone
// back. It stays below MaxToken until the year 2255.
func clockFloor(now time.Time) int64 { return now.UnixMilli() * 1000 }
