package quorum

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// ans is a test node's answer.
type ans struct {
	node int
	err  error
}

func (a ans) Failed() bool { return a.err != nil }

var errUnheard = errors.New("unheard")

// fakes are n test nodes. A node answers at once unless it is gated:
// then it waits for its gate to open, or for its call's context to end
// (and answers the context's error).
type fakes struct {
	mu    sync.Mutex
	gates map[int]chan struct{}
	fail  map[int]error
	ctxs  []context.Context // the last call's context, by node
	left  int               // calls whose context had ended when they began
	// slow is how long every node takes to answer, unless its context
	// ends first (then it answers the context's error).
	slow time.Duration
}

func newFakes(n int) *fakes {
	return &fakes{gates: map[int]chan struct{}{}, fail: map[int]error{}, ctxs: make([]context.Context, n)}
}

// gate holds node i's next calls until open is called.
func (f *fakes) gate(t *testing.T, i int) (open func()) {
	g := make(chan struct{})
	f.mu.Lock()
	f.gates[i] = g
	f.mu.Unlock()
	var once sync.Once
	open = func() {
		once.Do(func() {
			f.mu.Lock()
			delete(f.gates, i)
			f.mu.Unlock()
			close(g)
		})
	}
	t.Cleanup(open)
	return open
}

// pass lets node i's later calls through; a call held already stays so
// until its gate opens.
func (f *fakes) pass(i int) {
	f.mu.Lock()
	delete(f.gates, i)
	f.mu.Unlock()
}

func (f *fakes) call(ctx context.Context, i int) ans {
	f.mu.Lock()
	g, err, slow := f.gates[i], f.fail[i], f.slow
	f.ctxs[i] = ctx
	if ctx.Err() != nil {
		f.left++
	}
	f.mu.Unlock()
	if slow > 0 {
		t := time.NewTimer(slow)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ans{node: i, err: ctx.Err()}
		}
	}
	if g != nil {
		select {
		case <-g:
		case <-ctx.Done():
			return ans{node: i, err: ctx.Err()}
		}
	}
	return ans{node: i, err: err}
}

func (f *fakes) ctx(i int) context.Context {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ctxs[i]
}

// group is a Group over 3 test nodes with a quorum of 2, whose late
// answers run on goroutines the test awaits with idle.
type group struct {
	*Group
	unheard []ans
	bg      sync.WaitGroup
	// decidedWithout is, by call of calls, a node the call returned
	// without (-1: none).
	decidedWithout []int
}

func newGroup(t *testing.T, graceMin time.Duration) *group {
	g := &group{unheard: []ans{{0, errUnheard}, {1, errUnheard}, {2, errUnheard}}}
	g.Group = New(Config{Nodes: 3, Quorum: 2, Timeout: time.Hour, GraceMin: graceMin, Spawn: func(f func()) { g.bg.Go(f) }})
	t.Cleanup(g.Close)
	return g
}

// idle waits until every late answer was acted on.
func (g *group) idle(t *testing.T) { within(t, "the late answers", g.bg.Wait) }

// twoOK holds once two nodes answered without a failure.
func twoOK(v View[ans]) bool {
	n := 0
	for i, a := range v.Answers {
		if v.Heard[i] && !a.Failed() {
			n++
		}
	}
	return n >= 2
}

// within runs fn and fails the test if it has not returned after 10 s.
func within(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not done after 10 s", what)
	}
}

// eventually polls cond for up to 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s: not after 5 s", what)
		}
	}
}

func (g *group) missed() []int { return []int{g.Missed(0), g.Missed(1), g.Missed(2)} }

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// run runs a call and fails the test if it does not return.
func (g *group) run(t *testing.T, ctx context.Context, f *fakes, holds func(View[ans]) bool) *Call[ans] {
	t.Helper()
	var c *Call[ans]
	within(t, "the call", func() { c = Run(ctx, g.Group, g.unheard, f.call, holds) })
	return c
}

