package watch_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/watch"
)

func nextOf(t *testing.T, p *watch.PrefixSubscription) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-p.C:
		if !ok {
			t.Fatalf("prefix subscription ended: %v", p.Err())
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	return watch.Event{}
}

func wantOf(t *testing.T, ev watch.Event, kind watch.Kind, resource string, token int64) {
	t.Helper()
	if ev.Kind != kind || ev.Resource != resource || ev.Token != token {
		t.Fatalf("event %s %s %d, want %s %s %d", ev.Kind, ev.Resource, ev.Token, kind, resource, token)
	}
}

func TestAPrefixSubscriptionFollowsEveryLockUnderThePrefix(t *testing.T) {
	ctx := context.Background()
	a, b := replicas(t)
	acquire := func(resource string) *lockcore.Lease {
		t.Helper()
		l, err := a.Acquire(ctx, lockcore.AcquireRequest{Resource: resource, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	release := func(l *lockcore.Lease) {
		t.Helper()
		if err := a.Release(ctx, lockcore.ReleaseRequest{Resource: l.Resource, LeaseID: l.ID}); err != nil {
			t.Fatal(err)
		}
	}
	j1 := acquire("jobs:1")
	h := hub(t, b, &watch.Options{Poll: 20 * time.Millisecond})
	p, err := h.SubscribePrefix("jobs:")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	wantOf(t, nextOf(t, p), watch.State, "jobs:1", j1.Token) // held when it began
	other := acquire("other")                                // not under the prefix: never seen
	j2 := acquire("jobs:2")
	wantOf(t, nextOf(t, p), watch.Acquired, "jobs:2", j2.Token) // found by a listing
	release(j1)
	wantOf(t, nextOf(t, p), watch.Released, "jobs:1", j1.Token)
	release(other)
	release(j2)
	wantOf(t, nextOf(t, p), watch.Released, "jobs:2", j2.Token)
	// jobs:1 was let go once free; taken again, it is found again, once.
	waitFor(t, func() bool { return h.Watchers() == 1 })
	j3 := acquire("jobs:1")
	wantOf(t, nextOf(t, p), watch.Acquired, "jobs:1", j3.Token)
	select {
	case ev := <-p.C:
		t.Fatalf("unexpected event %+v", ev)
	case <-time.After(100 * time.Millisecond): // several listings: nothing more comes
	}
}

func TestAPrefixSubscriptionCountsItsLocksAsWatchers(t *testing.T) {
	ctx := context.Background()
	a, _ := replicas(t)
	for _, r := range []string{"jobs:1", "jobs:2"} {
		if _, err := a.Acquire(ctx, lockcore.AcquireRequest{Resource: r, TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	h := hub(t, a, &watch.Options{MaxWatchers: 2, Poll: forever})
	p, err := h.SubscribePrefix("jobs:")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for range p.C { // drain until it ends
	}
	if !errors.Is(p.Err(), watch.ErrTooManyWatchers) {
		t.Fatalf("Err() = %v, want ErrTooManyWatchers (itself and two locks over a bound of 2)", p.Err())
	}
	p.Close()
	if h.Watchers() != 0 {
		t.Fatalf("Watchers() = %d after Close, want 0", h.Watchers())
	}
}
