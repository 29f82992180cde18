package nodetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
)

// RunSets is the suite of lock sets (Redlock.AcquireSet and its siblings,
// rules S1 to S8 of lockcore's doc) over the nodes of one kind: each
// subtest builds a Redlock over the nodes newNodes returns (a Cluster node
// spreads a set's members over its shards). Subtests use distinct resource
// names, so newNodes may return the same servers every time. The crash
// subtest runs a second Redlock over the same nodes, each wrapped in a
// Faulty that it switches off.
func RunSets(t *testing.T, newNodes func(t *testing.T) []lockcore.Node) {
	s := &setSuite{newNodes: newNodes, run: lockcore.NewLeaseID()[:8]}
	for _, c := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"a set is granted whole with a token per member, re-entered, extended and released whole", s.whole},
		{"a refused set leaves no member held", s.refusedLeavesNothing},
		{"a waiting set keeps the members it holds past their TTL until the last is granted", s.waitKeeps},
		{"a set granted after a wait has its members' validity from its last grant", s.validityFromLast},
		{"a waiting set is served before single-lock waiters that came after it", s.fairness},
		{"two sets that overlap, queued in opposite orders, are both granted", s.overlap},
		{"an extend that finds a member lost releases the rest of the set", s.extendLost},
		{"a gateway that stops mid-set leaves its members held at most their TTL", s.crash},
	} {
		t.Run(c.name, c.run)
	}
}

type setSuite struct {
	newNodes func(t *testing.T) []lockcore.Node
	run      string // names this run's resources apart from another's on the same servers
	seq      atomic.Int64
}

// SetOptions are the Redlock options of the set suite: a node timeout
// far below its TTLs, so that a busy machine does not time a node out.
func SetOptions() *lockcore.Options {
	return &lockcore.Options{NodeTimeout: 200 * time.Millisecond, MinTTL: 400 * time.Millisecond}
}

func (s *setSuite) redlock(t *testing.T, nodes []lockcore.Node) *lockcore.Redlock {
	t.Helper()
	rl, err := lockcore.New(nodes, SetOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rl.Close)
	return rl
}

// names returns n resource names no other subtest (nor run) uses, in
// canonical order.
func (s *setSuite) names(t *testing.T, n int) []string {
	base := fmt.Sprintf("set%s.%d", s.run, s.seq.Add(1))
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%c", base, 'a'+i)
	}
	return out
}

// heldBy reports the token that holds resource on a quorum, or 0.
func heldBy(t *testing.T, rl *lockcore.Redlock, resource string) int64 {
	t.Helper()
	info, err := rl.Inspect(context.Background(), resource)
	if errors.Is(err, lockcore.ErrNotHeld) {
		return 0
	}
	if err != nil {
		t.Fatalf("Inspect(%s): %v", resource, err)
	}
	return info.Token
}

