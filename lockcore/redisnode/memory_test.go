package redisnode_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
)

// memStat is one node's DBSIZE, used_memory and used_memory_dataset (what
// the keys take, without client buffers and the script cache).
type memStat struct{ keys, bytes, dataset int64 }

func memStats(t *testing.T, srvs []*redistest.Server) []memStat {
	t.Helper()
	out := make([]memStat, len(srvs))
	for i, s := range srvs {
		rdb := connect(t, s).Client()
		ctx := context.Background()
		n, err := rdb.DBSize(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		info, err := rdb.Info(ctx, "memory").Result()
		if err != nil {
			t.Fatal(err)
		}
		out[i] = memStat{keys: n, bytes: infoField(info, "used_memory"), dataset: infoField(info, "used_memory_dataset")}
	}
	return out
}

// settleKeys waits, for up to 10 s, until node i has want(i) keys: a call
// is answered at the first quorum, and a node that missed the grace may
// still have its part (a grant, a release, the undo of a late grant) in
// flight. The test then checks the counts.
func settleKeys(t *testing.T, srvs []*redistest.Server, want func(i int) int64) {
	t.Helper()
	for i, s := range srvs {
		rdb := connect(t, s).Client()
		poll(10*time.Second, func() bool { n, err := rdb.DBSize(context.Background()).Result(); return err == nil && n == want(i) })
	}
}

func infoField(info, field string) int64 {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return -1
}

// parallel runs fn(i) for i in [0, n) on 16 goroutines and returns the
// first error.
func parallel(n int, fn func(i int) error) error {
	var next atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || first.Load() != nil {
					return
				}
				if err := fn(i); err != nil {
					first.CompareAndSwap(nil, err)
				}
			}
		})
	}
	wg.Wait()
	if err, _ := first.Load().(error); err != nil {
		return err
	}
	return nil
}

// TestMemoryIsBoundedByWhatIsHeld: acquiring and releasing many distinct
// names leaves nothing behind per name (the counters are per slot, created
// once), and what held locks take is reported per lock. The CI run uses
// 20,000 names; LOCKGATE_MEMORY_NAMES=1000000 measures the figure
// (held: a tenth of the names at once).
func TestMemoryIsBoundedByWhatIsHeld(t *testing.T) {
	names := 20000
	if v := os.Getenv("LOCKGATE_MEMORY_NAMES"); v != "" {
		var err error
		if names, err = strconv.Atoi(v); err != nil {
			t.Fatal(err)
		}
	}
	held := names / 10
	srvs := redistest.StartN(t, 3, nil)
	empty := memStats(t, srvs)
	rl := newRedlock(t, srvs, &lockcore.Options{NodeTimeout: time.Second, MinTTL: 2 * time.Second, MaxTTL: time.Hour})
	ctx := context.Background()
	if err := rl.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	for i, s := range srvs { // the record of what the guard saw of the others (rule 8): one key
		if !poll(10*time.Second, func() bool {
			v, err := s.Do("EXISTS", "lockgate:{meta}:wit")
			return err == nil && strings.TrimSpace(v) == "1"
		}) {
			t.Fatalf("node %d: no witness key", i)
		}
	}
	before := memStats(t, srvs)
	start := time.Now()
	err := parallel(names, func(i int) error {
		res := fmt.Sprintf("memory-%d", i)
		l, err := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: res, TTL: time.Minute})
		if err != nil {
			return err
		}
		return rl.Release(ctx, lockcore.ReleaseRequest{Resource: res, LeaseID: l.ID})
	})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	settleKeys(t, srvs, func(i int) int64 { return before[i].keys })
	after := memStats(t, srvs)
	err = parallel(held, func(i int) error {
		_, err := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: fmt.Sprintf("held-%d", i), TTL: time.Hour})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	settleKeys(t, srvs, func(i int) int64 { return before[i].keys + int64(held) })
	holding := memStats(t, srvs)
	for i := range srvs {
		perLock := float64(holding[i].dataset-after[i].dataset) / float64(held)
		t.Logf("node %d: empty %d keys, used_memory %d B (dataset %d B); initialized %d keys, %d B (%d B); "+
			"after %d names acquired and released (%v) %d keys, %d B (%d B); with %d held %d keys, %d B (%d B): "+
			"%.0f B of dataset per held lock", i,
			empty[i].keys, empty[i].bytes, empty[i].dataset, before[i].keys, before[i].bytes, before[i].dataset,
			names, took.Round(time.Second), after[i].keys, after[i].bytes, after[i].dataset,
			held, holding[i].keys, holding[i].bytes, holding[i].dataset, perLock)
		if after[i].keys != before[i].keys {
			t.Errorf("node %d: %d keys before, %d after %d names: something is kept per name", i, before[i].keys, after[i].keys, names)
		}
		// One key per name would take about 100 B each (2 MB for 20,000
		// names); the allocator's noise was 70-105 KB here, and nothing over
		// 1,000,000 names (see docs/operations.md).
		if growth := after[i].dataset - before[i].dataset; growth > 256<<10 {
			t.Errorf("node %d: the dataset grew %d B over %d names", i, growth, names)
		}
		if holding[i].keys != before[i].keys+int64(held) {
			t.Errorf("node %d: %d keys with %d locks held, want %d", i, holding[i].keys, held, before[i].keys+int64(held))
		}
	}
}
