package lockcore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
	"github.com/lockgate/lockgate/lockcore/nodetest"
)

// WatchReleases and WatchAcquisitions succeed only with subscriptions on
// enough nodes (N - quorum + 1) that every change made on a quorum is
// announced by one of them; then an acquisition and a release on another
// Redlock over the same nodes are heard.
func TestWatchesNeedEnoughNodesToHearEveryChange(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		down int
		ok   bool
	}{{0, true}, {1, true}, {2, false}} {
		nodes := make([]lockcore.Node, 3)
		inner := make([]lockcore.Node, 3)
		for i := range nodes {
			inner[i] = memnode.New(nil)
			f := nodetest.NewFaulty(inner[i])
			if i < tc.down {
				f.SetDown(errors.New("down"))
			}
			nodes[i] = f
		}
		watcher, err := lockcore.New(nodes, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer watcher.Close()
		acquired, released := make(chan struct{}, 8), make(chan struct{}, 8)
		stopA, errA := watcher.WatchAcquisitions(ctx, "r", func() { acquired <- struct{}{} })
		stopR, errR := watcher.WatchReleases(ctx, "r", func() { released <- struct{}{} })
		if !tc.ok {
			if !errors.Is(errA, lockcore.ErrNotAnnounced) || !errors.Is(errR, lockcore.ErrNotAnnounced) {
				t.Fatalf("%d of 3 nodes down: WatchAcquisitions %v, WatchReleases %v; want ErrNotAnnounced", tc.down, errA, errR)
			}
			continue
		}
		if errA != nil || errR != nil {
			t.Fatalf("%d of 3 nodes down: WatchAcquisitions %v, WatchReleases %v; want both in place", tc.down, errA, errR)
		}
		defer stopA()
		defer stopR()
		// Another replica, reaching the nodes that the watcher cannot.
		other, err := lockcore.New(inner, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		l := nodetest.MustAcquire(t, other, lockcore.AcquireRequest{Resource: "r", TTL: time.Minute})
		<-acquired
		if err := other.Release(ctx, lockcore.ReleaseRequest{Resource: "r", LeaseID: l.ID}); err != nil {
			t.Fatal(err)
		}
		<-released
	}
}

// A Redlock over nodes that do not announce grants cannot watch
// acquisitions.
func TestWatchAcquisitionsNeedsAcquireWatchers(t *testing.T) {
	nodes := make([]lockcore.Node, 3)
	for i := range nodes {
		n := memnode.New(nil)
		nodes[i] = releasesOnly{n, n}
	}
	rl, err := lockcore.New(nodes, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()
	if _, err := rl.WatchAcquisitions(context.Background(), "r", func() {}); !errors.Is(err, lockcore.ErrNotAnnounced) {
		t.Fatalf("WatchAcquisitions = %v, want ErrNotAnnounced", err)
	}
	stop, err := rl.WatchReleases(context.Background(), "r", func() {})
	if err != nil {
		t.Fatalf("WatchReleases = %v, want in place", err)
	}
	stop()
}

// releasesOnly is a node that announces releases but not grants.
type releasesOnly struct {
	lockcore.Node
	lockcore.Watcher
}