// Rules 1, 4 and 9: a call returns once its policy holds, without the
// node still to answer (whose grace of 1 ms expires: it missed it), whose
// answer Rest then passes to late, and after that calls after.
func TestACallReturnsOnceDecided(t *testing.T) {
	g, f := newGroup(t, time.Millisecond), newFakes(3)
	open := f.gate(t, 2)
	c := g.run(t, context.Background(), f, twoOK)
	v := c.View()
	if !v.Heard[0] || !v.Heard[1] || v.Heard[2] || v.Answers[2].err != errUnheard || c.Complete() {
		t.Fatalf("heard %v, answers %v; want nodes 0 and 1, node 2 unheard", v.Heard, v.Answers)
	}
	if got := g.missed(); !equal(got, []int{0, 0, 1}) {
		t.Fatalf("graces missed by node: %v, want node 2's expired", got)
	}
	var late []ans
	var afterLate int
	c.Rest(func(a ans) { late = append(late, a) }, func() { afterLate = len(late) })
	open()
	g.idle(t)
	if len(late) != 1 || late[0].node != 2 || late[0].err != nil || afterLate != 1 {
		t.Fatalf("late answers %v, %d before after; want node 2's, then after", late, afterLate)
	}
}

// Rules 1 and 5: without a policy, a call hears every node and judges
// nothing (node 2, behind, stays so although it answers); a complete call
// passes nothing to late and never calls after.
func TestACallWithoutAPolicyHearsEveryNode(t *testing.T) {
	g, f := newGroup(t, time.Microsecond), newFakes(3)
	g.pace.judge(2, g.pace.calls.Add(1), false)
	g.pace.judge(2, g.pace.calls.Add(1), false)
	open := f.gate(t, 2)
	f.fail[1] = errors.New("down")
	go func() {
		eventually(t, "nodes 0 and 1 called", func() bool { return f.ctx(0) != nil && f.ctx(1) != nil })
		time.Sleep(5 * time.Millisecond) // past any grace: node 2 would be late
		open()
	}()
	c := g.run(t, context.Background(), f, nil)
	if !c.Complete() {
		t.Fatalf("heard %v; want every node", c.View().Heard)
	}
	c.Rest(func(ans) { t.Error("late answer of a complete call") }, func() { t.Error("after of a complete call") })
	if got := g.missed(); !equal(got, []int{0, 0, 2}) || g.Graces() != 0 {
		t.Fatalf("graces missed %v, %d graces; want none judged", got, g.Graces())
	}
	if got := All(context.Background(), g.Group, g.unheard, f.call); got[1].err == nil || got[2].err != nil {
		t.Fatalf("All: %v; want every node's answer", got)
	}
}

// Rules 3 and 5: a decided call waits for a node still to answer until
// its grace ends (here an hour), and judges it in time.
func TestTheGraceWaitsForANodeStillToAnswer(t *testing.T) {
	g, f := newGroup(t, time.Hour), newFakes(3)
	open := f.gate(t, 2)
	go func() {
		eventually(t, "the grace begins", func() bool { return g.Graces() == 1 })
		open()
	}()
	c := g.run(t, context.Background(), f, twoOK)
	if !c.Complete() {
		t.Fatalf("heard %v; want node 2 heard within its grace", c.View().Heard)
	}
	c.Rest(nil, nil)
	if got := g.missed(); !equal(got, []int{0, 0, 0}) {
		t.Fatalf("graces missed by node: %v, want none", got)
	}
}

