package lockcore_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
	"github.com/lockgate/lockgate/lockcore/nodetest"
)

// pageFaults is a memnode whose scan steps past the first fail: each
// cursor's first step in a walk when once is set (a slow moment), every step when
// always is set (a source that cannot be read to its end). failed counts
// the steps failed.
type pageFaults struct {
	*memnode.Node
	once, always atomic.Bool
	seen         sync.Map // cursors stepped from
	failed       atomic.Int64
}

func (p *pageFaults) ScanLocks(ctx context.Context, prefix, cursor string, count int) ([]string, string, error) {
	if cursor == "" {
		p.seen.Clear() // a walk begins: its steps are new
	} else {
		_, again := p.seen.LoadOrStore(cursor, true)
		if p.always.Load() || (p.once.Load() && !again) {
			p.failed.Add(1)
			return nil, "", errors.New("test: this scan step fails")
		}
	}
	return p.Node.ScanLocks(ctx, prefix, cursor, count)
}

// TestARecoveryReadsEverySourceToTheEnd: a recovery reads each source page
// by page (memnode: 256 names a step, so 1,000 locks are several pages). A
// page whose read fails once is read again from its cursor, and the node
// recovers with every lock (each cursor's first step fails here, so a
// recovery that began the walk again would never end); a source whose walk cannot go on past a page
// does not count, so with 3 nodes the node stays quarantined, whatever it
// took in from the pages read, until the source can be read to the end.
func TestARecoveryReadsEverySourceToTheEnd(t *testing.T) {
	for _, tc := range []struct {
		name   string
		always bool
	}{
		{"a page whose step fails once is read again", false},
		{"a source read only in part does not count", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mems := []*memnode.Node{memnode.New(nil), memnode.New(nil), memnode.New(nil)}
			flaky := &pageFaults{Node: mems[1]}
			rl, err := lockcore.New([]lockcore.Node{mems[0], flaky, mems[2]}, &lockcore.Options{CheckInterval: 10 * time.Millisecond, NodeTimeout: time.Second, MinTTL: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(rl.Close)
			const n = 1000
			leases := make([]string, n)
			for k := range leases {
				leases[k] = nodetest.MustAcquire(t, rl, lockcore.AcquireRequest{Resource: "paged-" + strconv.Itoa(k), TTL: time.Minute}).ID
			}
			flaky.once.Store(!tc.always)
			flaky.always.Store(tc.always)
			mems[0].LoseData()
			holdsAll := func() bool {
				for k, lease := range leases {
					if l, err := mems[0].Inspect(context.Background(), "paged-"+strconv.Itoa(k)); err != nil || l.Lease != lease {
						return false
					}
				}
				return true
			}
			if tc.always {
				serving := func() bool { return rl.NodeReports()[0].State == lockcore.NodeServing }
				waitFor(t, "node 0 found lost", func() bool { return !serving() })
				waitFor(t, "three recoveries failed on the source's pages, or node 0 serving", func() bool {
					return flaky.failed.Load() >= 3*2 || serving()
				})
				if st := rl.NodeReports()[0]; serving() {
					t.Fatalf("node 0 serves after recoveries that could not read a source to its end: %+v", st)
				}
				flaky.always.Store(false)
			}
			waitFor(t, "node 0 back in service with every lock", holdsAll)
		})
	}
}

// waitFor polls cond for up to 30 s, and fails t if it never held.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("still not %s after 30 s", what)
		}
	}
}
