package nodetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
)

// RunRW is the conformance suite of lockcore.RWNode (readers-writer locks,
// rules R1 to R6 of lockcore's doc) for nodes that implement it: who is
// granted beside whom, tokens, the waiting writer's mark, refused
// upgrades, extend, release, expiry, and that a node that lost its data
// takes its holds back in from what the other nodes list (Lister) before
// it serves. loseData is as for RunDataLoss.
func RunRW(t *testing.T, newNode func(t *testing.T) lockcore.Node, loseData func(t *testing.T, n lockcore.Node)) {
	s := &rwSuite{suite: suite{newNode: inService(newNode)}, loseData: loseData}
	for _, c := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"readers share a name and no writer is granted beside a reader", s.noWriterBesideAReader},
		{"a writer is granted alone: no reader and no second writer beside it", s.noTwoWriters},
		{"exactly one of many concurrent writers wins a free name", s.oneOfManyWriters},
		{"every grant takes a new token: a writer's is above every earlier holder's", s.writerTokenAboveEarlierHolders},
		{"a holder re-entering keeps its token, and the other mode is refused", s.upgradeRefused},
		{"a waiting writer's mark blocks new readers until it ends", s.waitMark},
		{"extend, release and expiry of holds", s.extendReleaseExpiry},
		{"RWRaise raises the counter and the hold's token, never lowers", s.rwRaise},
		{"a node restarted empty takes its readers back before it serves", s.adoptReaders},
	} {
		t.Run(c.name, c.run)
	}
}

type rwSuite struct {
	suite
	loseData func(t *testing.T, n lockcore.Node)
}

// Leases of the readers-writer subtests.
const (
	readerA, readerB = "rw-reader-A-0123456789", "rw-reader-B-0123456789"
	writerA, writerB = "rw-writer-A-0123456789", "rw-writer-B-0123456789"
)

func rwNode(t *testing.T, n lockcore.Node) lockcore.RWNode {
	t.Helper()
	rw, ok := n.(lockcore.RWNode)
	if !ok {
		t.Fatalf("%T is no lockcore.RWNode", n)
	}
	return rw
}

// rwAcq asks n for a hold and returns the reply, failing t on an error.
func rwAcq(t *testing.T, n lockcore.RWNode, name, lease string, exclusive bool) lockcore.NodeReply {
	t.Helper()
	r, err := n.RWAcquire(context.Background(), lockcore.NodeRWAcquire{Name: name, Lease: lease, TTL: ttl, Exclusive: exclusive, Owner: "o-" + lease})
	if err != nil {
		t.Fatalf("RWAcquire(%s, exclusive %v): %v", lease, exclusive, err)
	}
	return r
}

func wantStatus(t *testing.T, got lockcore.NodeReply, want lockcore.NodeStatus, what string) {
	t.Helper()
	if got.Status != want {
		t.Fatalf("%s: %v (%+v), want %v", what, got.Status, got, want)
	}
}

func (s *rwSuite) noWriterBesideAReader(t *testing.T) {
	n := rwNode(t, s.newNode(t))
	name := s.res(t)
	wantStatus(t, rwAcq(t, n, name, readerA, false), lockcore.StatusGranted, "first reader")
	wantStatus(t, rwAcq(t, n, name, readerB, false), lockcore.StatusGranted, "second reader")
	refused := rwAcq(t, n, name, writerA, true)
	wantStatus(t, refused, lockcore.StatusTaken, "writer beside two readers")
	if refused.PTTL <= 0 || refused.PTTL > ttl {
		t.Fatalf("refused writer's PTTL %v, want the readers' remaining TTL", refused.PTTL)
	}
	mustRelease(t, n, name, readerA)
	wantStatus(t, rwAcq(t, n, name, writerA, true), lockcore.StatusTaken, "writer beside one reader")
	mustRelease(t, n, name, readerB)
	wantStatus(t, rwAcq(t, n, name, writerA, true), lockcore.StatusGranted, "writer once the readers left")
}

