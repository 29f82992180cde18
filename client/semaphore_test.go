package client_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/lockgate/lockgate/client"
)

// The permit methods against the real gateway over three redis-servers.
func TestPermits(t *testing.T) {
	g := startGateway(t, 3)
	c, err := client.New(g.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, err := c.AcquirePermit(ctx, "pool", 2, &client.AcquireOptions{TTL: 10 * time.Second, Owner: "a"})
	if err != nil || a.Permits != 2 || a.Semaphore != "pool" {
		t.Fatalf("%+v, %v", a, err)
	}
	b, err := c.AcquirePermit(ctx, "pool", 2, &client.AcquireOptions{TTL: 10 * time.Second, Owner: "b"})
	if err != nil || b.Permit.Permit == a.Permit.Permit {
		t.Fatalf("%+v, %v", b, err)
	}
	_, err = c.AcquirePermit(ctx, "pool", 2, nil)
	var pe *client.ProblemError
	if !errors.Is(err, client.ErrSemaphoreFull) || !errors.As(err, &pe) || pe.RetryAfter <= 0 {
		t.Fatalf("a third permit: %v, want ErrSemaphoreFull with RetryAfter", err)
	}
	if _, err := c.AcquirePermit(ctx, "pool", 5, nil); !errors.Is(err, client.ErrPermitsMismatch) {
		t.Fatalf("K=5: %v, want ErrPermitsMismatch", err)
	}
	info, err := c.GetSemaphore(ctx, "pool")
	if err != nil || info.Permits != 2 || info.InUse != 2 {
		t.Fatalf("%+v, %v", info, err)
	}
	ext, err := c.ExtendPermit(ctx, "pool", a.Permit.Permit, a.LeaseID, &client.ExtendOptions{TTL: 20 * time.Second, IfToken: a.FencingToken})
	if err != nil || ext.FencingToken != a.FencingToken || ext.TTLms != 20000 {
		t.Fatalf("%+v, %v", ext, err)
	}
	for _, p := range []*client.Permit{a, b} {
		if err := c.ReleasePermit(ctx, "pool", p.Permit.Permit, p.LeaseID, p.FencingToken); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.GetSemaphore(ctx, "pool"); !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("no permit held: %v, want ErrNotHeld", err)
	}
}

// HoldPermit keeps its permit past its TTL, fences by permit, and gives
// it back on Release.
func TestHoldPermit(t *testing.T) {
	g := startGateway(t, 3)
	c, _ := client.New(g.URL, nil)
	ctx := context.Background()
	renewed := make(chan struct{}, 16)
	l, err := c.HoldPermit(ctx, "batch", 1, &client.LockOptions{TTL: 600 * time.Millisecond, OnRenew: func(*client.Lease) {
		select {
		case renewed <- struct{}{}:
		default:
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 { // three renewals: more than a TTL held
		select {
		case <-renewed:
		case <-l.Done():
			t.Fatalf("lost: %v", l.Err())
		case <-time.After(30 * time.Second):
			t.Fatal("no renewal")
		}
	}
	if l.Permit() != 0 || l.Resource() != "batch" {
		t.Fatalf("permit %d of %s", l.Permit(), l.Resource())
	}
	req, _ := http.NewRequest(http.MethodPut, "http://store/x", nil)
	l.SetFencingHeaders(req)
	if got := req.Header.Get("Fencing-Resource"); got != client.FenceResource("batch", 0) {
		t.Errorf("Fencing-Resource %q", got)
	}
	if _, err := c.AcquirePermit(ctx, "batch", 1, nil); !errors.Is(err, client.ErrSemaphoreFull) {
		t.Fatalf("while held: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetSemaphore(ctx, "batch"); !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("after Release: %v, want ErrNotHeld", err)
	}
}
