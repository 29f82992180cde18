package lockcore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
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

// RecoveryClaimer is implemented by nodes on which gateway replicas agree
// which of them recovers the node, so that one recovery of a node runs at
// a time and the others wait for it rather than repeat its reads (rule 7e
// in the package doc). A claim is about work only: what keeps a recovery
// safe is its epoch (rules 7a–7d), so a claim that lapses while its holder
// is paused costs a second recovery, never a wrong one.
type RecoveryClaimer interface {
	// ClaimRecovery takes, or renews, holder's claim on the node's recovery
	// for ttl on the node's own clock, and reports whether holder holds it
	// afterwards: false while another holder's claim lives. It works
	// whatever the node's state.
	ClaimRecovery(ctx context.Context, holder string, ttl time.Duration) (bool, error)
	// DropRecoveryClaim removes holder's claim, if it is still holder's.
	DropRecoveryClaim(ctx context.Context, holder string) error
}

// Recovery claims (see RecoveryClaimer).
const (
	// claimTTL is how long a recovery claim lives unless renewed: how long
	// the other replicas wait before they take over the recovery of a
	// replica that stopped or hung while it recovered.
	claimTTL = 5 * time.Second
	// claimRenew is how often a recovery renews its claim.
	claimRenew = claimTTL / 4
)

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
	g.set(i, NodeLost, "a slot's fencing counter is missing (deleted, or evicted)", "")
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
// locks those nodes hold (Adopter), streamed page by page (see
// recoverFrom). Either needs recoverNeed such nodes: they share a node with
// the quorum that fenced any token, and that holds any live lock (see the
// package doc). A recovery that cannot read enough of them fails and the
// quarantine goes on; a repair after the quarantine (no lock the node held
// can still be live) raises the counters to clockFloor as well when it has
// fewer (one node alone, or a majority that lost data). The repair takes
// the epoch of the check that found the node quarantined: if the node was
// quarantined again or lost its data since, it does nothing (see
// GuardNode.Repair).
//
// A repair is bounded by the ctx it is given (guard.do's bulkTimeout); a
// recovery is not: each of its steps has its own pageTimeout, so it goes on
// as long as its steps do, however many locks there are, and ends when one
// fails or ctx is cancelled (the guard closes).
func (g *guard) repair(ctx context.Context, i int, res []checkResult, early bool) error {
	src, epoch := sources(i, res), res[i].h.Epoch
	need := recoverNeed(len(g.nodes), g.r.quorum)
	var floor []int64
	var read int
	if early {
		var err error
		if floor, read, err = g.recoverFrom(ctx, i, src, epoch, need, func(j int) source { return g.nodes[j].(source) }); err != nil {
			return err
		}
	} else {
		floor, read = g.readCounters(ctx, src)
	}
	switch {
	case early && read < need:
		return fmt.Errorf("recovery read %d of the %d other nodes in service it needs; the quarantine goes on", read, need)
	case !early && read < need:
		if len(g.nodes) > 1 {
			g.r.opt.Observer.QuorumFailed("repair")
		}
		raiseAll(floor, clockFloor(g.r.opt.Clock.Now()))
	}
	rctx, cancel := context.WithTimeout(ctx, pageTimeout)
	defer cancel()
	return g.nodes[i].Repair(rctx, floor, epoch)
}

// recover recovers node i from the other nodes in service (repair, early),
// and reports a failure as the node's state, as do does; unlike do, it
// gives the recovery no overall deadline (see repair). On a
// RecoveryClaimer it first claims the recovery, and holds the claim, renewed,
// while it recovers: when another replica holds the claim, it leaves the
// node to that replica and returns when to look again (otherwise -1). A
// recovery whose claim another replica took (it lapsed while this one was
// paused) stops.
func (g *guard) recover(ctx context.Context, i int, res []checkResult) time.Duration {
	return g.claimed(ctx, i, func(ctx context.Context) error { return g.repair(ctx, i, res, true) })
}

