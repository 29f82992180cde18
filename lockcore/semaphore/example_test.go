package semaphore_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
	"github.com/lockgate/lockgate/lockcore/semaphore"
)

// Two permits of "exports": two holders at once, each with its own permit
// and fencing token; a third is refused until one gives its permit back,
// and a caller with another K is refused while any permit is held.
func Example() {
	ctx := context.Background()
	rl, _ := lockcore.New([]lockcore.Node{memnode.New(nil), memnode.New(nil), memnode.New(nil)}, nil)
	defer rl.Close()
	s := semaphore.New(rl)

	req := semaphore.AcquireRequest{Name: "exports", Permits: 2, TTL: 10 * time.Second, Owner: "exporter"}
	a, _ := s.Acquire(ctx, req)
	b, _ := s.Acquire(ctx, req)
	fmt.Println("permits", a.Index, b.Index)

	_, err := s.Acquire(ctx, req)
	fmt.Println("a third:", errors.Is(err, semaphore.ErrFull))

	_, err = s.Acquire(ctx, semaphore.AcquireRequest{Name: "exports", Permits: 3, TTL: time.Second})
	fmt.Println("K=3:", errors.Is(err, semaphore.ErrMismatch))

	_ = s.Release(ctx, "exports", a.Index, a.ID, 0)
	st, _ := s.Inspect(ctx, "exports")
	fmt.Println("in use", len(st.Holders), "of", st.Permits, "- permit", st.Holders[0].Index, "held by", st.Holders[0].Owner)
	// Output:
	// permits 0 1
	// a third: true
	// K=3: true
	// in use 1 of 2 - permit 1 held by exporter
}
