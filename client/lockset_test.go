package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockgate/lockgate/client"
)

// Lock sets against the real gateway over three redis-servers: HoldSet
// takes every member with a token each and keeps them past their TTL; an
// overlapping set is refused whole, naming the member; a waiting set is
// granted once the first is released.
func TestLockSets(t *testing.T) {
	g := startGateway(t, 3)
	c, err := client.New(g.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s, err := c.HoldSet(ctx, []string{"orders", "invoices", "ledger"}, &client.LockOptions{TTL: 600 * time.Millisecond, Owner: "month-end"})
	if err != nil {
		t.Fatal(err)
	}
	ms := s.Members()
	if s.Resource() != "invoices,ledger,orders" || len(ms) != 3 || ms[0].Resource != "invoices" || s.FencingToken() != 0 {
		t.Fatalf("set %s: %+v, token %d", s.Resource(), ms, s.FencingToken())
	}
	time.Sleep(time.Second) // past the TTL: the watchdog renews every member
	select {
	case <-s.Done():
		t.Fatalf("the set was lost: %v", s.Err())
	default:
	}
	info, err := c.GetSet(ctx, []string{"ledger", "orders", "invoices"})
	if err != nil || len(info.Members) != 3 || !info.Members[1].Held || info.Members[1].FencingToken != ms[1].FencingToken {
		t.Fatalf("GetSet: %+v, %v", info, err)
	}
	_, err = c.AcquireSet(ctx, []string{"payroll", "ledger"}, nil)
	var pe *client.ProblemError
	if !errors.Is(err, client.ErrTaken) || !errors.As(err, &pe) || pe.RetryAfter <= 0 {
		t.Fatalf("an overlapping set: %v, want ErrTaken with RetryAfter", err)
	}
	if _, err := c.Get(ctx, "payroll"); !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("payroll after the refused set: %v, want ErrNotHeld", err)
	}
	type result struct {
		s   *client.SetLease
		err error
	}
	got := make(chan result, 1)
	go func() {
		w, err := c.AcquireSet(ctx, []string{"shipping", "orders"}, &client.AcquireOptions{TTL: 10 * time.Second, Wait: 20 * time.Second})
		got <- result{w, err}
	}()
	time.Sleep(200 * time.Millisecond)
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
	res := <-got
	if res.err != nil {
		t.Fatal(res.err)
	}
	if res.s.Resources != "orders,shipping" || res.s.Token("orders") <= ms[2].FencingToken {
		t.Fatalf("the waiting set: %+v; orders' token not above %d", res.s.LockSet, ms[2].FencingToken)
	}
	if err := c.ReleaseSet(ctx, []string{"orders", "shipping"}, res.s.LeaseID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetSet(ctx, []string{"orders", "shipping"}); !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("GetSet of a released set: %v, want ErrNotHeld", err)
	}
}
