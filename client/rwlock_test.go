package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockgate/lockgate/api"
	"github.com/lockgate/lockgate/client"
)

// Readers-writer locks against the real gateway over three redis-servers.
func TestRWLocks(t *testing.T) {
	g := startGateway(t, 3)
	c, err := client.New(g.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	opts := &client.LockOptions{TTL: 10 * time.Second, Owner: "reader"}
	r1, err := c.HoldRW(ctx, "table", false, opts)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := c.HoldRW(ctx, "table", false, opts)
	if err != nil {
		t.Fatal(err)
	}
	if r2.FencingToken() <= r1.FencingToken() {
		t.Fatalf("readers' tokens %d then %d", r1.FencingToken(), r2.FencingToken())
	}
	_, err = c.AcquireRW(ctx, "table", true, nil)
	var pe *client.ProblemError
	if !errors.Is(err, client.ErrTaken) || !errors.As(err, &pe) || pe.RetryAfter <= 0 {
		t.Fatalf("a writer beside readers: %v, want ErrTaken with RetryAfter", err)
	}
	if _, err := c.AcquireRW(ctx, "table", true, &client.AcquireOptions{LeaseID: r1.LeaseID()}); !errors.Is(err, client.ErrModeHeld) {
		t.Fatalf("an upgrade: %v, want ErrModeHeld", err)
	}
	info, err := c.GetRWLock(ctx, "table")
	if err != nil || info.Mode != api.ModeShared || len(info.Holders) != 2 {
		t.Fatalf("%+v, %v", info, err)
	}
	// A writer that waits is granted once the readers leave.
	type result struct {
		l   *client.Lock
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := c.HoldRW(ctx, "table", true, &client.LockOptions{TTL: 10 * time.Second, Wait: 20 * time.Second})
		got <- result{l, err}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := c.GetRWLock(ctx, "table")
		if err == nil && info.WriterWaiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the writer never showed as waiting: %+v, %v", info, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := c.AcquireRW(ctx, "table", false, nil); !errors.Is(err, client.ErrTaken) {
		t.Fatalf("a new reader while a writer waits: %v, want ErrTaken", err)
	}
	for _, r := range []*client.Lock{r1, r2} {
		if err := r.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	res := <-got
	if res.err != nil {
		t.Fatal(res.err)
	}
	if res.l.FencingToken() <= r2.FencingToken() {
		t.Fatalf("the writer's token %d, not above the readers' %d", res.l.FencingToken(), r2.FencingToken())
	}
	if err := res.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetRWLock(ctx, "table"); !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("after every release: %v, want ErrNotHeld", err)
	}
}
