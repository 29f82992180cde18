package redisnode_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
)

// TestANodeThatAllowsDebugReloadDoesNotServe: DEBUG RELOAD NOSAVE replaces
// a node's data with an older snapshot under the same server process, so
// the record, which names the process, cannot see it. A node that allows
// DEBUG commands (enable-debug-command yes or local) therefore refuses to
// serve, as one that may evict keys does. The attack runs as well: L1 is
// taken, A reloads a snapshot from before it, and L2 is asked for while B
// is paused. With the refusal removed, A served, L1 was granted on A and
// B, and after the reload A and C granted L2 while L1 held.
func TestANodeThatAllowsDebugReloadDoesNotServe(t *testing.T) {
	a, b, g, cut, h := withSettingOnA(t, recoverOptions(), "--enable-debug-command", "yes", "DEBUG RELOAD")

	ctx := context.Background()
	ra := connect(t, a).Client()
	if err := ra.Save(ctx).Err(); err != nil { // the snapshot DEBUG RELOAD NOSAVE will load
		t.Fatal(err)
	}
	// L1 on A and B when A serves; on B and C when it refuses.
	cut.Store(inService(h))
	l1 := acquireWithin(t, g, lockcore.AcquireRequest{Resource: "r", TTL: recoverTTL}, 3*time.Second)
	cut.Store(false)
	if err := ra.Do(ctx, "DEBUG", "RELOAD", "NOSAVE").Err(); err != nil {
		t.Fatal(err)
	}
	if l2 := secondHolder(t, g, b, "r", l1); l2 != nil {
		t.Fatalf("L2 granted (token %d) after A's DEBUG RELOAD while L1 (token %d) holds", l2.Token, l1.Token)
	}
}

// TestANodeThatFreesItsBacklogDoesNotServe: a node made a replica of a
// server holding an older copy of its own data, then promoted again,
// shows the change in its replication id only until it frees its
// backlog (repl-backlog-ttl without replicas); after that it looks as it
// did, with its older data, to a gateway that did not check in between.
// A node whose repl-backlog-ttl is not 0 therefore refuses to serve. The
// attack runs as well, with no check during it (the gateway checks once
// an hour): with the refusal removed, A served, L1 was granted on A and
// B, and after the failback A and C granted L2 while L1 held.
func TestANodeThatFreesItsBacklogDoesNotServe(t *testing.T) {
	opts := recoverOptions()
	opts.CheckInterval = time.Hour
	opts.MaxTTL = time.Minute // the failback below takes seconds
	a, b, g, cut, h := withSettingOnA(t, opts, "--repl-backlog-ttl", "1", "repl-backlog-ttl")

	// An older copy of A: a server started from A's snapshot.
	ctx := context.Background()
	if _, err := a.Do("SAVE"); err != nil {
		t.Fatal(err)
	}
	old := redistest.Start(t, nil)
	old.Kill()
	copyFile(t, filepath.Join(a.Dir(), "dump.rdb"), filepath.Join(old.Dir(), "dump.rdb"))
	old.Restart()

	cut.Store(inService(h)) // L1 on A and B when A serves; on B and C when it refuses
	l1 := acquireWithin(t, g, lockcore.AcquireRequest{Resource: "r", TTL: opts.MaxTTL}, 3*time.Second)
	cut.Store(false)

	// A becomes a replica of the older copy, is promoted again, and frees
	// its backlog.
	host, port, _ := strings.Cut(old.Addr(), ":")
	if _, err := a.Do("REPLICAOF", host, port); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "A synced from the older copy", func() bool { return a.Info("master_link_status") == "up" })
	if _, err := a.Do("REPLICAOF", "NO", "ONE"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "A freed its backlog", func() bool { return strings.Trim(a.Info("master_replid2"), "0") == "" })
	if got := connect(t, a).Client().HGet(ctx, "lockgate:{r}:lock", "lease").Val(); got == l1.ID {
		t.Fatalf("A still holds L1 after its failback to the older copy")
	}

	if l2 := secondHolder(t, g, b, "r", l1); l2 != nil {
		t.Fatalf("L2 granted (token %d) after A's unseen failback while L1 (token %d) holds", l2.Token, l1.Token)
	}
}

// copyFile copies the file at from to to.
func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// withSettingOnA starts nodes A, C and B (C is node 1, whose link cut
// cuts), A with setting set to value, initializes them, and checks that a
// gateway over them (opts, returned with cut) finds A refusing to serve,
// its reason naming want; it returns A's health as found.
func withSettingOnA(t *testing.T, opts *lockcore.Options, setting, value, want string) (a, b *redistest.Server, g *lockcore.Redlock, cut *atomic.Bool, h lockcore.NodeHealth) {
	t.Helper()
	a = redistest.Start(t, &redistest.Options{Args: []string{setting, value}})
	c := redistest.Start(t, nil)
	b = redistest.Start(t, nil)
	srvs := []*redistest.Server{a, c, b}
	for _, s := range srvs {
		initializeServer(t, s)
	}
	cut = new(atomic.Bool)
	g = gatewayCutOff(t, srvs, opts, cut)
	if err := g.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	if h = health(t, a); !strings.Contains(h.Refusing, want) {
		t.Errorf("A, with %s %s: %+v; want it refusing to serve", setting, value, h)
	}
	return a, b, g, cut, h
}
