package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/api"
	"github.com/lockgate/lockgate/internal/freeport"
	"github.com/lockgate/lockgate/internal/redistest"
)

// cmdline is /proc/pid/cmdline, which every user of the machine can read,
// its arguments joined by spaces.
func cmdline(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	return string(bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
}

// The Redis password (-redis-password-file), the bearer token
// (--token-file) and the lease id (--lease-id-file, LOCKGATE_LEASE_ID) reach
// the gateway and the CLI without appearing in the command line of either
// process, while they run.
func TestNoSecretOnTheCommandLine(t *testing.T) {
	const (
		password = "redis-s3cret-pw"
		token    = "bearer-s3cret-0123456789abcdef"
		leaseID  = "lease-s3cret-0123456789abcdef"
	)
	dir := t.TempDir()
	write := func(name, content string) string {
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	pwFile, tokFile, idFile := write("pw", password+"\n"), write("token", token+"\n"), write("lease", leaseID+"\n")
	authFile := write("auth", token+" * *\n")
	srv := redistest.Start(t, nil)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	if err := rdb.ConfigSet(context.Background(), "requirepass", password).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.Close()

	addr := freeport.Addr(t)
	base := "http://" + addr
	gw := startLockgate(t, "-addr", addr, "-redis", srv.URL(), "-redis-password-file", pwFile, "-auth-file", authFile,
		"-node-timeout", "150ms", "-min-ttl", "500ms")
	g := &gateway{base: base, log: gw.stderr}
	auth := []string{"Authorization", "Bearer " + token}
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(gw.stderr.String(), "lockgate listening") {
		if time.Now().After(deadline) {
			t.Fatalf("the gateway did not start:\n%s", gw.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var held answer
	for {
		// 201 only once the gateway has authenticated to Redis with the
		// password from the file.
		if held = g.do(t, http.MethodPut, "/locks/secret-lock", `{"ttl_ms":30000}`, auth...); held.status == http.StatusCreated {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway never granted a lock: %d %s\n%s", held.status, held.body, gw.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var holder api.Lease
	if err := json.Unmarshal([]byte(held.body), &holder); err != nil {
		t.Fatal(err)
	}

	// The CLI waits for the lock with its own lease id from a file.
	cli := startLockgate(t, "acquire", "--gateway", base, "--token-file", tokFile, "--lease-id-file", idFile, "--wait", "30s", "secret-lock")
	if !g.waiters(t, 1, 20*time.Second) {
		t.Fatalf("the CLI never waited; stderr %s", cli.stderr)
	}
	for name, pid := range map[string]int{"gateway": gw.cmd.Process.Pid, "lockgate acquire": cli.cmd.Process.Pid} {
		line := cmdline(t, pid)
		for _, secret := range []string{password, token, leaseID} {
			if strings.Contains(line, secret) {
				t.Errorf("the %s's command line shows a secret: %s", name, line)
			}
		}
	}
	if a := g.do(t, http.MethodDelete, "/locks/secret-lock", "", append(auth, "Lease-Id", holder.LeaseID)...); a.status != http.StatusNoContent {
		t.Fatalf("release: %d %s", a.status, a.body)
	}
	if code := cli.wait(t, 20*time.Second); code != exitOK {
		t.Fatalf("acquire: exit %d; stderr %s", code, cli.stderr)
	}
	var got api.Lease
	if err := json.Unmarshal([]byte(cli.stdout.String()), &got); err != nil || got.LeaseID != leaseID {
		t.Fatalf("acquire printed %q (%v), want the lease id from the file", cli.stdout, err)
	}

	// release with the lease id from the environment.
	rel := startLockgateEnv(t, []string{"LOCKGATE_LEASE_ID=" + leaseID}, "release", "--gateway", base, "--token-file", tokFile, "secret-lock")
	if line := cmdline(t, rel.cmd.Process.Pid); strings.Contains(line, leaseID) {
		t.Errorf("release's command line shows the lease id: %s", line)
	}
	if code := rel.wait(t, 20*time.Second); code != exitOK {
		t.Fatalf("release: exit %d; stderr %s", code, rel.stderr)
	}
}