// Rules 3, 5 and 6: a node that missed two graces in a row is behind, and
// a call does not wait for it, however long the grace; its late answer,
// within the grace it would have had, brings it back.
func TestABehindNodeIsNotWaitedFor(t *testing.T) {
	g, f := newGroup(t, time.Millisecond), newFakes(3)
	for range 2 {
		open := f.gate(t, 2)
		c := g.run(t, context.Background(), f, twoOK)
		c.Rest(nil, nil)
		open()
		g.idle(t)
	}
	if !g.Behind(2) || g.Behind(0) || g.Graces() != 2 {
		t.Fatalf("behind %v %v %v after %d graces; want node 2 alone behind after 2", g.Behind(0), g.Behind(1), g.Behind(2), g.Graces())
	}
	g.cfg.GraceMin = time.Hour
	open := f.gate(t, 2)
	c := g.run(t, context.Background(), f, twoOK)
	if c.Complete() || g.Graces() != 2 {
		t.Fatalf("complete %v, %d graces; want node 2 not waited for", c.Complete(), g.Graces())
	}
	c.Rest(nil, nil)
	open()
	g.idle(t)
	if g.Behind(2) || g.Missed(2) != 0 {
		t.Fatalf("node 2 missed %d after answering within the grace it would have had; want 0", g.Missed(2))
	}
}

// Rule 6: a late answer to an older call does not undo what a newer call
// found. Node 2, behind, is held in call A (which does not wait for it),
// answers call B in time, then answers A after A's grace: that late
// answer is not judged.
func TestAnOlderCallDoesNotUndoANewerJudgement(t *testing.T) {
	g, f := newGroup(t, time.Millisecond), newFakes(3)
	g.pace.judge(2, g.pace.calls.Add(1), false)
	g.pace.judge(2, g.pace.calls.Add(1), false)
	openA := f.gate(t, 2)
	a := g.run(t, context.Background(), f, twoOK)
	if a.Complete() || a.ranOut {
		t.Fatalf("call A: complete %v, expired %v; want node 2 not waited for", a.Complete(), a.ranOut)
	}
	graceEnd := a.timing.end
	a.Rest(nil, nil)
	f.pass(2)
	b := g.run(t, context.Background(), f, func(v View[ans]) bool { return v.Heard[2] })
	b.Rest(nil, nil)
	if g.Missed(2) != 0 {
		t.Fatalf("node 2 missed %d after answering call B in time, want 0", g.Missed(2))
	}
	eventually(t, "call A's grace over", func() bool { return time.Now().After(graceEnd) })
	openA()
	g.idle(t)
	if g.Missed(2) != 0 {
		t.Fatalf("node 2 missed %d after its late answer to the older call A, want 0", g.Missed(2))
	}
}

// Rule 5: a node judged late when the grace expired, whose answer comes
// after the grace, is not judged again.
func TestAnExpiredNodeIsJudgedOnce(t *testing.T) {
	g, f := newGroup(t, time.Millisecond), newFakes(3)
	open := f.gate(t, 2)
	c := g.run(t, context.Background(), f, twoOK)
	c.Rest(nil, nil)
	open()
	g.idle(t)
	if got := g.Missed(2); got != 1 {
		t.Fatalf("node 2 missed %d graces in a row, want 1", got)
	}
}

// Rule 2: failures do not count towards the quorum that sets the grace.
func TestFailuresDoNotSetTheGrace(t *testing.T) {
	g, f := newGroup(t, time.Millisecond), newFakes(3)
	f.fail[0] = errors.New("refused")
	c := g.run(t, context.Background(), f, func(v View[ans]) bool { return false })
	c.Rest(nil, nil)
	if c.timing.answered != 2 {
		t.Fatalf("%d answers counted towards the grace's quorum, want 2 (node 0 failed)", c.timing.answered)
	}
}

// Rule 7: while the call is undecided, the caller's cancel cancels the
// node calls.
func TestACallerThatLeavesCancelsTheCalls(t *testing.T) {
	g, f := newGroup(t, time.Millisecond), newFakes(3)
	f.gate(t, 1)
	f.gate(t, 2)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		eventually(t, "nodes called", func() bool { return f.ctx(1) != nil && f.ctx(2) != nil })
		cancel()
	}()
	c := g.run(t, ctx, f, twoOK)
	c.Rest(nil, nil)
	if a := c.Answers(); !errors.Is(a[1].err, context.Canceled) || !errors.Is(a[2].err, context.Canceled) {
		t.Fatalf("answers %v; want nodes 1 and 2 canceled", a)
	}
}

