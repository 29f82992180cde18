package watch_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
	"github.com/lockgate/lockgate/lockcore/watch"
)

// replicas returns two Redlocks (gateway replicas) over the same three
// in-memory nodes.
func replicas(t *testing.T) (a, b *lockcore.Redlock) {
	t.Helper()
	nodes := memNodes()
	return redlock(t, nodes), redlock(t, nodes)
}

func memNodes() []lockcore.Node {
	return []lockcore.Node{memnode.New(nil), memnode.New(nil), memnode.New(nil)}
}

// redlock returns a Redlock over nodes, closed when t ends.
func redlock(t *testing.T, nodes []lockcore.Node) *lockcore.Redlock {
	t.Helper()
	rl, err := lockcore.New(nodes, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rl.Close)
	return rl
}

// releasesOnly returns nodes as nodes that announce releases but not
// grants (no lockcore.AcquireWatcher).
func releasesOnly(nodes []lockcore.Node) []lockcore.Node {
	out := make([]lockcore.Node, len(nodes))
	for i, n := range nodes {
		out[i] = struct {
			lockcore.Node
			lockcore.Watcher
		}{n, n.(lockcore.Watcher)}
	}
	return out
}

func hub(t *testing.T, src watch.Source, opts *watch.Options) *watch.Hub {
	t.Helper()
	h := watch.New(src, opts)
	t.Cleanup(h.Close)
	return h
}

// next returns the subscription's next event, failing t after a long
// bound (a hang, not a timing goal).
func next(t *testing.T, s *watch.Subscription) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-s.C:
		if !ok {
			t.Fatalf("subscription ended: %v", s.Err())
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	return watch.Event{}
}

func want(t *testing.T, ev watch.Event, kind watch.Kind, token int64) {
	t.Helper()
	if ev.Kind != kind || ev.Token != token {
		t.Fatalf("event %s %d, want %s %d", ev.Kind, ev.Token, kind, token)
	}
}

const forever = time.Hour // a Poll that never comes during a test

