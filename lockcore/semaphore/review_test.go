package semaphore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
	"github.com/lockgate/lockgate/lockcore/semaphore"
)

// TestReviewSmallerKIsNotRefusedWhileALargerKHoldsAHighPermit is a review
// finding, not a fix: the package doc and docs/semaphores.md promise 409
// permits-mismatch for "a PUT with another K while any permit is held",
// and say the only way around it is two *first* acquisitions at the same
// moment. But an acquisition with K reads permits 0..K only, so a holder
// of a larger K on a permit above K is never seen, with no race at all:
// K=3 holders take permits 0, 1, 2; the holders of 0 and 1 give them back;
// a K=1 acquisition (a caller who wants a mutex) reads permits 0 and 1,
// finds them free and is granted permit 0 while permit 2 is still held
// with K=3. Two holders now hold a semaphore that the K=1 caller was told
// has one permit, and their fencing tokens are of different permits.
func TestReviewSmallerKIsNotRefusedWhileALargerKHoldsAHighPermit(t *testing.T) {
	nodes := []lockcore.Node{memnode.New(nil), memnode.New(nil), memnode.New(nil)}
	_, s := newSemaphores(t, nodes)
	ctx := context.Background()
	req3 := semaphore.AcquireRequest{Name: "jobs", Permits: 3, TTL: 10 * time.Second, Owner: "k3"}
	held := map[int]*semaphore.Permit{}
	for range 3 {
		p := mustAcquire(t, s, req3)
		held[p.Index] = p
	}
	for _, i := range []int{0, 1} {
		if err := s.Release(ctx, "jobs", i, held[i].ID, 0); err != nil {
			t.Fatal(err)
		}
	}
	// Permit 2 is still held with K=3.
	st, err := s.Inspect(ctx, "jobs")
	if err != nil || st.Permits != 3 || len(st.Holders) != 1 || st.Holders[0].Index != 2 {
		t.Fatalf("inspect before: %+v, %v", st, err)
	}
	p, err := s.Acquire(ctx, semaphore.AcquireRequest{Name: "jobs", Permits: 1, TTL: 10 * time.Second, Owner: "k1"})
	if !errors.Is(err, semaphore.ErrMismatch) {
		t.Fatalf("K=1 while permit 2 is held with K=3: got permit %+v, err %v; want *MismatchError (409)", p, err)
	}
}

// TestReviewInspectHidesAHeldPermit is a review finding: once permits of
// two K are held at once (the package doc says when that can happen; here
// permit 0 is taken with K=1 straight through the lock service, as a
// first acquisition racing the K=3 ones could), Inspect (GET
// /semaphores/NAME) must show both: it used to take K from the first
// holder it found and list only permits below it, answering permits=1,
// in_use=1 while two permits were held.
func TestReviewInspectHidesAHeldPermit(t *testing.T) {
	nodes := []lockcore.Node{memnode.New(nil), memnode.New(nil), memnode.New(nil)}
	rl, s := newSemaphores(t, nodes)
	ctx := context.Background()
	req3 := semaphore.AcquireRequest{Name: "jobs", Permits: 3, TTL: 10 * time.Second, Owner: "k3"}
	held := map[int]*semaphore.Permit{}
	for range 3 {
		p := mustAcquire(t, s, req3)
		held[p.Index] = p
	}
	for _, i := range []int{0, 1} {
		if err := s.Release(ctx, "jobs", i, held[i].ID, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: lockcore.PermitResource("jobs", 0), TTL: 10 * time.Second, Owner: "1 k1"}); err != nil {
		t.Fatal(err)
	}
	st, err := s.Inspect(ctx, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Holders) != 2 || st.Permits != 3 {
		t.Fatalf("Inspect: permits=%d holders=%+v; two permits (0 with K=1, 2 with K=3) are held", st.Permits, st.Holders)
	}
	for _, h := range st.Holders {
		if want := map[int]int{0: 1, 2: 3}[h.Index]; h.Permits != want {
			t.Fatalf("holder %+v: want Permits %d", h, want)
		}
	}
	// Any K is refused while they are held, 1 and 3 included.
	for _, k := range []int{1, 2, 3, 4} {
		_, err := s.Acquire(ctx, semaphore.AcquireRequest{Name: "jobs", Permits: k, TTL: 10 * time.Second})
		if !errors.Is(err, semaphore.ErrMismatch) {
			t.Fatalf("K=%d beside holders of K=1 and K=3: %v, want ErrMismatch", k, err)
		}
	}
}
