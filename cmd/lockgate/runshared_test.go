package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// run --shared: two commands run at once, each with a reader's hold
// (LOCKGATE_MODE shared); a command with --exclusive is refused (75) while
// they run; the holds are released when the commands exit, and then
// --exclusive runs. --shared with --exclusive, or with --permits, is a
// usage error (64).
func TestRunShared(t *testing.T) {
	g, _ := clientGateway(t)
	dir := t.TempDir()
	release := filepath.Join(dir, "go")
	script := `printf '%s|%s' "$LOCKGATE_RESOURCE" "$LOCKGATE_MODE"; while [ ! -e ` + release + ` ]; do sleep 0.01; done`
	readers := []*lockgateProc{
		startLockgate(t, runArgs(g, "table", "--shared", "--ttl", "2s", "--", "sh", "-c", script)...),
		startLockgate(t, runArgs(g, "table", "--shared", "--ttl", "2s", "--", "sh", "-c", script)...),
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, p := range readers {
		for p.stdout.String() == "" {
			if time.Now().After(deadline) {
				t.Fatal("the two readers did not both start")
			}
			time.Sleep(5 * time.Millisecond)
		}
		if got := p.stdout.String(); got != "table|shared" {
			t.Fatalf("a reader saw %q, want table|shared", got)
		}
	}
	marker := filepath.Join(dir, "wrote")
	writer := startLockgate(t, runArgs(g, "table", "--exclusive", "--", "touch", marker)...)
	if got := writer.wait(t, 20*time.Second); got != exitTaken {
		t.Fatalf("a writer beside readers: exit %d, want %d; stderr: %s", got, exitTaken, writer.stderr)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the writer's command ran beside the readers")
	}
	for _, args := range [][]string{{"--shared", "--exclusive"}, {"--shared", "--permits", "2"}} {
		p := startLockgate(t, runArgs(g, "table", append(args, "--", "true")...)...)
		if got := p.wait(t, 20*time.Second); got != exitUsage {
			t.Fatalf("%s: exit %d, want %d", strings.Join(args, " "), got, exitUsage)
		}
	}
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range readers {
		if got := p.wait(t, 20*time.Second); got != 0 {
			t.Fatalf("reader exit %d; stderr: %s", got, p.stderr)
		}
	}
	if a := g.do(t, http.MethodGet, "/rwlocks/table", ""); a.status != http.StatusNotFound {
		t.Fatalf("after the readers: GET %d %s, want 404 (holds released)", a.status, a.body)
	}
	writer = startLockgate(t, runArgs(g, "table", "--exclusive", "--", "touch", marker)...)
	if got := writer.wait(t, 20*time.Second); got != 0 {
		t.Fatalf("the writer once the readers left: exit %d; stderr: %s", got, writer.stderr)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatal("the writer's command did not run")
	}
}
