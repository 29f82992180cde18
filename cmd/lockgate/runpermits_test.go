package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// run --permits K: K commands run at once, each holding its own permit
// (LOCKGATE_PERMIT); one more is refused (75) and one with another K is
// refused as a usage error (64); the permits are given back when the
// commands exit.
func TestRunWithPermits(t *testing.T) {
	g, _ := clientGateway(t)
	dir := t.TempDir()
	release := filepath.Join(dir, "go")
	script := `printf '%s|%s' "$LOCKGATE_RESOURCE" "$LOCKGATE_PERMIT"; while [ ! -e ` + release + ` ]; do sleep 0.01; done`
	holders := []*lockgateProc{
		startLockgate(t, runArgs(g, "batch", "--permits", "2", "--ttl", "2s", "--", "sh", "-c", script)...),
		startLockgate(t, runArgs(g, "batch", "--permits", "2", "--ttl", "2s", "--", "sh", "-c", script)...),
	}
	seen := map[string]bool{}
	deadline := time.Now().Add(30 * time.Second)
	for len(seen) < 2 {
		seen = map[string]bool{}
		for _, p := range holders {
			if s := p.stdout.String(); s != "" {
				seen[s] = true
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the two commands did not both start with a permit: %v", seen)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !seen["batch|0"] || !seen["batch|1"] {
		t.Fatalf("the commands saw %v, want permits 0 and 1 of batch", seen)
	}
	if m := g.do(t, http.MethodGet, "/metrics", ""); !strings.Contains(m.body, "\nlockgate_permits_in_use 2\n") {
		t.Errorf("/metrics while two permits are held has no lockgate_permits_in_use 2")
	}

	marker := filepath.Join(dir, "ran")
	third := startLockgate(t, runArgs(g, "batch", "--permits", "2", "--", "touch", marker)...)
	if got := third.wait(t, 20*time.Second); got != exitTaken {
		t.Fatalf("a third: exit %d, want %d; stderr: %s", got, exitTaken, third.stderr)
	}
	other := startLockgate(t, runArgs(g, "batch", "--permits", "3", "--", "touch", marker)...)
	if got := other.wait(t, 20*time.Second); got != exitUsage {
		t.Fatalf("another K: exit %d, want %d; stderr: %s", got, exitUsage, other.stderr)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a command ran without a permit")
	}

	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range holders {
		if got := p.wait(t, 20*time.Second); got != 0 {
			t.Fatalf("holder exit %d; stderr: %s", got, p.stderr)
		}
	}
	if a := g.do(t, http.MethodGet, "/semaphores/batch", ""); a.status != http.StatusNotFound {
		t.Fatalf("after the commands: GET %d %s, want 404 (permits given back)", a.status, a.body)
	}
}
