package redisnode_test

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
)

// copyAOF copies srv's append-only files aside and returns where.
func copyAOF(t *testing.T, srv *redistest.Server) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "aof")
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(srv.Dir(), "appendonlydir"))); err != nil {
		t.Fatal(err)
	}
	return dir
}

// restoreAOF kills srv and restarts it from the append-only files copied
// to dir: the node goes back to that older copy of its data.
func restoreAOF(t *testing.T, srv *redistest.Server, dir string) {
	t.Helper()
	srv.Kill()
	if err := os.RemoveAll(filepath.Join(srv.Dir(), "appendonlydir")); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(filepath.Join(srv.Dir(), "appendonlydir"), os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	srv.Restart()
}

// TestACopyTakenDuringAQuarantineDoesNotShortenTheNextOne: A is quarantined
// (it restarted empty) and a copy of its data is taken meanwhile. A is
// repaired, serves, grants lock L (on A and B; node 1's link is cut). A
// then comes back from the copy taken during its quarantine, and every
// gateway finds it Lost and quarantines it. That quarantine must last:
// when quarantine.lua kept the qsince the copy carries, it was over before
// it started, A was repaired at once and granted the lock it forgot while
// L was still valid (1.1 s more).
//
// Two kinds of copy: the AOF files (a restore, a lagging copy), and an RDB
// snapshot, Redis's default persistence (with "save 60 10000" the
// quarantine's 16384 slot marks trigger one; the node, killed before its
// next snapshot, restarts from it as a process that does not sync its
// writes, so it is Lost).
func TestACopyTakenDuringAQuarantineDoesNotShortenTheNextOne(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts *redistest.Options
		// take copies A's data during its quarantine and returns how to
		// bring A back to that copy.
		take func(t *testing.T, a *redistest.Server) (restore func())
	}{
		{"AOF copy", &redistest.Options{AOF: true}, func(t *testing.T, a *redistest.Server) func() {
			dir := copyAOF(t, a)
			return func() { restoreAOF(t, a, dir) }
		}},
		{"RDB snapshot", nil, func(t *testing.T, a *redistest.Server) func() {
			raw := connect(t, a)
			defer raw.Close()
			if err := raw.Client().Save(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			return func() {
				a.Kill()
				a.Restart() // from the snapshot
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srvs := redistest.StartN(t, 3, tc.opts)
			a, b := srvs[0], srvs[2] // node 1: the gateway's link to it is cut while L is taken
			var cut atomic.Bool
			rl := gatewayCutOff(t, srvs, &lockcore.Options{NodeTimeout: 200 * time.Millisecond, MinTTL: 400 * time.Millisecond,
				MaxTTL: lossMaxTTL, CheckInterval: 20 * time.Millisecond}, &cut)
			ctx := context.Background()
			cycle(t, rl, "warm")
			restartEmpty(t, a)
			waitUntil(t, "A quarantined, marks done", func() bool { h := health(t, a); return h.Quarantined && !h.Lost })
			restore := tc.take(t, a)
			waitUntil(t, "A repaired", func() bool { h := health(t, a); return h.Initialized && !h.Quarantined && !h.Lost })

			cut.Store(true)
			l := acquireWithin(t, rl, lockcore.AcquireRequest{Resource: "r", TTL: lossMaxTTL}, 3*time.Second)
			cut.Store(false)
			until := time.Now().Add(l.Validity)

			restore()
			var h lockcore.NodeHealth
			for time.Now().Before(until) {
				if h = health(t, a); h.Initialized && !h.Quarantined && !h.Lost {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Logf("A %v before L expires: %+v", time.Until(until), h)
			b.Pause()
			defer b.Resume()
			l2, err := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "r", TTL: 400 * time.Millisecond})
			if err == nil && time.Now().Before(until) {
				t.Fatalf("L (token %d) still valid for %v, yet granted %+v by A (which forgot L) and node 1", l.Token, time.Until(until), l2)
			}
			t.Logf("acquire: %v", err)
		})
	}
}