// claimed runs the recovery run of node i under the node's recovery claim
// (see recover).
func (g *guard) claimed(ctx context.Context, i int, run func(context.Context) error) time.Duration {
	c, ok := g.nodes[i].(RecoveryClaimer)
	if !ok {
		g.failed(ctx, i, "recover", run(ctx))
		return -1
	}
	claim := func(ctx context.Context) (bool, error) {
		cctx, cancel := context.WithTimeout(ctx, pageTimeout)
		defer cancel()
		return c.ClaimRecovery(cctx, g.r.id, claimTTL)
	}
	mine, err := claim(ctx)
	switch {
	case err != nil:
		g.failed(ctx, i, "recover", err)
		return -1
	case !mine:
		return claimRenew
	}
	rctx, stop := context.WithCancel(ctx)
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		t := time.NewTicker(claimRenew)
		defer t.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-t.C:
				// A failed renewal goes on: the epoch keeps the recovery
				// safe, and the claim lives on for a while.
				if mine, err := claim(rctx); err == nil && !mine {
					stop()
					return
				}
			}
		}
	}()
	err = run(rctx)
	// Before stop: rctx ends early only when the renewal found the claim
	// taken over, or when ctx ends.
	taken := rctx.Err() != nil && ctx.Err() == nil
	stop()
	<-renewed
	dctx, cancel := context.WithTimeout(g.ctx, pageTimeout)
	_ = c.DropRecoveryClaim(dctx, g.r.id)
	cancel()
	if err != nil && taken {
		return 0 // another replica took the recovery over: look again
	}
	g.failed(ctx, i, "recover", err)
	return -1
}

// Recovery steps.
const (
	// pageTimeout bounds each step of a recovery: one page read from a
	// source (a scan step and the read of its locks), the adoption of one
	// page, a source's counters, the final Repair.
	pageTimeout = bulkTimeout
	// pageTries is how many times a recovery takes a page's read step
	// before it gives up on the source: a step taken again from the same
	// cursor returns every name it returned before that is still held
	// (Lister), so a slow moment costs one page, not the walk.
	pageTries = 2
	// recoverScanCount is the COUNT hint of a recovery's scan steps: about
	// as many locks a page, each page held by one source for about a
	// millisecond per step.
	recoverScanCount = 2000
	// pagesAhead is how many pages the sources may read ahead of the
	// adoption: besides takenIn, a recovery holds at most pagesAhead
	// pages in memory, one page being read per source and the page being
	// adopted, whatever the number of locks (a lock is about 200 bytes
	// here).
	pagesAhead = 4
	// recoverPad is added to the remaining time to live of every lock a
	// recovery adopts, so that the same lock read from another source
	// (same lease and token, an expiry that differs only by the reads'
	// latency and the nodes' skew) is found already taken in and not sent
	// again: every lock held on a quorum is on several sources, and the
	// node they are adopted into does the work of the whole recovery one
	// script at a time. The cost: an adopted lock that its holder lets
	// expire stays on the recovered node alone that much longer, which no
	// quorum of the other nodes waits for.
	recoverPad = time.Second
	// takenInMax bounds the locks takenIn remembers (48 bytes each, about
	// 110 MB of heap with the map's own for a million); past it, locks
	// not already remembered are adopted as read, so only the node's work
	// grows.
	takenInMax = 1 << 20
	// adoptWorkers is how many pages a recovery adopts at once.
	adoptWorkers = 2
)

// page is a page of locks a source holds, and when its read returned.
type page struct {
	locks []HeldLock
	at    time.Time
}

// takenIn remembers, per resource, the last copy of a lock a recovery
// adopted, so that a copy it already covers is not adopted again (see
// recoverPad). Resources and leases are kept as two 64-bit hashes with
// seeds drawn for each recovery (no pointers for the collector to scan);
// a copy is wrongly taken as covered only when two resources' hashes and
// their leases' hashes both collide, about 2^-128 per pair, which no
// input can aim at without the seeds.
type takenIn struct {
	seeds [2]maphash.Seed
	start time.Time
	m     map[[2]uint64]adopted
}

