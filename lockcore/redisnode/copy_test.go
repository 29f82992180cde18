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

// TestACopyTakenDuringAQuarantineDoesNotShortenTheNextOne: A is quarantined
// (it restarted empty) and a copy of its data is taken meanwhile. A is
// repaired, serves, grants lock L (on A and B; C paused). A then comes back
// from the copy taken during its quarantine. The gateway sees the heartbeat
// go back (Lost) and quarantines A, and the quarantine must last: when
// quarantine.lua kept the qsince the copy carries, the new quarantine was
// over before it started, A was repaired at once and granted the lock it
// forgot while L was still valid.
func TestACopyTakenDuringAQuarantineDoesNotShortenTheNextOne(t *testing.T) {
	srvs := redistest.StartN(t, 3, &redistest.Options{AOF: true})
	a, b := srvs[0], srvs[2] // node 1: the gateway's link to it is cut while L is taken
	var cut atomic.Bool
	rl := gatewayCutOff(t, srvs, &lockcore.Options{NodeTimeout: 200 * time.Millisecond, MinTTL: 400 * time.Millisecond,
		MaxTTL: lossMaxTTL, CheckInterval: 20 * time.Millisecond}, &cut)
	ctx := context.Background()
	cycle(t, rl, "warm")
	restartEmpty(t, a)
	waitUntil(t, "A quarantined, marks done", func() bool { h := health(t, a); return h.Quarantined && !h.Lost })
	old := filepath.Join(t.TempDir(), "aof")
	if err := os.CopyFS(old, os.DirFS(filepath.Join(a.Dir(), "appendonlydir"))); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "A repaired", func() bool { h := health(t, a); return h.Initialized && !h.Quarantined && !h.Lost })
	time.Sleep(100 * time.Millisecond)

	cut.Store(true)
	l := acquireWithin(t, rl, lockcore.AcquireRequest{Resource: "r", TTL: lossMaxTTL}, 3*time.Second)
	cut.Store(false)
	t.Logf("L granted on A and B (nodes 0 and 2), token %d, validity %v", l.Token, l.Validity)
	until := time.Now().Add(l.Validity)

	a.Kill()
	if err := os.RemoveAll(filepath.Join(a.Dir(), "appendonlydir")); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(filepath.Join(a.Dir(), "appendonlydir"), os.DirFS(old)); err != nil {
		t.Fatal(err)
	}
	a.Restart()
	var h lockcore.NodeHealth
	for time.Now().Before(until) {
		if h = health(t, a); h.Initialized && !h.Quarantined && !h.Lost {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("A %v after coming back from the copy: %+v", time.Until(until), h)
	b.Pause()
	defer b.Resume()
	l2, err := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "r", TTL: 400 * time.Millisecond})
	if err == nil && time.Now().Before(until) {
		t.Fatalf("L (token %d) still valid for %v, yet granted %+v by A (which forgot L) and node 1", l.Token, time.Until(until), l2)
	}
	t.Logf("acquire: %v", err)
}

// TestASnapshotTakenDuringAQuarantineDoesNotShortenTheNextOne: the same with RDB
// snapshots only, Redis's default persistence: a snapshot is saved while A
// is quarantined (with the default "save 60 10000", the quarantine's 16384
// slot marks trigger one), A is repaired, grants L, and is killed before
// its next snapshot. It restarts from the snapshot: a new server process
// that does not sync its writes, so every gateway finds it Lost, and the
// quarantine that follows must not take the snapshot's qsince for its own.
func TestASnapshotTakenDuringAQuarantineDoesNotShortenTheNextOne(t *testing.T) {
	srvs := redistest.StartN(t, 3, nil)
	a, b := srvs[0], srvs[2]
	var cut atomic.Bool
	rl := gatewayCutOff(t, srvs, &lockcore.Options{NodeTimeout: 200 * time.Millisecond, MinTTL: 400 * time.Millisecond,
		MaxTTL: lossMaxTTL, CheckInterval: 20 * time.Millisecond}, &cut)
	ctx := context.Background()
	cycle(t, rl, "warm")
	restartEmpty(t, a)
	waitUntil(t, "A quarantined, marks done", func() bool { h := health(t, a); return h.Quarantined && !h.Lost })
	raw := connect(t, a)
	if err := raw.Client().Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	waitUntil(t, "A repaired", func() bool { h := health(t, a); return h.Initialized && !h.Quarantined && !h.Lost })
	cut.Store(true)
	l := acquireWithin(t, rl, lockcore.AcquireRequest{Resource: "r", TTL: lossMaxTTL}, 3*time.Second)
	cut.Store(false)
	until := time.Now().Add(l.Validity)
	a.Kill()
	a.Restart() // from the snapshot
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
}
