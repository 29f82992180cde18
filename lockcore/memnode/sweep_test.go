package memnode_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
	"github.com/lockgate/lockgate/lockcore/nodetest"
)

func grant(t testing.TB, n *memnode.Node, name string, ttl time.Duration) {
	t.Helper()
	rep, err := n.Acquire(context.Background(), lockcore.NodeAcquire{Resource: name, Lease: "lease-" + name, TTL: ttl})
	if err != nil || rep.Status != lockcore.StatusGranted {
		t.Fatalf("acquire %s: %+v %v", name, rep, err)
	}
}

// Expired locks are forgotten by the node itself, without any request:
// 20,000 of them are gone from its map and both indexes within a second of
// expiring, and the locks still held stay.
func TestExpiredLocksAreForgottenWithoutRequests(t *testing.T) {
	t.Parallel()
	clock := nodetest.NewClock(time.Unix(1_700_000_000, 0))
	n := memnode.New(&memnode.Options{Now: clock.Now})
	t.Cleanup(n.Close)
	const expiring, kept = 20_000, 10
	for i := range expiring {
		grant(t, n, fmt.Sprintf("expiring-%05d", i), time.Second)
	}
	for i := range kept {
		grant(t, n, fmt.Sprintf("kept-%d", i), time.Hour)
	}
	if l, x, h := memnode.Stored(n); l != expiring+kept || x != l || h != l {
		t.Fatalf("stored %d, %d by name, %d by expiry; want %d", l, x, h, expiring+kept)
	}
	// Locks extended before they expire stay, and do not hold up the sweep
	// of the others.
	const extended = 100
	for i := range extended {
		name := fmt.Sprintf("expiring-%05d", i)
		if rep, err := n.Extend(t.Context(), name, "lease-"+name, time.Hour, 0); err != nil || rep.Status != lockcore.StatusOK {
			t.Fatalf("extend %s: %+v %v", name, rep, err)
		}
	}
	const left = kept + extended
	clock.Advance(time.Second)
	expired := time.Now()
	for {
		l, x, h := memnode.Stored(n)
		if l == left && x == left && h == left {
			break
		}
		if time.Since(expired) > time.Second {
			t.Fatalf("a second after expiring: %d stored, %d by name, %d by expiry; want %d", l, x, h, left)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("20,000 expired locks forgotten %v after expiring", time.Since(expired).Round(time.Millisecond))
	names, next, err := n.ScanLocks(t.Context(), "", "", 1000)
	if err != nil || next != "" || len(names) != left || names[0] != "expiring-00000" || !strings.HasPrefix(names[left-1], "kept-") {
		t.Errorf("ScanLocks after the sweep: %v %q %v", names, next, err)
	}
	for _, name := range names {
		if rep, err := n.Release(t.Context(), name, "lease-"+name, 0); err != nil || rep.Status != lockcore.StatusOK {
			t.Fatalf("release %s: %+v %v", name, rep, err)
		}
	}
	if l, x, h := memnode.Stored(n); l+x+h != 0 {
		t.Errorf("after the releases: %d stored, %d by name, %d by expiry", l, x, h)
	}
}

// ScanLocks walks the locks under a prefix in name order, a step of count
// names at a time, leaving out expired ones and names outside the prefix.
func TestScanLocksWalksInNameOrder(t *testing.T) {
	t.Parallel()
	clock := nodetest.NewClock(time.Unix(1_700_000_000, 0))
	n := memnode.New(&memnode.Options{Now: clock.Now})
	t.Cleanup(n.Close)
	var want []string
	for i := range 50 {
		name := fmt.Sprintf("app:%02d", i)
		ttl := time.Hour
		if i%7 == 3 {
			ttl = time.Second // expired below, and not swept: the walk skips it
		} else {
			want = append(want, name)
		}
		grant(t, n, name, ttl)
	}
	for _, other := range []string{"ap", "apo", "app", "aq:1", "b", "z"} {
		grant(t, n, other, time.Hour)
	}
	n.Close() // no sweeper: the walk itself must leave the expired locks out
	clock.Advance(time.Second)
	for _, count := range []int{1, 3, 7, 1000} { // 1000: more than a step examines
		var got []string
		cursor := ""
		for steps := 0; ; steps++ {
			names, next, err := n.ScanLocks(t.Context(), "app:", cursor, count)
			if err != nil {
				t.Fatal(err)
			}
			if len(names) > count {
				t.Fatalf("count %d: a step of %d names", count, len(names))
			}
			got = append(got, names...)
			if next == "" {
				break
			}
			if steps > 100 {
				t.Fatalf("count %d: the walk never ends", count)
			}
			cursor = next
		}
		if !slices.Equal(got, want) {
			t.Errorf("count %d: walked %v, want %v", count, got, want)
		}
	}
	all, next, err := n.ScanLocks(t.Context(), "", "", 1000)
	if err != nil || next != "" || len(all) != len(want)+6 || !slices.IsSorted(all) {
		t.Errorf("the whole walk: %v %q %v", all, next, err)
	}
	if names, _, _ := n.ScanLocks(t.Context(), "app:", "app:10", 2); !slices.Equal(names, []string{"app:11", "app:12"}) {
		t.Errorf("a step past app:10: %v", names)
	}
}