func (s *setSuite) whole(t *testing.T) {
	rl := s.redlock(t, s.newNodes(t))
	ctx := context.Background()
	m := s.names(t, 5)
	before, err := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: m[2], TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := rl.Release(ctx, lockcore.ReleaseRequest{Resource: m[2], LeaseID: before.ID}); err != nil {
		t.Fatal(err)
	}
	asked := []string{m[3], m[0], m[4], m[2], m[1]}
	set, err := rl.AcquireSet(ctx, lockcore.SetAcquireRequest{Resources: asked, TTL: time.Minute, Owner: "suite"})
	if err != nil {
		t.Fatal(err)
	}
	if set.Reentered || len(set.Members) != len(m) || set.Validity < time.Minute/2 || set.Validity > time.Minute {
		t.Fatalf("set: reentered %v, %d members, validity %v", set.Reentered, len(set.Members), set.Validity)
	}
	for i, l := range set.Members {
		if l.Resource != m[i] || l.ID != set.ID || l.Token <= 0 {
			t.Fatalf("member %d: %s lease %v token %d; want %s in canonical order under the set's lease", i, l.Resource, l.ID == set.ID, l.Token, m[i])
		}
		if got := heldBy(t, rl, l.Resource); got != l.Token {
			t.Fatalf("%s: held with token %d, the set was answered %d", l.Resource, got, l.Token)
		}
	}
	if set.Members[2].Token <= before.Token {
		t.Fatalf("%s: the set's token %d is not above the earlier holder's %d", m[2], set.Members[2].Token, before.Token)
	}
	again, err := rl.AcquireSet(ctx, lockcore.SetAcquireRequest{Resources: m, LeaseID: set.ID, TTL: time.Minute})
	if err != nil || !again.Reentered {
		t.Fatalf("the same set again under its lease: %+v, %v; want it re-entered", again, err)
	}
	for i := range m {
		if again.Members[i].Token != set.Members[i].Token {
			t.Fatalf("%s: re-entry changed the token %d to %d", m[i], set.Members[i].Token, again.Members[i].Token)
		}
	}
	ext, err := rl.ExtendSet(ctx, lockcore.SetExtendRequest{Resources: asked, LeaseID: set.ID, TTL: 2 * time.Minute})
	if err != nil || ext.Validity < time.Minute || ext.TTL != 2*time.Minute {
		t.Fatalf("ExtendSet: %+v, %v", ext, err)
	}
	infos, err := rl.InspectSet(ctx, asked)
	if err != nil {
		t.Fatal(err)
	}
	for i, in := range infos {
		if in.Resource != m[i] || in.Lock == nil || in.Lock.Token != set.Members[i].Token || in.Lock.Owner != "suite" {
			t.Fatalf("InspectSet member %d: %+v", i, in)
		}
	}
	if err := rl.ReleaseSet(ctx, lockcore.SetReleaseRequest{Resources: asked, LeaseID: set.ID}); err != nil {
		t.Fatal(err)
	}
	for _, r := range m {
		if got := heldBy(t, rl, r); got != 0 {
			t.Fatalf("%s still held (token %d) after ReleaseSet", r, got)
		}
	}
	if err := rl.ReleaseSet(ctx, lockcore.SetReleaseRequest{Resources: asked, LeaseID: set.ID}); !errors.Is(err, lockcore.ErrNotHeld) {
		t.Fatalf("ReleaseSet again: %v, want ErrNotHeld", err)
	}
}

func (s *setSuite) refusedLeavesNothing(t *testing.T) {
	rl := s.redlock(t, s.newNodes(t))
	ctx := context.Background()
	m := s.names(t, 4)
	other, err := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: m[2], TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, wait := range []time.Duration{0, 300 * time.Millisecond} {
		_, err = rl.AcquireSet(ctx, lockcore.SetAcquireRequest{Resources: m, TTL: time.Minute, Wait: wait})
		serr, ok := errors.AsType[*lockcore.SetError](err)
		taken, isTaken := errors.AsType[*lockcore.TakenError](err)
		if !ok || serr.Resource != m[2] || !isTaken || taken.Resource != m[2] {
			t.Fatalf("wait %v: a set with a member held by another lease: %v; want a *SetError naming %s around its *TakenError", wait, err, m[2])
		}
		for i, r := range m {
			got := heldBy(t, rl, r)
			if i == 2 && got != other.Token {
				t.Fatalf("wait %v: the other lease's %s: token %d, want %d", wait, r, got, other.Token)
			}
			if i != 2 && got != 0 {
				t.Fatalf("wait %v: %s left held (token %d) by a refused set", wait, r, got)
			}
		}
	}
}

func (s *setSuite) waitKeeps(t *testing.T) {
	rl := s.redlock(t, s.newNodes(t))
	ctx := context.Background()
	m := s.names(t, 2)
	other, err := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: m[1], TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 500 * time.Millisecond
	type answer struct {
		set *lockcore.SetLease
		err error
	}
	done := make(chan answer, 1)
	go func() {
		set, err := rl.AcquireSet(ctx, lockcore.SetAcquireRequest{Resources: m, TTL: ttl, Wait: 10 * time.Second})
		done <- answer{set, err}
	}()
	var first int64
	for deadline := time.Now().Add(5 * time.Second); first == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the set never took %s", m[0])
		}
		first = heldBy(t, rl, m[0])
	}
	time.Sleep(3 * ttl)
	if got := heldBy(t, rl, m[0]); got != first {
		t.Fatalf("after 3 TTLs of waiting %s is held with token %d, want the set's %d", m[0], got, first)
	}
	if err := rl.Release(ctx, lockcore.ReleaseRequest{Resource: m[1], LeaseID: other.ID}); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil {
		t.Fatal(a.err)
	}
	if a.set.Members[0].Token != first || a.set.Members[1].Token <= other.Token {
		t.Fatalf("tokens %d, %d; want %d and above %d", a.set.Members[0].Token, a.set.Members[1].Token, first, other.Token)
	}
	if a.set.Validity < ttl/2 {
		t.Fatalf("validity %v after a wait: the members taken first were not extended at the end", a.set.Validity)
	}
}