// adopted is a copy of a lock taken in: its lease's hash, its token, and
// the earliest its copy on the node can expire (since takenIn.start).
type adopted struct {
	lease [2]uint64
	tok   int64
	until time.Duration
}

func newTakenIn() *takenIn {
	return &takenIn{seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}, start: time.Now(),
		m: make(map[[2]uint64]adopted)}
}

func (s *takenIn) hash(x string) [2]uint64 {
	return [2]uint64{maphash.String(s.seeds[0], x), maphash.String(s.seeds[1], x)}
}

// fresh returns the locks of p still to adopt, each with recoverPad added
// to its Remaining, and remembers them as adopted (the caller adopts them
// before anything else reads takenIn, or the recovery fails). It leaves
// out a lock covered by a copy adopted before: the same lease, a token no
// larger, and an expiry no later. The copy's own expiry is at least p.at
// plus the Remaining it was adopted with (its read returned at p.at, and
// its adoption came after); the lock's is at most its page's at plus its
// Remaining and the millisecond PTTL truncates. Adopting a covered lock
// would change nothing (adopt: same lease, larger token, later expiry).
func (s *takenIn) fresh(p page) []HeldLock {
	base := p.at.Sub(s.start)
	out := p.locks[:0]
	for _, l := range p.locks {
		k, lease := s.hash(l.Resource), s.hash(l.Lease)
		c, ok := s.m[k]
		if ok && c.lease == lease && l.Token <= c.tok && base+l.Remaining+time.Millisecond <= c.until {
			continue
		}
		l.Remaining = max(l.Remaining, time.Millisecond) + recoverPad
		if ok || len(s.m) < takenInMax {
			s.m[k] = adopted{lease: lease, tok: l.Token, until: base + l.Remaining}
		}
		out = append(out, l)
	}
	return out
}

// recoverFrom streams the locks the nodes src hold (each read through
// open) into node i, whose quarantine has the epoch epoch, and needs need
// of them read in full: each source is walked page by page (one
// goroutine each, pageTries tries per page), every page is adopted as it
// comes (AdoptLocks, one page at a time), and once a source's walk is over
// its counters are read: after its locks, Counters fails if the node lost
// its data while they were read. floor is the highest counter of each slot
// over the sources read in full, read how many were. A lock held alike on
// several sources is adopted once (takenIn: the sources walk their keys in
// different orders, so pages cannot be merged). recoverFrom fails when an
// adoption does (ErrNodeChanged: the node was quarantined again or lost
// its data), and stops early once too few sources are left to make
// need. When fewer than need were read and a source changed while it was
// read (ErrNodeChanged: a lender put in service, or a source quarantined),
// it fails with that error, so that the guard looks again at once rather
// than reporting node i as failing.
func (g *guard) recoverFrom(ctx context.Context, i int, src []int, epoch string, need int, open func(j int) source) (floor []int64, read int, err error) {
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pages := make(chan page, pagesAhead)
	counters := make([][]int64, len(src))
	var failed atomic.Int64
	var gaveUp atomic.Bool            // too few sources left: the readers ended ctx
	var changed atomic.Pointer[error] // a source's ErrNodeChanged
	var wg sync.WaitGroup
	for k, j := range src {
		wg.Go(func() {
			c, err := readSource(ctx, open(j), pages)
			if err != nil {
				if errors.Is(err, ErrNodeChanged) {
					changed.CompareAndSwap(nil, &err)
				}
				if len(src)-int(failed.Add(1)) < need {
					gaveUp.Store(true)
					cancel()
				}
				return
			}
			counters[k] = c
		})
	}
	go func() {
		wg.Wait()
		close(pages)
	}()
	if err := adoptPages(ctx, cancel, g.nodes[i].(Adopter), epoch, pages); err != nil &&
		!(gaveUp.Load() && parent.Err() == nil && errors.Is(err, context.Canceled)) {
		return nil, 0, err
	}
	floor = make([]int64, FenceSlots)
	for _, c := range counters {
		if c == nil {
			continue
		}
		for s, v := range c {
			floor[s] = max(floor[s], v)
		}
		read++
	}
	if e := changed.Load(); e != nil && read < need {
		return nil, read, fmt.Errorf("lockcore: a recovery source changed while it was read: %w", *e)
	}
	return floor, read, nil
}

