package handlers_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/api"
	"github.com/lockgate/lockgate/auth"
	"github.com/lockgate/lockgate/handlers"
	"github.com/lockgate/lockgate/lockcore"
)

// One caller with its full share of waiters leaves the rest of the
// replica's waiting room to others: its next waiting acquire gets 429
// naming its share, and another caller still waits and gets its lock.
func TestACallerWithItsShareOfWaitersLeavesRoomForOthers(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := auth.Parse(strings.NewReader(tenantA + " * a- tenant-a\n" + tenantB + " * b- tenant-b\n"))
	if err != nil {
		t.Fatal(err)
	}
	g := newGateway(t, memNodes(3, nil), &lockcore.Options{MaxWaiters: 4}, &handlers.Options{
		Middleware: []func(http.Handler) http.Handler{p.Middleware}, Grants: p.Grants, Caller: p.Name,
		WaitersPerCaller: 2,
	})
	srv := g.serve(t, nil)
	waiting := func(n int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for g.locker.Waiting() != n {
			if time.Now().After(deadline) {
				t.Fatalf("%d waiters, want %d", g.locker.Waiting(), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	wantLease(t, g.do(t, PUT, "/locks/a-hold", `{"ttl_ms":60000}`, bearerOf(tenantA)...), http.StatusCreated, "a-hold")
	b := wantLease(t, g.do(t, PUT, "/locks/b-job", `{"ttl_ms":60000}`, bearerOf(tenantB)...), http.StatusCreated, "b-job")

	// A asks for twice its share: the two past it are refused at once.
	answers := make(chan answer, 4)
	for range 4 {
		go func() {
			answers <- <-sendAsync(ctx, srv, PUT, "/locks/a-hold", `{"wait_ms":60000}`, bearerOf(tenantA)...)
		}()
	}
	for range 2 {
		a := await(t, answers, 10*time.Second, "A's waiting acquire past its share")
		if a.err != nil {
			t.Fatal(a.err)
		}
		checkContract(t, PUT, "/locks/a-hold", a.res)
		pr := wantProblem(t, a.res, http.StatusTooManyRequests, api.ProblemTooManyWaiters)
		if pr.Limit != "caller" || !strings.Contains(pr.Detail, "share of 2") || a.res.Header.Get(api.HeaderRetryAfter) == "" {
			t.Errorf("A past its share: limit %q, detail %q, Retry-After %q", pr.Limit, pr.Detail, a.res.Header.Get(api.HeaderRetryAfter))
		}
	}
	waiting(2)

	// B waits, and gets its lock when it is released.
	bWait := sendAsync(ctx, srv, PUT, "/locks/b-job", `{"wait_ms":60000}`, bearerOf(tenantB)...)
	waiting(3)
	if res := g.do(t, DELETE, "/locks/b-job", "", append(bearerOf(tenantB), api.HeaderLeaseID, b.LeaseID)...); res.Status != http.StatusNoContent {
		t.Fatalf("release b-job: %s", res)
	}
	a := await(t, bWait, 10*time.Second, "B's waiting acquire")
	if a.err != nil {
		t.Fatal(a.err)
	}
	checkContract(t, PUT, "/locks/b-job", a.res)
	wantLease(t, a.res, http.StatusCreated, "b-job")
	waiting(2)
	// B's finished wait gave its place back: B may wait twice again, which
	// fills the replica.
	for range 2 {
		go func() {
			answers <- <-sendAsync(ctx, srv, PUT, "/locks/b-job", `{"wait_ms":60000}`, bearerOf(tenantB)...)
		}()
	}
	waiting(4)
	select {
	case a := <-answers:
		t.Errorf("a waiter answered: %s", a.res)
	default:
	}
}
