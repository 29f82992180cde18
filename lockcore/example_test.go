package lockcore_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
	"github.com/lockgate/lockgate/lockcore/nodetest"
)

// threeNodes returns a Redlock over three in-memory nodes. In production the
// nodes are independent Redis masters (package redisnode).
func threeNodes() *lockcore.Redlock {
	rl, err := lockcore.New([]lockcore.Node{memnode.New(nil), memnode.New(nil), memnode.New(nil)}, nil)
	if err != nil {
		panic(err)
	}
	return rl
}

// A lock's life: acquire, inspect, extend, release. Every new holder gets a
// higher fencing token, to pass along with every write to the storage the
// lock protects.
func Example() {
	ctx := context.Background()
	rl := threeNodes()
	defer rl.Close()

	lease, err := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "invoices", TTL: 10 * time.Second, Owner: "billing-worker-1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("acquired, token", lease.Token)

	info, _ := rl.Inspect(ctx, "invoices")
	fmt.Println("held by", info.Owner, "with token", info.Token)

	_, err = rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "invoices", TTL: 10 * time.Second})
	fmt.Println("another client:", errors.Is(err, lockcore.ErrTaken))

	lease, _ = rl.Extend(ctx, lockcore.ExtendRequest{Resource: "invoices", LeaseID: lease.ID, TTL: 30 * time.Second})
	fmt.Println("extended to", lease.TTL, "token", lease.Token)

	_ = rl.Release(ctx, lockcore.ReleaseRequest{Resource: "invoices", LeaseID: lease.ID})
	_, err = rl.Inspect(ctx, "invoices")
	fmt.Println("after release:", errors.Is(err, lockcore.ErrNotHeld))

	next, _ := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "invoices", TTL: 10 * time.Second})
	fmt.Println("next holder, token", next.Token)
	// Output:
	// acquired, token 1
	// held by billing-worker-1 with token 1
	// another client: true
	// extended to 30s token 1
	// after release: true
	// next holder, token 2
}

// Fencing tokens grow with every new holder, whoever it is. A retry by the
// same lease (same LeaseID, e.g. after a lost response) is not a new holder:
// it gets the same token back.
func Example_fencingTokens() {
	ctx := context.Background()
	rl := threeNodes()
	defer rl.Close()

	for range 3 {
		lease, _ := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "reports", TTL: 5 * time.Second})
		retry, _ := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "reports", LeaseID: lease.ID, TTL: 5 * time.Second})
		fmt.Println("token", lease.Token, "retry token", retry.Token, "reentered", retry.Reentered)
		_ = rl.Release(ctx, lockcore.ReleaseRequest{Resource: "reports", LeaseID: lease.ID})
	}
	// Output:
	// token 1 retry token 1 reentered true
	// token 2 retry token 2 reentered true
	// token 3 retry token 3 reentered true
}

// With a Wait, Acquire queues behind the holder and takes the lock as soon
// as it is released, long before the holder's TTL would run out.
func ExampleRedlock_Acquire_wait() {
	ctx := context.Background()
	rl := threeNodes()
	defer rl.Close()

	holder, _ := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "nightly-job", TTL: time.Minute})
	go func() {
		time.Sleep(50 * time.Millisecond) // the holder's work
		_ = rl.Release(ctx, lockcore.ReleaseRequest{Resource: "nightly-job", LeaseID: holder.ID})
	}()

	lease, err := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "nightly-job", TTL: time.Minute, Wait: 30 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	// The new token is higher; it may skip values (an attempt that ran
	// into the release half-way took a node's count and gave the lock back).
	fmt.Println("waited for token", holder.Token, "and got a higher one:", lease.Token > holder.Token)

	// Without a wait, a held lock fails at once, with the holder's
	// remaining TTL as a hint of when to retry.
	_, err = rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "nightly-job", TTL: time.Minute})
	var taken *lockcore.TakenError
	fmt.Println("taken:", errors.As(err, &taken), "retry after about", taken.RetryAfter.Round(time.Second))
	// Output:
	// waited for token 1 and got a higher one: true
	// taken: true retry after about 1m0s
}