func (s *rwSuite) noTwoWriters(t *testing.T) {
	n := rwNode(t, s.newNode(t))
	name := s.res(t)
	wantStatus(t, rwAcq(t, n, name, writerA, true), lockcore.StatusGranted, "writer")
	wantStatus(t, rwAcq(t, n, name, writerB, true), lockcore.StatusTaken, "second writer")
	wantStatus(t, rwAcq(t, n, name, readerA, false), lockcore.StatusTaken, "reader beside a writer")
	v, err := n.RWInspect(context.Background(), name)
	if err != nil || len(v.Holds) != 1 || !v.Holds[0].Exclusive || v.Holds[0].Lease != writerA {
		t.Fatalf("RWInspect: %+v, %v; want writer A alone", v, err)
	}
	mustRelease(t, n, name, writerA)
	wantStatus(t, rwAcq(t, n, name, writerB, true), lockcore.StatusGranted, "second writer once the first left")
}

func (s *rwSuite) oneOfManyWriters(t *testing.T) {
	n := rwNode(t, s.newNode(t))
	name := s.res(t)
	const writers = 20
	var wg sync.WaitGroup
	replies := make(chan lockcore.NodeReply, writers)
	errs := make(chan error, writers)
	for range writers {
		wg.Go(func() {
			r, err := n.RWAcquire(context.Background(), lockcore.NodeRWAcquire{Name: name, Lease: lockcore.NewLeaseID(), TTL: ttl, Exclusive: true})
			if err != nil {
				errs <- err
				return
			}
			replies <- r
		})
	}
	wg.Wait()
	close(replies)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	granted := 0
	for r := range replies {
		if r.Status == lockcore.StatusGranted {
			granted++
		}
	}
	if granted != 1 {
		t.Fatalf("%d of %d concurrent writers granted, want 1", granted, writers)
	}
}

func (s *rwSuite) writerTokenAboveEarlierHolders(t *testing.T) {
	n := rwNode(t, s.newNode(t))
	name := s.res(t)
	r1 := rwAcq(t, n, name, readerA, false)
	r2 := rwAcq(t, n, name, readerB, false)
	if r1.Token <= 0 || r2.Token <= r1.Token {
		t.Fatalf("readers' tokens %d then %d: each grant must take a new, higher token", r1.Token, r2.Token)
	}
	mustRelease(t, n, name, readerA)
	mustRelease(t, n, name, readerB)
	w := rwAcq(t, n, name, writerA, true)
	if w.Token <= r2.Token {
		t.Fatalf("writer's token %d, not above the earlier readers' %d and %d", w.Token, r1.Token, r2.Token)
	}
	mustRelease(t, n, name, writerA)
	w2 := rwAcq(t, n, name, writerB, true)
	if w2.Token <= w.Token {
		t.Fatalf("second writer's token %d, not above the first's %d", w2.Token, w.Token)
	}
	mustRelease(t, n, name, writerB)
	if r3 := rwAcq(t, n, name, readerA, false); r3.Token <= w2.Token {
		t.Fatalf("reader's token %d, not above the earlier writer's %d", r3.Token, w2.Token)
	}
	// The counter is the slot's, shared with the mutex.
	if l := rwAcqMutex(t, n, name); l.Token <= w2.Token {
		t.Fatalf("the mutex of the same name (its own lock) took token %d, not above %d: the slot's counter is shared", l.Token, w2.Token)
	}
}

// rwAcqMutex takes the mutex of the same name as a readers-writer lock:
// another lock, the same slot's counter.
func rwAcqMutex(t *testing.T, n lockcore.RWNode, name string) lockcore.NodeReply {
	t.Helper()
	r, err := n.(lockcore.Node).Acquire(context.Background(), lockcore.NodeAcquire{Resource: name, Lease: writerA, TTL: ttl})
	if err != nil || r.Status != lockcore.StatusGranted {
		t.Fatalf("mutex %s beside its readers-writer lock: %+v, %v; want granted (another lock)", name, r, err)
	}
	return r
}

func (s *rwSuite) upgradeRefused(t *testing.T) {
	n := rwNode(t, s.newNode(t))
	name := s.res(t)
	r := rwAcq(t, n, name, readerA, false)
	again := rwAcq(t, n, name, readerA, false)
	wantStatus(t, again, lockcore.StatusReentered, "reader asking again")
	if again.Token != r.Token {
		t.Fatalf("re-entered token %d, want %d", again.Token, r.Token)
	}
	wantStatus(t, rwAcq(t, n, name, readerA, true), lockcore.StatusMismatch, "reader asking for the writer's hold (upgrade)")
	w := s.res(t)
	rwAcq(t, n, w, writerA, true)
	wantStatus(t, rwAcq(t, n, w, writerA, false), lockcore.StatusMismatch, "writer asking for a reader's hold (downgrade)")
	v, err := n.RWInspect(context.Background(), name)
	if err != nil || len(v.Holds) != 1 || v.Holds[0].Exclusive || v.Holds[0].Token != r.Token {
		t.Fatalf("after a refused upgrade: %+v, %v; want the reader's hold unchanged", v, err)
	}
}

