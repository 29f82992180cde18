package memnode_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
)

// heldLocks returns the embedded store as the gateway runs it (one node
// under a Redlock) holding n locks named "tenant-a-job-NNNNNN" for an hour.
func heldLocks(b *testing.B, n int) (*lockcore.Redlock, *memnode.Node) {
	b.Helper()
	node := memnode.New(nil)
	b.Cleanup(node.Close)
	for i := range n {
		name := fmt.Sprintf("tenant-a-job-%06d", i)
		_, err := node.Acquire(context.Background(), lockcore.NodeAcquire{Resource: name, Lease: lockcore.NewLeaseID(),
			Owner: "worker-17", TTL: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
	}
	rl, err := lockcore.New([]lockcore.Node{node}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(rl.Close)
	return rl, node
}

// BenchmarkListPage is one listing page of 100 locks (GET /locks?limit=100)
// while the embedded store holds 200,000: the goal is under 10 ms a page,
// whatever the number of locks held.
func BenchmarkListPage(b *testing.B) {
	rl, _ := heldLocks(b, 200_000)
	ctx := context.Background()
	for _, prefix := range []string{"", "tenant-a-job-1"} {
		b.Run("prefix="+prefix, func(b *testing.B) {
			for b.Loop() {
				page, err := rl.List(ctx, prefix, 100, "")
				if err != nil || len(page.Locks) != 100 {
					b.Fatalf("%d locks, %v", len(page.Locks), err)
				}
			}
		})
	}
}

// BenchmarkAcquireWhileListing is an acquire and release on the embedded
// store holding 200,000 locks, alone and while another goroutine lists
// pages of 1,000 without pause; it reports the acquire's p99. The goal:
// listing leaves the acquire's p99 where it is.
func BenchmarkAcquireWhileListing(b *testing.B) {
	rl, _ := heldLocks(b, 200_000)
	ctx := context.Background()
	for _, listing := range []bool{false, true} {
		b.Run(fmt.Sprintf("listing=%v", listing), func(b *testing.B) {
			stop := make(chan struct{})
			var wg sync.WaitGroup
			if listing {
				wg.Go(func() {
					cursor := ""
					for {
						select {
						case <-stop:
							return
						default:
						}
						page, err := rl.List(ctx, "", 1000, cursor)
						if err != nil {
							return
						}
						cursor = page.Next
					}
				})
			}
			var took []time.Duration
			for b.Loop() {
				start := time.Now()
				lease, err := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "hot", TTL: time.Minute})
				if err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(start))
				if err := rl.Release(ctx, lockcore.ReleaseRequest{Resource: "hot", LeaseID: lease.ID}); err != nil {
					b.Fatal(err)
				}
			}
			close(stop)
			wg.Wait()
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds()), "p99-ns")
		})
	}
}

// BenchmarkMemoryPerLock reports the heap one held lock takes in the
// embedded store (a 19-character name, a lease id, a 9-character owner),
// its map entry and both indexes included, over 100,000 locks.
func BenchmarkMemoryPerLock(b *testing.B) {
	const n = 100_000
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		node := memnode.New(nil)
		for i := range n {
			name := fmt.Sprintf("tenant-a-job-%06d", i)
			if _, err := node.Acquire(context.Background(), lockcore.NodeAcquire{Resource: name, Lease: lockcore.NewLeaseID(),
				Owner: "worker-17", TTL: time.Hour}); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/lock")
		runtime.KeepAlive(node)
		node.Close()
	}
}
