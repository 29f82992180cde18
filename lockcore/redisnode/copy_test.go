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

// TestACopyOfAQuarantineIsQuarantinedAnew: a quarantine counts only for the
// server process it was begun for (qrid). A is quarantined (restarted
// empty, node 2 paused so it cannot recover), a copy of its data is taken,
// it recovers, grants L (on A and node 2; node 1's link is cut) and comes
// back from the copy while node 2 is paused again: it cannot recover, and
// the copy carries a quarantine begun long enough ago to be over. Taken as
// A's quarantine, it would put A in service at once without L, and A and
// node 1 would grant L again while it is valid.
func TestACopyOfAQuarantineIsQuarantinedAnew(t *testing.T) {
	srvs := redistest.StartN(t, 3, &redistest.Options{AOF: true})
	a, b := srvs[0], srvs[2]
	var cut atomic.Bool
	// L lives 4 s: long enough for a repair at the end of the copy's
	// quarantine to finish while L is valid, were that quarantine taken.
	const maxTTL = 4 * time.Second
	opts := &lockcore.Options{NodeTimeout: 200 * time.Millisecond, MinTTL: 400 * time.Millisecond,
		MaxTTL: maxTTL, CheckInterval: 20 * time.Millisecond}
	rl := gatewayCutOff(t, srvs, opts, &cut)
	cycle(t, rl, "warm")
	b.Pause()
	restartEmpty(t, a)
	waitUntil(t, "A quarantined, marks done", func() bool { h := health(t, a); return h.Quarantined && !h.Lost })
	old := copyAOF(t, a)
	copied := time.Now()
	b.Resume()
	waitUntil(t, "A recovered", func() bool { return inService(health(t, a)) })
	// The copy's quarantine is to look over by the time A is back to it.
	time.Sleep(time.Until(copied.Add(2 * maxTTL)))

	cut.Store(true)
	h := &lockHistory{t0: time.Now()} // checked with the fenced mutex model
	var l *lockcore.Lease
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var err error
		if l, err = h.grant(rl, 0, lockcore.AcquireRequest{Resource: "r", TTL: maxTTL}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("set-up: L not granted within 3s: %v", err)
		}
	}
	cut.Store(false)
	until := time.Now().Add(l.Validity)
	b.Pause()
	defer b.Resume()
	restoreAOF(t, a, old)
	for time.Now().Before(until) {
		l2, err := h.grant(rl, 1, lockcore.AcquireRequest{Resource: "r", TTL: 400 * time.Millisecond})
		if err == nil && time.Now().Before(until) {
			t.Errorf("L (token %d) still valid for %v, yet granted %+v by A (back to a copy of a quarantine) and node 1",
				l.Token, time.Until(until), l2)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	h.linearizable(t)
	t.Logf("A after L's validity: %+v; %+v", health(t, a), rl.NodeReports()[0])
}
