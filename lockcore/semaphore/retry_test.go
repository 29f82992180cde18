package semaphore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
	"github.com/lockgate/lockgate/lockcore/semaphore"
)

// A request sent again with the lease id of its lost answer gets the same
// permit back, its token unchanged, and no second permit is taken.
func TestARetryWithTheSameLeaseIDGetsTheSamePermit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, _ *lockcore.Redlock, s *semaphore.Semaphores) {
		ctx := context.Background()
		other := mustAcquire(t, s, semaphore.AcquireRequest{Name: "r", Permits: 3, TTL: 10 * time.Second, Owner: "other"})
		req := semaphore.AcquireRequest{Name: "r", Permits: 3, TTL: 10 * time.Second, Owner: "me", LeaseID: lockcore.NewLeaseID()}
		first := mustAcquire(t, s, req)
		if first.Reentered || first.ID != req.LeaseID || first.Index == other.Index {
			t.Fatalf("first grant: %+v", first)
		}
		again := mustAcquire(t, s, req)
		if !again.Reentered || again.Index != first.Index || again.Token != first.Token || again.ID != req.LeaseID {
			t.Fatalf("retry: %+v, want permit %d again with token %d", again, first.Index, first.Token)
		}
		st, err := s.Inspect(ctx, "r")
		if err != nil || len(st.Holders) != 2 {
			t.Fatalf("after the retry: %+v, %v; want two permits held", st, err)
		}
	})
}

// countReads counts the permit reads of a Redlock, which states its limits.
type countReads struct {
	*lockcore.Redlock
	reads atomic.Int64
}

func (c *countReads) Inspect(ctx context.Context, resource string) (*lockcore.LockInfo, error) {
	c.reads.Add(1)
	return c.Redlock.Inspect(ctx, resource)
}

func (c *countReads) InspectMany(ctx context.Context, resources []string) ([]*lockcore.LockInfo, error) {
	c.reads.Add(int64(len(resources)))
	return c.Redlock.InspectMany(ctx, resources)
}

// A request the lock service would refuse is refused before any permit is
// read, whether or not the semaphore is full.
func TestABadRequestIsRefusedBeforeAnyRead(t *testing.T) {
	rl, _ := newSemaphores(t, []lockcore.Node{memnode.New(nil), memnode.New(nil), memnode.New(nil)})
	minTTL, maxTTL, maxWait := rl.Limits()
	for _, c := range []struct {
		name  string
		req   semaphore.AcquireRequest
		field string
	}{
		{"TTL below the minimum", semaphore.AcquireRequest{TTL: minTTL - time.Millisecond}, "ttl_ms"},
		{"TTL above the maximum", semaphore.AcquireRequest{TTL: maxTTL + time.Millisecond}, "ttl_ms"},
		{"wait above the maximum", semaphore.AcquireRequest{TTL: 2 * time.Second, Wait: maxWait + time.Millisecond}, "wait_ms"},
		{"bad lease id", semaphore.AcquireRequest{TTL: 2 * time.Second, LeaseID: "short"}, "lease_id"},
	} {
		t.Run(c.name, func(t *testing.T) {
			lk := &countReads{Redlock: rl}
			c.req.Name, c.req.Permits = "v", 2
			_, err := semaphore.New(lk).Acquire(context.Background(), c.req)
			var inv *lockcore.InvalidError
			if !errors.As(err, &inv) || inv.Field != c.field {
				t.Fatalf("%v, want an InvalidError on %s", err, c.field)
			}
			if n := lk.reads.Load(); n != 0 {
				t.Fatalf("%d permits read before the refusal", n)
			}
		})
	}
}

// A wait that runs out reports the holders' remaining TTL as it is then,
// not as the first read found it.
func TestAWaitThatRunsOutReportsTheRemainingTTLOfThen(t *testing.T) {
	_, s := newSemaphores(t, []lockcore.Node{memnode.New(nil), memnode.New(nil), memnode.New(nil)})
	ttl, wait := 10*time.Second, time.Second
	mustAcquire(t, s, semaphore.AcquireRequest{Name: "w", Permits: 1, TTL: ttl})
	_, err := s.Acquire(context.Background(), semaphore.AcquireRequest{Name: "w", Permits: 1, TTL: ttl, Wait: wait})
	var full *semaphore.FullError
	if !errors.As(err, &full) {
		t.Fatalf("%v, want FullError", err)
	}
	if full.RetryAfter <= 0 || full.RetryAfter > ttl-wait {
		t.Fatalf("RetryAfter %v after waiting %v for a permit of TTL %v; want at most %v", full.RetryAfter, wait, ttl, ttl-wait)
	}
}

// A waiting acquisition that finds the waiting room full for one of its
// permits is refused at once, not after waiting on the others.
func TestAFullWaitingRoomRefusesAtOnce(t *testing.T) {
	nodes := []lockcore.Node{memnode.New(nil), memnode.New(nil), memnode.New(nil)}
	rl, err := lockcore.New(nodes, &lockcore.Options{NodeTimeout: time.Second, MinTTL: 2 * time.Second, MaxWaiters: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rl.Close)
	s := semaphore.New(rl)
	req := semaphore.AcquireRequest{Name: "room", Permits: 3, TTL: time.Minute}
	for range 3 {
		mustAcquire(t, s, req)
	}
	req.Wait = 5 * time.Minute
	done := make(chan error, 1)
	go func() {
		_, err := s.Acquire(context.Background(), req)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, lockcore.ErrTooManyWaiters) {
			t.Fatalf("%v, want ErrTooManyWaiters", err)
		}
	case <-time.After(time.Minute): // far below the 5 minutes' wait
		t.Fatal("the acquisition still waits on the permits that found room")
	}
	waitFor(t, func() bool { return rl.Waiting() == 0 }, "the other waits to end")
}