// Rule 7: no call of a caller that has left starts with a live context
// (the link from the caller's context, which would cancel it a moment
// later, runs on a goroutine of its own).
func TestACallerThatHasLeftStartsNoLiveCall(t *testing.T) {
	g, f := newGroup(t, time.Millisecond), newFakes(3)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 3 {
		f.gate(t, i)
	}
	const calls = 20
	for range calls {
		c := g.run(t, ctx, f, nil)
		c.Rest(nil, nil)
		for i, a := range c.Answers() {
			if !errors.Is(a.err, context.Canceled) {
				t.Fatalf("node %d answered %v; want its call canceled", i, a.err)
			}
		}
	}
	if f.left != 3*calls {
		t.Fatalf("%d of %d node calls began with their context ended; want all", f.left, 3*calls)
	}
}

// Rule 7: once Rest is called, the caller's cancel no longer reaches the
// calls still running: their answers can be acted on.
func TestRestUntiesTheCallsFromTheCaller(t *testing.T) {
	g, f := newGroup(t, time.Millisecond), newFakes(3)
	open := f.gate(t, 2)
	ctx, cancel := context.WithCancel(context.Background())
	c := g.run(t, ctx, f, twoOK)
	var late ans
	c.Rest(func(a ans) { late = a }, nil)
	cancel()
	// The link from ctx runs on a goroutine of its own: had it canceled
	// the call, node 2 would see it before its gate opens.
	time.Sleep(10 * time.Millisecond)
	open()
	g.idle(t)
	if late.node != 2 || late.err != nil {
		t.Fatalf("late answer %+v; want node 2's, its call not canceled", late)
	}
}

// Rule 8: each node call is bounded by Timeout, or by the caller's
// deadline if sooner.
func TestCallsAreBoundedByTimeoutAndTheCallersDeadline(t *testing.T) {
	f := newFakes(3)
	g := New(Config{Nodes: 3, Quorum: 2, Timeout: time.Minute})
	defer g.Close()
	before := time.Now()
	All(context.Background(), g, []ans{{}, {}, {}}, f.call)
	if dl, ok := f.ctx(0).Deadline(); !ok || dl.Before(before.Add(time.Minute)) || dl.After(time.Now().Add(time.Minute)) {
		t.Fatalf("deadline %v (%v); want a minute from the call", dl, ok)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	want, _ := ctx.Deadline()
	All(ctx, g, []ans{{}, {}, {}}, f.call)
	if dl, _ := f.ctx(0).Deadline(); !dl.Equal(want) {
		t.Fatalf("deadline %v; want the caller's, %v", dl, want)
	}
}

// Answered is a complete call: nothing runs, nothing comes late.
func TestAnsweredIsComplete(t *testing.T) {
	c := Answered([]ans{{0, errUnheard}, {1, errUnheard}})
	if !c.Complete() || !c.View().Heard[1] {
		t.Fatalf("Answered: complete %v, heard %v", c.Complete(), c.View().Heard)
	}
	c.Rest(func(ans) { t.Error("late answer") }, func() { t.Error("after") })
}

// More nodes than a call holds inline work the same.
func TestManyNodes(t *testing.T) {
	f := newFakes(7)
	g := New(Config{Nodes: 7, Quorum: 4, Timeout: time.Minute})
	defer g.Close()
	unheard := make([]ans, 7)
	got := All(context.Background(), g, unheard, f.call)
	for i, a := range got {
		if a.node != i || a.err != nil {
			t.Fatalf("answer %d: %+v", i, a)
		}
	}
}
