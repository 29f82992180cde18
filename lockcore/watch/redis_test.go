package watch_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/nodetest"
	"github.com/lockgate/lockgate/lockcore/redisnode"
	"github.com/lockgate/lockgate/lockcore/watch"
)

// redisReplicas returns two Redlocks (gateway replicas, each with its own
// connections) over the same three real redis-servers, initialized as a
// new cluster's first gateway initializes them.
func redisReplicas(t testing.TB) (a, b *lockcore.Redlock) {
	t.Helper()
	servers := redistest.StartN(t, 3, nil)
	replica := func(init bool) *lockcore.Redlock {
		nodes := make([]lockcore.Node, len(servers))
		for i, s := range servers {
			n, err := redisnode.New(s.URL())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { n.Close() })
			if init {
				if err := nodetest.Initialize(context.Background(), n); err != nil {
					t.Fatal(err)
				}
			}
			nodes[i] = n
		}
		rl, err := lockcore.New(nodes, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rl.Close)
		return rl
	}
	return replica(true), replica(false)
}

// A long poll on replica B answers after a release on replica A from the
// nodes' announcement alone: B's hub never polls.
func TestALongPollOnOneReplicaAnswersAReleaseOnAnotherOverRedis(t *testing.T) {
	ctx := context.Background()
	a, b := redisReplicas(t)
	h := hub(t, b, &watch.Options{Poll: forever})
	for range 3 {
		l, err := a.Acquire(ctx, lockcore.AcquireRequest{Resource: "job", TTL: time.Hour, Owner: "w"})
		if err != nil {
			t.Fatal(err)
		}
		ev, err := h.Wait(ctx, "job", 0)
		if err != nil || ev.Token != l.Token {
			t.Fatalf("Wait(after 0) = %+v, %v; want the holder %d", ev, err, l.Token)
		}
		done := make(chan watch.Event, 1)
		go func() {
			ev, _ := h.Wait(ctx, "job", l.Token)
			done <- ev
		}()
		waitFor(t, func() bool { return h.Watchers() == 1 })
		if err := a.Release(ctx, lockcore.ReleaseRequest{Resource: "job", LeaseID: l.ID}); err != nil {
			t.Fatal(err)
		}
		select {
		case ev := <-done:
			if ev.Held {
				t.Fatalf("Wait after the release = %+v, want free", ev)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the long poll on B did not answer the release on A")
		}
		waitFor(t, func() bool { return h.Watchers() == 0 })
	}
}

// A long poll on replica B for the next holder of a free lock answers an
// acquisition on replica A from the nodes' grant announcement alone: B's
// hub never polls.
func TestALongPollOnOneReplicaAnswersAnAcquisitionOnAnotherOverRedis(t *testing.T) {
	ctx := context.Background()
	a, b := redisReplicas(t)
	h := hub(t, b, &watch.Options{Poll: forever})
	for range 3 {
		done := make(chan watch.Event, 1)
		go func() {
			ev, _ := h.Wait(ctx, "job", 0)
			done <- ev
		}()
		waitFor(t, func() bool { return h.Watchers() == 1 })
		l, err := a.Acquire(ctx, lockcore.AcquireRequest{Resource: "job", TTL: time.Hour, Owner: "w"})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case ev := <-done:
			if !ev.Held || ev.Token != l.Token {
				t.Fatalf("Wait(after 0) = %+v; want the holder %d", ev, l.Token)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the long poll on B did not answer the acquisition on A")
		}
		waitFor(t, func() bool { return h.Watchers() == 0 })
		if err := a.Release(ctx, lockcore.ReleaseRequest{Resource: "job", LeaseID: l.ID}); err != nil {
			t.Fatal(err)
		}
	}
}

// A stream on replica B, whose hub never polls, sees in token order what
// replica A does: an acquisition and a release (from the nodes'
// announcements), an expiry (when the TTL B read runs out), and a hand-off
// between two clients of A (announced as a grant).
func TestAStreamOnOneReplicaSeesAnotherReplicasLocksOverRedis(t *testing.T) {
	ctx := context.Background()
	a, b := redisReplicas(t)
	s, err := hub(t, b, &watch.Options{Poll: forever}).Subscribe("job")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want(t, next(t, s), watch.State, 0)
	l1, err := a.Acquire(ctx, lockcore.AcquireRequest{Resource: "job", TTL: time.Hour, Owner: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	want(t, next(t, s), watch.Acquired, l1.Token)
	if err := a.Release(ctx, lockcore.ReleaseRequest{Resource: "job", LeaseID: l1.ID}); err != nil {
		t.Fatal(err)
	}
	want(t, next(t, s), watch.Released, l1.Token)
	l2, err := a.Acquire(ctx, lockcore.AcquireRequest{Resource: "job", TTL: 300 * time.Millisecond, Owner: "w2"})
	if err != nil {
		t.Fatal(err)
	}
	want(t, next(t, s), watch.Acquired, l2.Token)
	want(t, next(t, s), watch.Expired, l2.Token)
	if l2.Token <= l1.Token {
		t.Fatalf("tokens %d then %d", l1.Token, l2.Token)
	}
	handsOff(t, a, "job", s)
}

// BenchmarkLongPollAnswersAReleaseOnAnotherReplica measures the time from
// a release on replica A to the answer of a long poll on replica B over
// three real redis-servers (ns/op; see BENCHMARKS.md for how to run it on
// a quiet machine).
func BenchmarkLongPollAnswersAReleaseOnAnotherReplica(b *testing.B) {
	ctx := context.Background()
	ra, rb := redisReplicas(b)
	h := watch.New(rb, &watch.Options{Poll: forever})
	defer h.Close()
	var samples []time.Duration
	for b.Loop() {
		l, err := ra.Acquire(ctx, lockcore.AcquireRequest{Resource: "job", TTL: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		done := make(chan time.Time, 1)
		go func() {
			_, _ = h.Wait(ctx, "job", l.Token)
			done <- time.Now()
		}()
		for h.Watchers() == 0 {
			time.Sleep(100 * time.Microsecond)
		}
		start := time.Now()
		if err := ra.Release(ctx, lockcore.ReleaseRequest{Resource: "job", LeaseID: l.ID}); err != nil {
			b.Fatal(err)
		}
		samples = append(samples, (<-done).Sub(start))
		for h.Watchers() != 0 {
			time.Sleep(100 * time.Microsecond)
		}
	}
	slices.Sort(samples)
	var total time.Duration
	for _, d := range samples {
		total += d
	}
	at := func(p float64) float64 { return float64(samples[int(p*float64(len(samples)-1))].Microseconds()) }
	b.ReportMetric(float64(total.Microseconds())/float64(len(samples)), "µs-release-to-answer/op")
	b.ReportMetric(at(0.50), "µs-p50")
	b.ReportMetric(at(0.99), "µs-p99")
	b.ReportMetric(at(1), "µs-max")
}