func (s *rwSuite) waitMark(t *testing.T) {
	ctx := context.Background()
	n := rwNode(t, s.newNode(t))
	name := s.res(t)
	rwAcq(t, n, name, readerA, false)
	// A writer that does not wait leaves no mark.
	wantStatus(t, rwAcq(t, n, name, writerA, true), lockcore.StatusTaken, "writer that does not wait")
	wantStatus(t, rwAcq(t, n, name, readerB, false), lockcore.StatusGranted, "reader after a writer that does not wait")
	mustRelease(t, n, name, readerB)
	waiting := lockcore.NodeRWAcquire{Name: name, Lease: writerA, TTL: ttl, Exclusive: true, Waits: true, Mark: ttl}
	if r, err := n.RWAcquire(ctx, waiting); err != nil || r.Status != lockcore.StatusTaken {
		t.Fatalf("waiting writer beside a reader: %+v, %v", r, err)
	}
	if v, err := n.RWInspect(ctx, name); err != nil || !v.Waiting {
		t.Fatalf("RWInspect after a waiting writer's refusal: %+v, %v; want Waiting", v, err)
	}
	wantStatus(t, rwAcq(t, n, name, readerB, false), lockcore.StatusTaken, "new reader while a writer waits")
	wantStatus(t, rwAcq(t, n, name, readerA, false), lockcore.StatusReentered, "holding reader re-entering while a writer waits")
	if r, err := n.RWExtend(ctx, name, readerA, 0); err != nil || r.Status != lockcore.StatusOK {
		t.Fatalf("holding reader extending while a writer waits: %+v, %v", r, err)
	}
	// A second waiting writer leaves the first's mark alone.
	second := waiting
	second.Lease = writerB
	if _, err := n.RWAcquire(ctx, second); err != nil {
		t.Fatal(err)
	}
	giveUp(t, n, name, writerB)
	wantStatus(t, rwAcq(t, n, name, readerB, false), lockcore.StatusTaken, "new reader once the second writer left")
	// The writer's grant clears its mark.
	mustRelease(t, n, name, readerA)
	if r, err := n.RWAcquire(ctx, waiting); err != nil || r.Status != lockcore.StatusGranted {
		t.Fatalf("waiting writer once the reader left: %+v, %v", r, err)
	}
	mustRelease(t, n, name, writerA)
	wantStatus(t, rwAcq(t, n, name, readerB, false), lockcore.StatusGranted, "reader after the writer's grant and release")
	// A release of a writer that never got the lock clears its mark.
	if _, err := n.RWAcquire(ctx, waiting); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, rwAcq(t, n, name, readerA, false), lockcore.StatusTaken, "new reader while a writer waits again")
	giveUp(t, n, name, writerA)
	wantStatus(t, rwAcq(t, n, name, readerA, false), lockcore.StatusGranted, "reader once the waiting writer gave up")
	// A mark expires when its writer stops trying.
	short := waiting
	short.Mark = 200 * time.Millisecond
	if _, err := n.RWAcquire(ctx, short); err != nil {
		t.Fatal(err)
	}
	other := s.res(t)
	wantStatus(t, rwAcq(t, n, name, readerA, false), lockcore.StatusReentered, "holding reader")
	time.Sleep(300 * time.Millisecond)
	if v, err := n.RWInspect(ctx, name); err != nil || v.Waiting {
		t.Fatalf("RWInspect once the mark's time ran out: %+v, %v; want no Waiting", v, err)
	}
	wantStatus(t, rwAcq(t, n, other, readerB, false), lockcore.StatusGranted, "reader of another name")
	mustRelease(t, n, name, readerB)
	wantStatus(t, rwAcq(t, n, name, readerB, false), lockcore.StatusGranted, "new reader once the mark expired")
}