func (s *setSuite) validityFromLast(t *testing.T) {
	rl := s.redlock(t, s.newNodes(t))
	ctx := context.Background()
	m := s.names(t, 2)
	other, err := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: m[1], TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// The TTL is long enough that the keeper (every TTL/3) does not run
	// during the wait: only the extend at the end can make up for it.
	const ttl, wait = 3 * time.Second, 700 * time.Millisecond
	time.AfterFunc(wait, func() { _ = rl.Release(ctx, lockcore.ReleaseRequest{Resource: m[1], LeaseID: other.ID}) })
	set, err := rl.AcquireSet(ctx, lockcore.SetAcquireRequest{Resources: m, TTL: ttl, Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if set.Validity < ttl-wait/2 {
		t.Fatalf("validity %v after a wait of %v: %s, taken before the wait, was not extended at the end", set.Validity, wait, m[0])
	}
	if set.Validity > set.Members[0].Validity && set.Validity > set.Members[1].Validity {
		t.Fatalf("validity %v above every member's (%v, %v)", set.Validity, set.Members[0].Validity, set.Members[1].Validity)
	}
}

func (s *setSuite) fairness(t *testing.T) {
	rl := s.redlock(t, s.newNodes(t))
	ctx := context.Background()
	m := s.names(t, 2)
	holder, err := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: m[1], TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	waitFor := func(n int) {
		for deadline := time.Now().Add(5 * time.Second); rl.Waiting() < n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d waiters, want %d", rl.Waiting(), n)
			}
		}
	}
	type answer struct {
		what  string
		token int64
		err   error
	}
	order := make(chan answer, 4)
	go func() {
		set, err := rl.AcquireSet(ctx, lockcore.SetAcquireRequest{Resources: m, TTL: time.Minute, Wait: 10 * time.Second})
		if err != nil {
			order <- answer{"set", 0, err}
			return
		}
		order <- answer{"set", set.Members[1].Token, nil}
		_ = rl.ReleaseSet(ctx, lockcore.SetReleaseRequest{Resources: m, LeaseID: set.ID})
	}()
	waitFor(1)
	const singles = 3
	for i := range singles {
		go func() {
			l, err := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: m[1], TTL: time.Minute, Wait: 10 * time.Second})
			if err != nil {
				order <- answer{"single", 0, err}
				return
			}
			order <- answer{"single", l.Token, nil}
			_ = rl.Release(ctx, lockcore.ReleaseRequest{Resource: m[1], LeaseID: l.ID})
		}()
		waitFor(2 + i)
	}
	if err := rl.Release(ctx, lockcore.ReleaseRequest{Resource: m[1], LeaseID: holder.ID}); err != nil {
		t.Fatal(err)
	}
	var got []answer
	for range singles + 1 {
		a := <-order
		if a.err != nil {
			t.Fatalf("%s: %v", a.what, a.err)
		}
		got = append(got, a)
	}
	slices.SortFunc(got, func(a, b answer) int { return int(a.token - b.token) })
	if got[0].what != "set" {
		t.Fatalf("%s was served first (grants in token order: %+v); the set queued first", got[0].what, got)
	}
}

// SetAcquirer takes a set of members for a test: Redlock.AcquireSet, or a
// variant that a test compares with it.
type SetAcquirer func(ctx context.Context, rl *lockcore.Redlock, req lockcore.SetAcquireRequest) (*lockcore.SetLease, error)

// OverlappingSets queues two sets over the names x < y in opposite orders
// behind a plain lease on y: S2 asks for {y, x} and waits first, then S1
// for {x, y}. Taken in the order asked, S1 holds x and waits for y while
// S2 is first in y's queue: y's release hands y to S2, which then waits
// for x, held by S1, which waits for y: a deadlock that lasts until S2's
// wait (wait) runs out. Taken in one order (AcquireSet), S2 holds x first
// and S1 waits for x: both are granted. It returns S2's and S1's answers
// and how long S2 took after y's release (each set released once
// answered).
func OverlappingSets(t *testing.T, rl *lockcore.Redlock, x, y string, wait time.Duration, acquire SetAcquirer) (err2, err1 error, s2After time.Duration) {
	t.Helper()
	ctx := context.Background()
	plain, err := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: y, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		err error
		at  time.Time
	}
	run := func(members []string, out chan<- answer) {
		set, err := acquire(ctx, rl, lockcore.SetAcquireRequest{Resources: members, TTL: time.Minute, Wait: wait})
		at := time.Now()
		if err == nil {
			err = rl.ReleaseSet(ctx, lockcore.SetReleaseRequest{Resources: members, LeaseID: set.ID})
		}
		out <- answer{err, at}
	}
	waiting := func(n int) {
		for deadline := time.Now().Add(5 * time.Second); rl.Waiting() < n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d waiters, want %d", rl.Waiting(), n)
			}
		}
	}
	s2, s1 := make(chan answer, 1), make(chan answer, 1)
	go run([]string{y, x}, s2)
	waiting(1)
	go run([]string{x, y}, s1)
	waiting(2)
	released := time.Now()
	if err := rl.Release(ctx, lockcore.ReleaseRequest{Resource: y, LeaseID: plain.ID}); err != nil {
		t.Fatal(err)
	}
	a2 := <-s2
	a1 := <-s1
	return a2.err, a1.err, a2.at.Sub(released)
}

