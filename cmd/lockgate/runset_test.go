package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// run --set: the command runs holding every member, and gets the set's
// name and each member's token (LOCKGATE_FENCING_TOKENS); a set that
// overlaps is refused (75) and leaves its free member free; with --wait it
// runs once the first command exits. --set with --lock, --permits or
// --shared is a usage error (64).
func TestRunSet(t *testing.T) {
	g, _ := clientGateway(t)
	dir := t.TempDir()
	release := filepath.Join(dir, "go")
	script := `printf '%s|%s|%s' "$LOCKGATE_RESOURCE" "$LOCKGATE_FENCING_TOKENS" "$LOCKGATE_FENCING_TOKEN"; while [ ! -e ` + release + ` ]; do sleep 0.01; done`
	base := []string{"run", "--gateway", g.base}
	first := startLockgate(t, append(base, "--set", "orders,invoices", "--ttl", "2s", "--", "sh", "-c", script)...)
	deadline := time.Now().Add(30 * time.Second)
	for first.stdout.String() == "" {
		if time.Now().After(deadline) {
			t.Fatalf("the first command did not start; stderr: %s", first.stderr)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := first.stdout.String(); !regexp.MustCompile(`^invoices,orders\|invoices=[1-9][0-9]*,orders=[1-9][0-9]*\|$`).MatchString(got) {
		t.Fatalf("the command saw %q, want the set, its tokens and no single token", got)
	}
	marker := filepath.Join(dir, "ran")
	refused := startLockgate(t, append(base, "--set", "shipping,orders", "--", "touch", marker)...)
	if got := refused.wait(t, 20*time.Second); got != exitTaken {
		t.Fatalf("an overlapping set: exit %d, want %d; stderr: %s", got, exitTaken, refused.stderr)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the overlapping set's command ran")
	}
	if a := g.do(t, http.MethodGet, "/locks/shipping", ""); a.status != http.StatusNotFound {
		t.Fatalf("shipping after the refused set: GET %d %s, want 404", a.status, a.body)
	}
	for _, args := range [][]string{{"--lock", "x"}, {"--permits", "2"}, {"--shared"}} {
		p := startLockgate(t, append(append(base, "--set", "a,b"), append(args, "--", "true")...)...)
		if got := p.wait(t, 20*time.Second); got != exitUsage {
			t.Fatalf("--set with %s: exit %d, want %d", strings.Join(args, " "), got, exitUsage)
		}
	}
	waiter := startLockgate(t, append(base, "--set", "shipping,orders", "--wait", "20s", "--", "touch", marker)...)
	time.Sleep(300 * time.Millisecond)
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := first.wait(t, 20*time.Second); got != 0 {
		t.Fatalf("first exit %d; stderr: %s", got, first.stderr)
	}
	if got := waiter.wait(t, 20*time.Second); got != 0 {
		t.Fatalf("the waiting set: exit %d; stderr: %s", got, waiter.stderr)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatal("the waiting set's command did not run")
	}
	if a := g.do(t, http.MethodGet, "/locksets/orders,invoices,shipping", ""); a.status != http.StatusNotFound {
		t.Fatalf("after both commands: GET %d %s, want 404 (sets released)", a.status, a.body)
	}
}

// The largest set, 64 names of 200 characters (a path of 12,873 bytes),
// fits the default -max-header-bytes (16384) with a bearer token of 4096
// characters beside it, and is taken and released through the gateway.
func TestTheLargestLockSetFitsTheDefaultHeaderLimit(t *testing.T) {
	g, _ := clientGateway(t)
	members := make([]string, 64)
	for i := range members {
		members[i] = fmt.Sprintf("%03d", i) + strings.Repeat("m", 197)
	}
	path := "/locksets/" + strings.Join(members, ",")
	// No -auth-file: the token is ignored, but its bytes count against the limit.
	bearer := "Bearer " + strings.Repeat("t", 4096)
	a := g.do(t, http.MethodPut, path, "", "Authorization", bearer)
	if a.status != http.StatusCreated {
		t.Fatalf("PUT of %d path bytes: %d %.300s", len(path), a.status, a.body)
	}
	var set struct {
		LeaseID string `json:"lease_id"`
		Members []struct {
			FencingToken int64 `json:"fencing_token"`
		} `json:"members"`
	}
	if err := json.Unmarshal([]byte(a.body), &set); err != nil || len(set.Members) != 64 {
		t.Fatalf("answer: %v, %d members", err, len(set.Members))
	}
	if a := g.do(t, http.MethodDelete, path, "", "Authorization", bearer, "Lease-Id", set.LeaseID); a.status != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", a.status, a.body)
	}
}