func (s *rwSuite) extendReleaseExpiry(t *testing.T) {
	ctx := context.Background()
	n := rwNode(t, s.newNode(t))
	name := s.res(t)
	r := rwAcq(t, n, name, readerA, false)
	e, err := n.RWExtend(ctx, name, readerA, 2*ttl)
	if err != nil || e.Status != lockcore.StatusOK || e.Token != r.Token || e.TTL != 2*ttl {
		t.Fatalf("RWExtend: %+v, %v; want OK, token %d, TTL %v", e, err, r.Token, 2*ttl)
	}
	if e, err := n.RWExtend(ctx, name, readerB, 0); err != nil || e.Status != lockcore.StatusAbsent {
		t.Fatalf("RWExtend by a lease holding nothing: %+v, %v; want absent", e, err)
	}
	if v, err := n.RWInspect(ctx, name); err != nil || len(v.Holds) != 1 || v.Holds[0].TTL != 2*ttl || v.Holds[0].Remaining <= ttl {
		t.Fatalf("RWInspect after extend: %+v, %v", v, err)
	}
	rel, err := n.RWRelease(ctx, name, readerA)
	if err != nil || rel.Status != lockcore.StatusOK || rel.Token != r.Token {
		t.Fatalf("RWRelease: %+v, %v", rel, err)
	}
	if rel, err := n.RWRelease(ctx, name, readerA); err != nil || rel.Status != lockcore.StatusAbsent {
		t.Fatalf("second RWRelease: %+v, %v; want absent", rel, err)
	}
	short, err := n.RWAcquire(ctx, lockcore.NodeRWAcquire{Name: name, Lease: readerB, TTL: 150 * time.Millisecond})
	if err != nil || short.Status != lockcore.StatusGranted {
		t.Fatalf("short reader: %+v, %v", short, err)
	}
	wantStatus(t, rwAcq(t, n, name, writerA, true), lockcore.StatusTaken, "writer beside a short reader")
	time.Sleep(250 * time.Millisecond)
	w := rwAcq(t, n, name, writerA, true)
	wantStatus(t, w, lockcore.StatusGranted, "writer once the reader's TTL ran out")
	if w.Token <= short.Token {
		t.Fatalf("writer's token %d after an expired reader's %d", w.Token, short.Token)
	}
}

func (s *rwSuite) rwRaise(t *testing.T) {
	ctx := context.Background()
	n := rwNode(t, s.newNode(t))
	name := s.res(t)
	r := rwAcq(t, n, name, readerA, false)
	if err := n.RWRaise(ctx, name, readerA, r.Token+50); err != nil {
		t.Fatal(err)
	}
	if err := n.RWRaise(ctx, name, readerA, r.Token+10); err != nil { // never lowers
		t.Fatal(err)
	}
	if v, err := n.RWInspect(ctx, name); err != nil || len(v.Holds) != 1 || v.Holds[0].Token != r.Token+50 {
		t.Fatalf("hold after RWRaise: %+v, %v; want token %d", v, err, r.Token+50)
	}
	if b := rwAcq(t, n, name, readerB, false); b.Token != r.Token+51 {
		t.Fatalf("next grant's token %d, want %d (the raised counter + 1)", b.Token, r.Token+51)
	}
}