// adoptPages adopts into a the locks of every page from pages not already
// adopted (takenIn), under epoch, adoptWorkers pages at a time: the node
// runs one while the next is being sent. It returns the first adoption's
// error, on which it calls stop (which ends ctx, so that the readers
// stop), and reads pages until the channel closes even after one.
func adoptPages(ctx context.Context, stop context.CancelFunc, a Adopter, epoch string, pages <-chan page) error {
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	work := make(chan []HeldLock)
	for range adoptWorkers {
		wg.Go(func() {
			for locks := range work {
				actx, cancel := context.WithTimeout(ctx, pageTimeout)
				err := a.AdoptLocks(actx, locks, epoch)
				cancel()
				if err != nil {
					mu.Lock()
					first = cmp.Or(first, err)
					mu.Unlock()
					stop()
				}
			}
		})
	}
	failed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return first != nil
	}
	seen := newTakenIn()
	for p := range pages {
		if locks := seen.fresh(p); len(locks) > 0 && !failed() {
			work <- locks
		}
	}
	close(work)
	wg.Wait()
	return first
}

// readSource walks every lock source l holds, page by page, and sends the
// pages that hold any to pages; then it reads l's counters. It fails when a
// page fails pageTries times, when the counters fail, or when ctx ends.
func readSource(ctx context.Context, l source, pages chan<- page) ([]int64, error) {
	cursor := ""
	for {
		held, next, err := readPage(ctx, l, cursor)
		if err != nil {
			return nil, err
		}
		if len(held) > 0 {
			select {
			case pages <- page{held, time.Now()}:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if next == "" {
			break
		}
		cursor = next
	}
	cctx, cancel := context.WithTimeout(ctx, pageTimeout)
	defer cancel()
	counters, err := l.Counters(cctx)
	if err == nil && len(counters) != FenceSlots {
		err = fmt.Errorf("lockcore: %d counters read, want %d", len(counters), FenceSlots)
	}
	return counters, err
}

// readPage takes one scan step from cursor on l and reads the locks it
// names, each try within pageTimeout, up to pageTries tries.
func readPage(ctx context.Context, l Lister, cursor string) (held []HeldLock, next string, err error) {
	for try := 1; ; try++ {
		pctx, cancel := context.WithTimeout(ctx, pageTimeout)
		var names []string
		names, next, err = l.ScanLocks(pctx, "", cursor, recoverScanCount)
		if err == nil {
			held, err = appendHeld(pctx, l, nil, names)
		}
		cancel()
		if err == nil || try == pageTries || ctx.Err() != nil {
			return held, next, err
		}
	}
}

// readCounters reads the counters of the nodes src, for a repair after a
// quarantine: floor is the highest counter of each slot, and read how many
// nodes were read.
func (g *guard) readCounters(ctx context.Context, src []int) (floor []int64, read int) {
	floor = make([]int64, FenceSlots)
	for _, j := range src {
		counters, err := g.nodes[j].Counters(ctx)
		if err != nil || len(counters) != FenceSlots {
			continue
		}
		for s, v := range counters {
			floor[s] = max(floor[s], v)
		}
		read++
	}
	return floor, read
}

// raiseAll raises every entry of floor to at least v.
func raiseAll(floor []int64, v int64) {
	for s := range floor {
		floor[s] = max(floor[s], v)
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
