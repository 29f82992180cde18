package redisnode_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
)

// TestThreeGatewaysRecoverAnEmptyRestartTogether: three gateway replicas,
// each with its own connections and its own guard checking every second,
// under traffic, and one node restarted empty five times. Each replica
// finds the loss and quarantines, and may recover, the node: they must
// not replace each other's unfinished work (rules 7a and 7d of package
// lockcore's doc), so the node serves again within a few checks each
// time. It logs how long each restart took to serve again, and fails only
// when the node does not serve again within 30 s: the figure is for the
// recovery issue's note, not a timed test. (Exclusion under such faults is
// the chaos package's to check.)
func TestThreeGatewaysRecoverAnEmptyRestartTogether(t *testing.T) {
	srvs := redistest.StartN(t, 3, &redistest.Options{AOF: true})
	a := srvs[0]
	opts := recoverOptions()
	opts.CheckInterval = time.Second // the default
	opts.MaxTTL = time.Minute
	gws := []*lockcore.Redlock{gateway(t, srvs, opts), gateway(t, srvs, opts), gateway(t, srvs, opts)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var granted, refused atomic.Int64
	var wg sync.WaitGroup
	for i, g := range gws {
		wg.Go(func() {
			res := []string{"r0", "r1", "r2", "r3"}[i]
			for ctx.Err() == nil {
				l, err := g.Acquire(ctx, lockcore.AcquireRequest{Resource: res, TTL: 2 * time.Second})
				if err != nil {
					refused.Add(1)
					time.Sleep(10 * time.Millisecond)
					continue
				}
				granted.Add(1)
				_ = g.Release(ctx, lockcore.ReleaseRequest{Resource: res, LeaseID: l.ID})
			}
		})
	}
	for _, g := range gws {
		_ = g.Ready(ctx)
	}
	for round := range 5 {
		waitUntil(t, "A in service", func() bool { return inService(health(t, a)) })
		restartEmpty(t, a)
		restarted := time.Now()
		if !poll(30*time.Second, func() bool { return inService(health(t, a)) }) {
			t.Fatalf("round %d: A not back in service 30 s after its empty restart", round)
		}
		t.Logf("round %d: A back in service %v after its empty restart", round, time.Since(restarted).Round(time.Millisecond))
	}
	cancel()
	wg.Wait()
	t.Logf("%d granted, %d refused", granted.Load(), refused.Load())
}

// TestARollingRestartPacedByTimeUnderThreeGateways restarts the three
// nodes one after the other, 5 s apart and paced by nothing else (not by
// their recovery), under three gateways with traffic, and logs the longest
// window in which no acquisition succeeded. A node restarted while another
// still recovers leaves nobody to recover from; with recoveries that take
// less than the 5 s, the windows stay short. It fails only when the
// cluster is not serving again 30 s after the last restart: the figure is
// for the recovery issue's note, not a timed test.
func TestARollingRestartPacedByTimeUnderThreeGateways(t *testing.T) {
	srvs := redistest.StartN(t, 3, &redistest.Options{AOF: true})
	opts := recoverOptions()
	opts.CheckInterval = time.Second
	opts.MaxTTL = time.Minute
	gws := []*lockcore.Redlock{gateway(t, srvs, opts), gateway(t, srvs, opts), gateway(t, srvs, opts)}
	for _, g := range gws {
		_ = g.Ready(context.Background())
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	last, longest := time.Now(), time.Duration(0)
	var wg sync.WaitGroup
	for i, g := range gws {
		wg.Go(func() {
			res := []string{"r0", "r1", "r2"}[i]
			for ctx.Err() == nil {
				l, err := g.Acquire(ctx, lockcore.AcquireRequest{Resource: res, TTL: 2 * time.Second})
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				mu.Lock()
				longest, last = max(longest, time.Since(last)), time.Now()
				mu.Unlock()
				_ = g.Release(ctx, lockcore.ReleaseRequest{Resource: res, LeaseID: l.ID})
			}
		})
	}
	start := time.Now()
	for _, s := range srvs {
		s.Restart()
		time.Sleep(5 * time.Second)
	}
	if !poll(30*time.Second, func() bool {
		for _, s := range srvs {
			if !inService(health(t, s)) {
				return false
			}
		}
		return true
	}) {
		t.Fatal("not every node back in service 30 s after the last restart")
	}
	cancel()
	wg.Wait()
	t.Logf("rolling restart 5 s apart under three gateways: longest window without a grant %v, all back %v after the first restart",
		longest.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// TestOneGatewayRecoversANodeAtATime: three gateway replicas find one
// node restarted empty at once (they check every 20 ms), with thousands
// of locks to recover; one recovery runs, by whichever replica claimed it
// (rule 7e of package lockcore's doc), and the others wait for it rather
// than walk the sources again: each source is walked about once. Without
// the claim each replica walks every source.
func TestOneGatewayRecoversANodeAtATime(t *testing.T) {
	srvs := redistest.StartN(t, 3, &redistest.Options{AOF: true})
	opts := recoverOptions()
	opts.MaxTTL = time.Minute
	gws := []*lockcore.Redlock{gateway(t, srvs, opts), gateway(t, srvs, opts), gateway(t, srvs, opts)}
	ctx := context.Background()
	for _, g := range gws {
		if err := g.Ready(ctx); err != nil {
			t.Fatal(err)
		}
	}
	const locks = 6000
	var wg sync.WaitGroup
	for w := range 12 {
		wg.Go(func() {
			for i := w; i < locks; i += 12 {
				req := lockcore.AcquireRequest{Resource: fmt.Sprintf("held-%d", i), LeaseID: fmt.Sprintf("lease-of-held-%d-0123456789", i), TTL: time.Minute}
				for try := 0; ; try++ { // a busy machine can time a node out: the same lease again
					_, err := gws[w%3].Acquire(ctx, req)
					if err == nil {
						break
					}
					if try == 20 {
						t.Errorf("acquire %d: %v", i, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	b := srvs[1]
	// One walk of b as a recovery walks it: SCAN MATCH with its COUNT.
	walk := 0
	for cursor := "0"; ; {
		out, err := b.Do("SCAN", cursor, "MATCH", "lockgate:{*}:lock", "COUNT", "2000")
		if err != nil {
			t.Fatal(err)
		}
		walk++
		if cursor = strings.Fields(out)[0]; cursor == "0" {
			break
		}
	}
	if _, err := b.Do("CONFIG", "RESETSTAT"); err != nil {
		t.Fatal(err)
	}
	restartEmpty(t, srvs[0])
	waitUntil(t, "A back in service", func() bool { return inService(health(t, srvs[0])) })
	scans := 0
	for _, f := range strings.Split(b.Info("cmdstat_scan"), ",") {
		if v, ok := strings.CutPrefix(f, "calls="); ok {
			scans, _ = strconv.Atoi(v)
		}
	}
	t.Logf("%d locks: one walk of a source takes %d scan steps; the recovery took %d on it", locks, walk, scans)
	if scans > walk+walk/2+2 {
		t.Fatalf("the sources were walked %d scan steps for a recovery that takes %d: more than one replica recovered the node", scans, walk)
	}
}
