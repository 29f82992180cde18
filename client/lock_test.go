package client_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/internal/goroutines"
)

func newClient(t *testing.T, url string) *client.Client {
	t.Helper()
	c, err := client.New(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The watchdog keeps a 1 s lock for more than ten TTLs: Done stays open,
// nobody else can take the lock, and the fencing token never changes.
func TestTheWatchdogKeepsAOneSecondLockThroughTenTTLs(t *testing.T) {
	g := startGateway(t, 3)
	c := newClient(t, g.URL)
	ctx := context.Background()
	const ttl = time.Second
	n := 0
	var mu sync.Mutex
	l, err := c.Lock(ctx, "watchdog-long", &client.LockOptions{TTL: ttl, OnRenew: func(*client.Lease) {
		mu.Lock()
		n++
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	end := time.Now().Add(11 * ttl)
	for time.Now().Before(end) {
		select {
		case <-l.Done():
			t.Fatalf("Done closed while the nodes were healthy: %v", l.Err())
		case <-time.After(ttl / 2):
		}
		if _, err := c.Acquire(ctx, "watchdog-long", &client.AcquireOptions{TTL: ttl}); !errors.Is(err, client.ErrTaken) {
			t.Fatalf("another lease: err = %v, want ErrTaken", err)
		}
		info, err := c.Get(ctx, "watchdog-long")
		if err != nil || info.FencingToken != l.FencingToken() {
			t.Fatalf("Get = %+v, %v; want token %d", info, err, l.FencingToken())
		}
	}
	mu.Lock()
	renewed := n
	mu.Unlock()
	t.Logf("renewed %d times in %v (TTL %v)", renewed, 11*ttl, ttl)
	if renewed < 20 {
		t.Errorf("renewed %d times in 11 TTLs, want about 33 (every TTL/3)", renewed)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(l.Err(), client.ErrReleased) {
		t.Errorf("Err after Release = %v, want ErrReleased", l.Err())
	}
	if _, err := c.Get(ctx, "watchdog-long"); !errors.Is(err, client.ErrNotHeld) {
		t.Errorf("Get after Release: %v, want ErrNotHeld", err)
	}
}

// With a majority of the nodes frozen (SIGSTOP), no renewal can succeed:
// Done must close before the validity last granted runs out. The margin is
// measured against the client's own count (from when the granting request
// was sent) and checked against the one node still answering, whose copy of
// the lock must still be alive when Done closes.
func TestDoneClosesBeforeTheValidityEndsWhenAMajorityIsFrozen(t *testing.T) {
	g := startGateway(t, 3)
	c := newClient(t, g.URL)
	ctx := context.Background()
	// A 2s TTL: the default margin is then 200ms, room enough for this
	// test's own goroutine to see Done on a loaded machine.
	const ttl = 2 * time.Second
	for round := range 3 {
		resource := "watchdog-frozen-" + string(rune('a'+round))
		renewed := make(chan struct{}, 100)
		l, err := c.Lock(ctx, resource, &client.LockOptions{TTL: ttl, OnRenew: func(*client.Lease) {
			renewed <- struct{}{}
		}})
		if err != nil {
			t.Fatal(err)
		}
		<-renewed // at least one renewal went through before the freeze
		g.nodes[1].Pause()
		g.nodes[2].Pause()
		frozeAt := time.Now()
		var doneAt time.Time
		select {
		case <-l.Done():
			doneAt = time.Now()
		case <-time.After(3 * ttl):
			g.nodes[1].Resume()
			g.nodes[2].Resume()
			t.Fatalf("Done still open %v after a majority froze", 3*ttl)
		}
		left := g.pttl(t, 0, resource)
		validUntil := l.ValidUntil()
		g.nodes[1].Resume()
		g.nodes[2].Resume()
		margin := validUntil.Sub(doneAt)
		t.Logf("round %d: Done closed %v after the freeze, %v before the validity last granted ended; the live node's copy had %v left; Err: %v",
			round, doneAt.Sub(frozeAt).Round(time.Millisecond), margin.Round(time.Millisecond), left, l.Err())
		if margin <= 0 {
			t.Errorf("Done closed %v AFTER the validity ended", -margin)
		}
		if left <= 0 {
			t.Errorf("the live node's copy of the lock had expired (PTTL %v) when Done closed", left)
		}
		if !errors.Is(l.Err(), client.ErrLost) {
			t.Errorf("Err = %v, want ErrLost", l.Err())
		}
		if l.Context().Err() == nil || !errors.Is(context.Cause(l.Context()), client.ErrLost) {
			t.Errorf("Context: err %v, cause %v; want cancelled with ErrLost", l.Context().Err(), context.Cause(l.Context()))
		}
		_ = l.Release(ctx) // the nodes answer again: frees the lock or says it is gone
	}
}

// Release waits for the renewal in flight: with every PATCH delayed on its
// way to the handlers and Release called while one is delayed, no PATCH
// reaches the lock service after Release returns, and the lock is not held
// afterwards. (With Release not waiting for the watchdog, this test fails:
// the delayed PATCH arrives after the DELETE.)
func TestNoRenewalReachesTheGatewayAfterRelease(t *testing.T) {
	g := startGateway(t, 3)
	c := newClient(t, g.URL)
	ctx := context.Background()
	// reached counts the PATCHes that get past the delay to the handlers,
	// that is, to the lock service.
	var reached atomic.Int64
	g.setFront(func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		if r.Method == http.MethodPatch {
			time.Sleep(150 * time.Millisecond)
			reached.Add(1)
		}
		next.ServeHTTP(w, r)
	})
	const ttl = 900 * time.Millisecond
	for round := range 3 {
		l, err := c.Lock(ctx, "watchdog-release", &client.LockOptions{TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(3 * ttl)
		for g.inflight.Load() == 0 {
			if time.Now().After(deadline) {
				t.Fatal("no renewal started within 3 TTLs")
			}
			time.Sleep(time.Millisecond)
		}
		if n := goroutines.Count("", "client.(*Lock).watch("); n != 1 {
			t.Fatalf("round %d: %d watchdog goroutines while the lock is held, want 1", round, n)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("round %d: Release: %v", round, err)
		}
		after := reached.Load()
		time.Sleep(2 * ttl)
		if got := reached.Load(); got != after {
			t.Fatalf("round %d: %d PATCH requests reached the gateway after Release returned", round, got-after)
		}
		if _, err := c.Get(ctx, "watchdog-release"); !errors.Is(err, client.ErrNotHeld) {
			t.Fatalf("round %d: Get after Release: %v, want ErrNotHeld", round, err)
		}
		if n := goroutines.Count("", "client.(*Lock).watch("); n != 0 {
			t.Fatalf("round %d: %d watchdog goroutines left after Release", round, n)
		}
	}
}

// A lock lost to a definite answer (its keys deleted behind its back, as an
// operator or an expiry would) closes Done at the next renewal, not at the
// end of the validity.
func TestALockDeletedBehindItsBackClosesDoneAtTheNextRenewal(t *testing.T) {
	g := startGateway(t, 3)
	c := newClient(t, g.URL)
	ctx := context.Background()
	const ttl = 3 * time.Second
	l, err := c.Lock(ctx, "watchdog-deleted", &client.LockOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	for i := range g.nodes {
		g.del(t, i, "watchdog-deleted")
	}
	deleted := time.Now()
	select {
	case <-l.Done():
	case <-time.After(ttl):
		t.Fatal("Done still open a TTL after the lock was deleted")
	}
	took := time.Since(deleted)
	t.Logf("Done closed %v after the delete (renewal period %v): %v", took.Round(time.Millisecond), ttl/3, l.Err())
	// A renewal period and 600 ms for the renewal itself on a busy
	// machine: still 400 ms before the renewal after it (the delete came
	// right after the acquisition).
	if took > ttl/3+600*time.Millisecond {
		t.Errorf("Done closed %v after the delete, more than one renewal period (%v) and its call", took, ttl/3)
	}
	if !errors.Is(l.Err(), client.ErrLost) || !errors.Is(l.Err(), client.ErrNotHeld) {
		t.Errorf("Err = %v, want ErrLost wrapping ErrNotHeld", l.Err())
	}
}

// MaxHold stops the renewals: Done closes with ErrMaxHold, and the lock
// then runs out by itself.
func TestMaxHoldStopsRenewing(t *testing.T) {
	g := startGateway(t, 3)
	c := newClient(t, g.URL)
	ctx := context.Background()
	l, err := c.Lock(ctx, "watchdog-maxhold", &client.LockOptions{TTL: time.Second, MaxHold: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	<-l.Done()
	held := time.Since(start)
	if !errors.Is(l.Err(), client.ErrMaxHold) || held < 1400*time.Millisecond || held > 2200*time.Millisecond { // the lease would run out at about 2.3 s
		t.Fatalf("Done after %v with %v, want ErrMaxHold after about 1.5s", held, l.Err())
	}
	patches := g.patches.Load()
	deadline := time.Now().Add(3 * time.Second)
	for {
		_, err := c.Get(ctx, "watchdog-maxhold")
		if errors.Is(err, client.ErrNotHeld) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lock is still held 3s after MaxHold: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := g.patches.Load(); got != patches {
		t.Errorf("%d renewals after MaxHold", got-patches)
	}
}