// adoptReaders: a node's holds are listed as locks (lockcore.Lister) under
// RWHoldResource names; a node that lost its data, quarantined and given
// those locks (lockcore.Adopter) holds the readers again and refuses a
// writer beside them. Copies that disagree (a reader's and a writer's) are
// held for neither.
func (s *rwSuite) adoptReaders(t *testing.T) {
	ctx := context.Background()
	src, lost := s.newNode(t), s.newNode(t)
	name, disputed := s.res(t), s.res(t)
	for _, n := range []lockcore.Node{src, lost} {
		rwAcq(t, rwNode(t, n), name, readerA, false)
		rwAcq(t, rwNode(t, n), name, readerB, false)
	}
	rwAcq(t, rwNode(t, src), disputed, readerA, false)
	held := listRW(t, src, name, disputed)
	if len(held) != 3 {
		t.Fatalf("the source lists %d holds, want 3: %+v", len(held), held)
	}
	// The lost node had granted the disputed name to a writer (a failed
	// attempt's leftover copy, say); its data goes, and the writer's copy
	// comes back from a third node.
	writerCopy := lockcore.HeldLock{Resource: lockcore.RWHoldResource(disputed, true, writerA),
		NodeLock: lockcore.NodeLock{Found: true, Lease: writerA, Token: 3, TTL: ttl, Remaining: ttl}}
	s.loseData(t, lost)
	if _, err := rwNode(t, lost).RWAcquire(ctx, lockcore.NodeRWAcquire{Name: name, Lease: writerA, TTL: ttl, Exclusive: true}); !errors.Is(err, lockcore.ErrQuarantined) {
		t.Fatalf("writer on a node that lost its data: %v, want ErrQuarantined", err)
	}
	if err := lost.Quarantine(ctx); err != nil {
		t.Fatal(err)
	}
	q := mustCheck(t, lost)
	if err := lost.(lockcore.Adopter).AdoptLocks(ctx, append(held, writerCopy), q.Epoch); err != nil {
		t.Fatal(err)
	}
	if err := lost.Repair(ctx, make([]int64, lockcore.FenceSlots), q.Epoch); err != nil {
		t.Fatal(err)
	}
	n := rwNode(t, lost)
	wantStatus(t, rwAcq(t, n, name, writerB, true), lockcore.StatusTaken, "writer on the recovered node beside its adopted readers")
	v, err := n.RWInspect(ctx, name)
	if err != nil || len(v.Holds) != 2 {
		t.Fatalf("recovered node's holds: %+v, %v; want the two readers", v, err)
	}
	for _, h := range v.Holds {
		if h.Exclusive || h.Remaining <= 0 || h.Token <= 0 {
			t.Fatalf("adopted hold %+v", h)
		}
	}
	if e, err := n.RWExtend(ctx, name, readerA, 0); err != nil || e.Status != lockcore.StatusOK {
		t.Fatalf("adopted reader extending: %+v, %v", e, err)
	}
	for _, lease := range []string{readerA, writerA} {
		if e, err := n.RWExtend(ctx, disputed, lease, 0); err != nil || e.Status == lockcore.StatusOK {
			t.Fatalf("extend of %s's hold beside a conflicting adopted one: %+v, %v; want refused", lease, e, err)
		}
	}
	wantStatus(t, rwAcq(t, n, disputed, readerB, false), lockcore.StatusTaken, "reader beside the disputed copies")
	wantStatus(t, rwAcq(t, n, disputed, writerB, true), lockcore.StatusTaken, "writer beside the disputed copies")
}

// listRW lists what node n holds (Lister) and keeps the readers-writer
// holds of names.
func listRW(t *testing.T, n lockcore.Node, names ...string) []lockcore.HeldLock {
	t.Helper()
	ctx := context.Background()
	l, ok := n.(lockcore.Lister)
	if !ok {
		t.Fatalf("%T is no lockcore.Lister", n)
	}
	want := map[string]bool{}
	for _, name := range names {
		want[name] = true
	}
	var out []lockcore.HeldLock
	cursor := ""
	for {
		res, next, err := l.ScanLocks(ctx, "", cursor, 1000)
		if err != nil {
			t.Fatal(err)
		}
		var mine []string
		for _, r := range res {
			if name, _, _, ok := lockcore.ParseRWHold(r); ok && want[name] {
				mine = append(mine, r)
			}
		}
		if len(mine) > 0 {
			views, err := l.InspectLocks(ctx, mine)
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range views {
				if v.Found {
					out = append(out, lockcore.HeldLock{Resource: mine[i], NodeLock: v})
				}
			}
		}
		if next == "" {
			return out
		}
		cursor = next
	}
}

func mustRelease(t *testing.T, n lockcore.RWNode, name, lease string) {
	t.Helper()
	if r, err := n.RWRelease(context.Background(), name, lease); err != nil || r.Status != lockcore.StatusOK {
		t.Fatalf("RWRelease(%s): %+v, %v", lease, r, err)
	}
}

// giveUp is the release a waiting writer sends when its wait ends without
// the lock: it holds nothing (StatusAbsent) and its mark goes.
func giveUp(t *testing.T, n lockcore.RWNode, name, lease string) {
	t.Helper()
	if r, err := n.RWRelease(context.Background(), name, lease); err != nil || r.Status != lockcore.StatusAbsent {
		t.Fatalf("RWRelease(%s) of a writer holding nothing: %+v, %v; want absent", lease, r, err)
	}
}
