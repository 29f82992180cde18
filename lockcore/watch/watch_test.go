package watch_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
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
	nodes := []lockcore.Node{memnode.New(nil), memnode.New(nil), memnode.New(nil)}
	a, err := lockcore.New(nodes, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err = lockcore.New(nodes, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
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

func TestAnAcquisitionOnAnotherReplicaIsSeenAtTheNextPoll(t *testing.T) {
	ctx := context.Background()
	a, b := replicas(t)
	s, err := hub(t, b, &watch.Options{Poll: 20 * time.Millisecond}).Subscribe("r")
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
// 1000 resources hold (bytes per watcher) over three in-memory nodes, and
// the reads their trackers make per second while nothing changes (one per
// resource per Poll). Run on purpose, as BENCHMARKS.md says; not a test.
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
		for _, s := range subs {
			s.Close()
		}
		h.Close()
	}
}