// Extend and Release can require the caller's fencing token to be the
// holder's (an If-Match), and refuse a lease that no longer holds the lock.
func ExampleRedlock_Extend() {
	ctx := context.Background()
	rl := threeNodes()
	defer rl.Close()

	lease, _ := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "cache-rebuild", TTL: 10 * time.Second})

	_, err := rl.Extend(ctx, lockcore.ExtendRequest{Resource: "cache-rebuild", LeaseID: lease.ID, IfToken: lease.Token + 1})
	fmt.Println("stale token:", errors.Is(err, lockcore.ErrTokenMismatch))

	ext, _ := rl.Extend(ctx, lockcore.ExtendRequest{Resource: "cache-rebuild", LeaseID: lease.ID, IfToken: lease.Token})
	fmt.Println("TTL 0 keeps", ext.TTL)

	_ = rl.Release(ctx, lockcore.ReleaseRequest{Resource: "cache-rebuild", LeaseID: lease.ID})
	_, err = rl.Extend(ctx, lockcore.ExtendRequest{Resource: "cache-rebuild", LeaseID: lease.ID})
	fmt.Println("after release:", errors.Is(err, lockcore.ErrNotHeld))

	other, _ := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "cache-rebuild", TTL: 10 * time.Second})
	err = rl.Release(ctx, lockcore.ReleaseRequest{Resource: "cache-rebuild", LeaseID: lease.ID})
	fmt.Println("old lease vs new holder:", errors.Is(err, lockcore.ErrHeldByOther), "new token", other.Token)
	// Output:
	// stale token: true
	// TTL 0 keeps 10s
	// after release: true
	// old lease vs new holder: true new token 2
}

// Inspect tells who holds a lock, never the secret lease id. The lock stands
// while a majority of nodes hold it: here two of three. Its time left is the
// nodes' less the allowance for clock drift (1 % of the TTL and 2 ms); a
// clock shared by the Redlock and the nodes, which moves only when told to,
// makes the figures exact.
func ExampleRedlock_Inspect() {
	ctx := context.Background()
	clock := nodetest.NewClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	nodes := make([]*memnode.Node, 3)
	for i := range nodes {
		nodes[i] = memnode.New(&memnode.Options{Now: clock.Now})
	}
	rl, _ := lockcore.New([]lockcore.Node{nodes[0], nodes[1], nodes[2]}, &lockcore.Options{Clock: clock})
	defer rl.Close()

	lease, _ := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "shard-7", TTL: 20 * time.Second, Owner: "rebalancer"})
	// One node loses the lock (say it restarted empty): still held.
	_, _ = nodes[2].Release(ctx, "shard-7", lease.ID, 0)
	info, err := rl.Inspect(ctx, "shard-7")
	fmt.Println(info.Owner, info.Token, info.TTL, info.Remaining, err)

	clock.Advance(5 * time.Second)
	info, _ = rl.Inspect(ctx, "shard-7")
	fmt.Println("5s later:", info.Remaining, "left, until", info.Expires.Format(time.TimeOnly))
	// Output:
	// rebalancer 1 20s 19.798s <nil>
	// 5s later: 14.798s left, until 00:00:19
}

// New refuses options that contradict each other.
func ExampleNew() {
	_, err := lockcore.New(nil, nil)
	fmt.Println(err)
	_, err = lockcore.New([]lockcore.Node{memnode.New(nil)}, &lockcore.Options{MinTTL: 2 * time.Hour})
	fmt.Println(errors.Is(err, lockcore.ErrInvalid))
	// Output:
	// lockcore: invalid nodes: between 1 and 63 nodes are needed
	// true
}

// Readers share a readers-writer lock; a writer is refused beside them,
// and a reader cannot upgrade. Once the readers leave, the writer's token
// is above every reader's: a store that keeps the highest writer token it
// applied sees that the readers' tokens are stale.
func ExampleRedlock_AcquireRW() {
	ctx := context.Background()
	rl := threeNodes()
	defer rl.Close()

	r1, _ := rl.AcquireRW(ctx, lockcore.RWAcquireRequest{Name: "ledger", TTL: 10 * time.Second})
	r2, _ := rl.AcquireRW(ctx, lockcore.RWAcquireRequest{Name: "ledger", TTL: 10 * time.Second})
	fmt.Println("readers, tokens", r1.Token, r2.Token)

	_, err := rl.AcquireRW(ctx, lockcore.RWAcquireRequest{Name: "ledger", Exclusive: true, TTL: 10 * time.Second})
	fmt.Println("writer beside them:", errors.Is(err, lockcore.ErrTaken))
	_, err = rl.AcquireRW(ctx, lockcore.RWAcquireRequest{Name: "ledger", Exclusive: true, LeaseID: r1.ID, TTL: 10 * time.Second})
	fmt.Println("upgrade:", errors.Is(err, lockcore.ErrModeHeld))

	for _, r := range []*lockcore.RWLease{r1, r2} {
		_ = rl.ReleaseRW(ctx, lockcore.RWReleaseRequest{Name: "ledger", LeaseID: r.ID})
	}
	w, _ := rl.AcquireRW(ctx, lockcore.RWAcquireRequest{Name: "ledger", Exclusive: true, TTL: 10 * time.Second})
	fmt.Println("writer, token", w.Token)
	// Output:
	// readers, tokens 1 2
	// writer beside them: true
	// upgrade: true
	// writer, token 3
}