func (s *setSuite) overlap(t *testing.T) {
	rl := s.redlock(t, s.newNodes(t))
	m := s.names(t, 2)
	const wait = 3 * time.Second
	err2, err1, after := OverlappingSets(t, rl, m[0], m[1], wait,
		func(ctx context.Context, rl *lockcore.Redlock, req lockcore.SetAcquireRequest) (*lockcore.SetLease, error) {
			return rl.AcquireSet(ctx, req)
		})
	if err2 != nil || err1 != nil || after > wait/2 {
		t.Fatalf("overlapping sets: S2 %v after %v, S1 %v; want both granted, S2 at once", err2, after, err1)
	}
}

func (s *setSuite) extendLost(t *testing.T) {
	rl := s.redlock(t, s.newNodes(t))
	ctx := context.Background()
	m := s.names(t, 3)
	set, err := rl.AcquireSet(ctx, lockcore.SetAcquireRequest{Resources: m, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rl.ForceRelease(ctx, m[1]); err != nil {
		t.Fatal(err)
	}
	_, err = rl.ExtendSet(ctx, lockcore.SetExtendRequest{Resources: m, LeaseID: set.ID})
	if serr, ok := errors.AsType[*lockcore.SetError](err); !ok || serr.Resource != m[1] || !errors.Is(err, lockcore.ErrNotHeld) {
		t.Fatalf("ExtendSet with %s broken: %v; want a *SetError naming it, ErrNotHeld", m[1], err)
	}
	for _, r := range m {
		if got := heldBy(t, rl, r); got != 0 {
			t.Fatalf("%s still held (token %d) after the extend found the set lost", r, got)
		}
	}
}

func (s *setSuite) crash(t *testing.T) {
	nodes := s.newNodes(t)
	faulty := make([]lockcore.Node, len(nodes))
	for i, n := range nodes {
		faulty[i] = NewFaulty(n)
	}
	gw := s.redlock(t, faulty) // the gateway that stops
	other := s.redlock(t, nodes)
	ctx := context.Background()
	m := s.names(t, 2)
	plain, err := other.Acquire(ctx, lockcore.AcquireRequest{Resource: m[1], TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 600 * time.Millisecond
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := gw.AcquireSet(sctx, lockcore.SetAcquireRequest{Resources: m, TTL: ttl, Wait: 10 * time.Second})
		done <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); heldBy(t, other, m[0]) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the set never took %s", m[0])
		}
	}
	// The gateway stops: none of its calls reaches a node any more, and its
	// caller is gone.
	crashed := time.Now()
	for _, f := range faulty {
		f.(*Faulty).SetDown(errors.New("nodetest: the gateway stopped"))
	}
	cancel()
	<-done
	if heldBy(t, other, m[0]) == 0 {
		t.Fatalf("%s freed at once: the stopped gateway reached the nodes", m[0])
	}
	for {
		l, err := other.Acquire(ctx, lockcore.AcquireRequest{Resource: m[0], TTL: time.Minute})
		if err == nil {
			if took := time.Since(crashed); took > ttl+300*time.Millisecond {
				t.Fatalf("%s free only %v after the gateway stopped; its TTL is %v", m[0], took, ttl)
			}
			_ = other.Release(ctx, lockcore.ReleaseRequest{Resource: m[0], LeaseID: l.ID})
			break
		}
		if !errors.Is(err, lockcore.ErrTaken) {
			t.Fatal(err)
		}
		if time.Since(crashed) > 5*time.Second {
			t.Fatalf("%s still held 5 s after the gateway stopped (TTL %v)", m[0], ttl)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := heldBy(t, other, m[1]); got != plain.Token {
		t.Fatalf("%s: token %d, want the plain lease's %d", m[1], got, plain.Token)
	}
}