func TestAReleaseOnAnotherReplicaIsSeenFromItsAnnouncement(t *testing.T) {
	ctx := context.Background()
	a, b := replicas(t)
	l, err := a.Acquire(ctx, lockcore.AcquireRequest{Resource: "r", TTL: time.Hour, Owner: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := hub(t, b, &watch.Options{Poll: forever}).Subscribe("r")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ev := next(t, s)
	want(t, ev, watch.State, l.Token)
	if !ev.Held || ev.Owner != "w1" {
		t.Fatalf("state %+v, want held by w1", ev)
	}
	if err := a.Release(ctx, lockcore.ReleaseRequest{Resource: "r", LeaseID: l.ID}); err != nil {
		t.Fatal(err)
	}
	want(t, next(t, s), watch.Released, l.Token)
}

func TestAnExpiryIsSeenWhenTheTTLRunsOut(t *testing.T) {
	ctx := context.Background()
	a, _ := replicas(t)
	h := hub(t, a, &watch.Options{Poll: forever})
	s, err := h.Subscribe("r")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want(t, next(t, s), watch.State, 0)
	l, err := a.Acquire(ctx, lockcore.AcquireRequest{Resource: "r", TTL: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	h.Changed("r", watch.Acquired) // as the handlers do after an acquisition here
	want(t, next(t, s), watch.Acquired, l.Token)
	want(t, next(t, s), watch.Expired, l.Token)
}

// An acquisition on replica A is announced by the nodes: B's hub, which
// never polls, sees it.
func TestAnAcquisitionOnAnotherReplicaIsSeenFromItsAnnouncement(t *testing.T) {
	a, b := replicas(t)
	seesAcquisitions(t, a, hub(t, b, &watch.Options{Poll: forever}))
}

// Over nodes that do not announce grants, B's hub reads every Poll and
// sees the acquisition then.
func TestWithoutGrantAnnouncementsAnAcquisitionIsSeenAtTheNextPoll(t *testing.T) {
	nodes := memNodes()
	a := redlock(t, nodes)
	b := redlock(t, releasesOnly(nodes))
	seesAcquisitions(t, a, hub(t, b, &watch.Options{Poll: 20 * time.Millisecond}))
}

// seesAcquisitions acquires and releases r three times through a, checking
// that a subscription on h sees each holder come and go, tokens growing.
func seesAcquisitions(t *testing.T, a *lockcore.Redlock, h *watch.Hub) {
	t.Helper()
	ctx := context.Background()
	s, err := h.Subscribe("r")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want(t, next(t, s), watch.State, 0)
	var tokens []int64
	for range 3 {
		l, err := a.Acquire(ctx, lockcore.AcquireRequest{Resource: "r", TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, l.Token)
		want(t, next(t, s), watch.Acquired, l.Token)
		if err := a.Release(ctx, lockcore.ReleaseRequest{Resource: "r", LeaseID: l.ID}); err != nil {
			t.Fatal(err)
		}
		want(t, next(t, s), watch.Released, l.Token)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("tokens %v do not grow", tokens)
		}
	}
}

// A hand-off on replica A (the lock passed from its holder to a waiter of
// A, never free) is announced as a grant: B's hub, which never polls, sees
// the holder change.
func TestAHandOffOnAnotherReplicaIsSeen(t *testing.T) {
	a, b := replicas(t)
	s, err := hub(t, b, &watch.Options{Poll: forever}).Subscribe("r")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want(t, next(t, s), watch.State, 0)
	handsOff(t, a, "r", s)
}

// handsOff acquires r through a, parks a waiter behind it on a, releases
// the holder (a hand-off to the waiter) and checks that s, a subscription
// of r, sees both holders.
func handsOff(t *testing.T, a *lockcore.Redlock, r string, s *watch.Subscription) {
	t.Helper()
	ctx := context.Background()
	l1, err := a.Acquire(ctx, lockcore.AcquireRequest{Resource: r, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	want(t, next(t, s), watch.Acquired, l1.Token)
	got := make(chan *lockcore.Lease, 1)
	go func() {
		l, err := a.Acquire(ctx, lockcore.AcquireRequest{Resource: r, TTL: time.Hour, Wait: time.Minute})
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, func() bool { return a.Waiting() == 1 })
	if err := a.Release(ctx, lockcore.ReleaseRequest{Resource: r, LeaseID: l1.ID}); err != nil {
		t.Fatal(err)
	}
	l2 := <-got
	if l2 == nil {
		t.FailNow()
	}
	want(t, next(t, s), watch.Released, l1.Token)
	want(t, next(t, s), watch.Acquired, l2.Token)
}

// countingSource counts the lock reads a Hub makes.
type countingSource struct {
	*lockcore.Redlock
	reads atomic.Int64
}

func (c *countingSource) Inspect(ctx context.Context, resource string) (*lockcore.LockInfo, error) {
	c.reads.Add(1)
	return c.Redlock.Inspect(ctx, resource)
}

// 1000 idle watchers, of held and free locks, make no read while nothing
// changes. The window is one in which a control hub, over the same nodes
// seen as not announcing grants and with the same Poll, polls 20 times;
// then a change is still seen.
func TestIdleWatchersReadNothing(t *testing.T) {
	const n = 1000
	ctx := context.Background()
	nodes := memNodes()
	announced := &countingSource{Redlock: redlock(t, nodes)}
	polled := &countingSource{Redlock: redlock(t, releasesOnly(nodes))}
	const poll = 10 * time.Millisecond
	h := hub(t, announced, &watch.Options{Poll: poll, MaxWatchers: n})
	control := hub(t, polled, &watch.Options{Poll: poll})
	subs := make([]*watch.Subscription, n)
	for i := range subs {
		r := "r" + strconv.Itoa(i)
		if i%2 == 0 {
			if _, err := announced.Acquire(ctx, lockcore.AcquireRequest{Resource: r, TTL: time.Hour}); err != nil {
				t.Fatal(err)
			}
		}
		s, err := h.Subscribe(r)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		subs[i] = s
	}
	for _, s := range subs {
		next(t, s) // its State: its tracker has read once
	}
	cs, err := control.Subscribe("r0")
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	next(t, cs)

	before, controlBefore := announced.reads.Load(), polled.reads.Load()
	waitFor(t, func() bool { return polled.reads.Load() >= controlBefore+20 })
	if got := announced.reads.Load() - before; got != 0 {
		t.Fatalf("%d idle watchers made %d reads while the control polled %d times; want 0",
			n, got, polled.reads.Load()-controlBefore)
	}

	l, err := announced.Acquire(ctx, lockcore.AcquireRequest{Resource: "r1", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	want(t, next(t, subs[1]), watch.Acquired, l.Token)
}

func TestForceReleaseHereIsNamed(t *testing.T) {
	ctx := context.Background()
	a, _ := replicas(t)
	l, err := a.Acquire(ctx, lockcore.AcquireRequest{Resource: "r", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	h := hub(t, a, &watch.Options{Poll: forever})
	s, err := h.Subscribe("r")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want(t, next(t, s), watch.State, l.Token)
	done := h.ForceReleasing("r") // as the handlers do around a force release
	_, err = a.ForceRelease(ctx, "r")
	done(err == nil)
	if err != nil {
		t.Fatal(err)
	}
	want(t, next(t, s), watch.ForceReleased, l.Token)
}

func TestASlowReaderIsDropped(t *testing.T) {
	ctx := context.Background()
	a, _ := replicas(t)
	h := hub(t, a, &watch.Options{Poll: forever, Buffer: 4})
	slow, err := h.Subscribe("r")
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fast, err := h.Subscribe("r")
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	want(t, next(t, fast), watch.State, 0)
	// slow reads nothing: its State and the events after it fill its four
	// places; the fifth event drops it, and fast goes on.
	for i := 0; ; i++ {
		l, err := a.Acquire(ctx, lockcore.AcquireRequest{Resource: "r", TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		h.Changed("r", watch.Acquired)
		want(t, next(t, fast), watch.Acquired, l.Token)
		if err := a.Release(ctx, lockcore.ReleaseRequest{Resource: "r", LeaseID: l.ID}); err != nil {
			t.Fatal(err)
		}
		want(t, next(t, fast), watch.Released, l.Token)
		if h.Dropped() == 1 {
			break
		}
		if i > 10 {
			t.Fatalf("the slow reader was not dropped after %d events", h.EventsSent())
		}
	}
	n := 0
	for range slow.C { // what it had buffered, then the end
		n++
	}
	if n != 4 || !errors.Is(slow.Err(), watch.ErrSlowReader) {
		t.Fatalf("slow reader got %d events and %v, want 4 and ErrSlowReader", n, slow.Err())
	}
	if got := h.Watchers(); got != 1 {
		t.Fatalf("Watchers() = %d after the drop, want 1", got)
	}
}

func TestWatchersAreBounded(t *testing.T) {
	a, _ := replicas(t)
	h := hub(t, a, &watch.Options{MaxWatchers: 2})
	s1, err := h.Subscribe("r")
	if err != nil {
		t.Fatal(err)
	}
	s2, err := h.Subscribe("q")
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if _, err := h.Subscribe("r"); !errors.Is(err, watch.ErrTooManyWatchers) {
		t.Fatalf("third Subscribe: %v, want ErrTooManyWatchers", err)
	}
	s1.Close()
	s3, err := h.Subscribe("r")
	if err != nil {
		t.Fatalf("Subscribe after a Close: %v", err)
	}
	s3.Close()
}

func TestWaitAnswersWhenTheTokenDiffers(t *testing.T) {
	ctx := context.Background()
	a, b := replicas(t)
	l, err := a.Acquire(ctx, lockcore.AcquireRequest{Resource: "r", TTL: time.Hour, Owner: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	h := hub(t, b, &watch.Options{Poll: forever})
	// A token other than the holder's: at once.
	ev, err := h.Wait(ctx, "r", 0)
	if err != nil || !ev.Held || ev.Token != l.Token {
		t.Fatalf("Wait(after 0) = %+v, %v; want held with %d", ev, err, l.Token)
	}
	// The holder's token: until it changes.
	done := make(chan watch.Event, 1)
	go func() {
		ev, _ := h.Wait(ctx, "r", l.Token)
		done <- ev
	}()
	waitFor(t, func() bool { return h.Watchers() == 1 })
	if err := a.Release(ctx, lockcore.ReleaseRequest{Resource: "r", LeaseID: l.ID}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-done:
		if ev.Held || ev.Token != 0 {
			t.Fatalf("Wait after the release = %+v, want free (token 0)", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not answer after the release")
	}
	// No change before the wait ends: the state then.
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if ev, err := h.Wait(wctx, "r", 0); err != nil || ev.Held {
		t.Fatalf("Wait(free, after 0) = %+v, %v; want free when the wait ends", ev, err)
	}
	if h.Watchers() != 0 {
		t.Fatalf("Watchers() = %d after the waits, want 0", h.Watchers())
	}
}

// waitFor waits until cond holds, failing t after a long bound.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 10s")
		}
	}
}

// BenchmarkIdleWatchers reports the heap that 1000 idle subscriptions on
// 1000 resources hold (bytes per watcher) over three in-memory nodes (their
// trackers read nothing while nothing changes: TestIdleWatchersReadNothing).
// Run on purpose, as BENCHMARKS.md says; not a test.
func BenchmarkIdleWatchers(b *testing.B) {
	const n = 1000
	nodes := []lockcore.Node{memnode.New(nil), memnode.New(nil), memnode.New(nil)}
	rl, err := lockcore.New(nodes, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer rl.Close()
	for b.Loop() {
		h := watch.New(rl, &watch.Options{MaxWatchers: n})
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		subs := make([]*watch.Subscription, n)
		for i := range subs {
			s, err := h.Subscribe("r" + strconv.Itoa(i))
			if err != nil {
				b.Fatal(err)
			}
			subs[i] = s
		}
		for _, s := range subs {
			<-s.C // its State: the tracker has read once
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/n, "heap-bytes/watcher")
		// What the idle watchers cost in CPU: the process's, over 2 s in
		// which nothing changes (nothing else runs in it meanwhile).
		cpu0 := processCPU(b)
		time.Sleep(2 * time.Second)
		b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/1000, "cpu-ms-per-2s-idle")
		for _, s := range subs {
			s.Close()
		}
		h.Close()
	}
}

// processCPU is the CPU time (user and system) the test process used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
