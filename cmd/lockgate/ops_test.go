package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockgate/lockgate/api"
	"github.com/lockgate/lockgate/internal/freeport"
	"github.com/lockgate/lockgate/internal/redistest"
)

const (
	opsWriter = "ops-writer-0123456789abcdef"
	opsReader = "ops-reader-0123456789abcdef"
	opsOnCall = "ops-on-call-0123456789abcdef"
	opsNew    = "ops-new-token-0123456789abcdef"
)

func bearer(tok string) []string { return []string{"Authorization", "Bearer " + tok} }

func (a answer) list(t *testing.T) api.LockList {
	t.Helper()
	if a.status != http.StatusOK {
		t.Fatalf("listing: %d %s", a.status, a.body)
	}
	var l api.LockList
	if err := json.Unmarshal([]byte(a.body), &l); err != nil {
		t.Fatal(err)
	}
	return l
}

func (a answer) lease(t *testing.T) api.Lease {
	t.Helper()
	if a.status != http.StatusCreated {
		t.Fatalf("acquire: %d %s", a.status, a.body)
	}
	var l api.Lease
	if err := json.Unmarshal([]byte(a.body), &l); err != nil {
		t.Fatal(err)
	}
	return l
}

// Over three real Redis nodes, with access control on: listing filtered by
// the token's prefixes and paged; force release by the token allowed it
// (the next token higher), refused to the others; the audit log names the
// callers and shows no secret.
func TestListingAndForceReleaseOverRedis(t *testing.T) {
	servers := redistest.StartN(t, 3, nil)
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte(opsWriter+" * orders:,billing: writer\n"+opsReader+" GET orders: reader\n"+
		opsOnCall+" GET,force * on-call\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, []string{"-redis", redisURLs(servers), "-node-timeout", "200ms", "-min-ttl", "1s"},
		map[string]string{"LOCKGATE_AUTH_FILE": file})

	var leases []api.Lease
	for i := range 120 {
		leases = append(leases, g.do(t, "PUT", fmt.Sprintf("/locks/orders:%03d", i), `{"owner":"worker"}`, bearer(opsWriter)...).lease(t))
	}
	billing := g.do(t, "PUT", "/locks/billing:1", "", bearer(opsWriter)...).lease(t)

	// The reader sees only orders:, over pages of 50.
	var seen []string
	path := "/locks?limit=50"
	for pages := 0; path != ""; pages++ {
		page := g.do(t, "GET", path, "", bearer(opsReader)...).list(t)
		if len(page.Locks) > 50 || pages > 20 {
			t.Fatalf("page %d: %d locks", pages, len(page.Locks))
		}
		for _, l := range page.Locks {
			seen = append(seen, l.Resource)
		}
		path = ""
		if page.NextCursor != "" {
			path = "/locks?limit=50&cursor=" + page.NextCursor
		}
	}
	slices.Sort(seen)
	if len(seen) != 120 || seen[0] != "orders:000" || seen[119] != "orders:119" {
		t.Errorf("the reader listed %d locks (%v...), want orders:000..119", len(seen), seen[:min(3, len(seen))])
	}
	// A page may come back short, even empty, with a cursor (its scan work
	// is bounded): follow it to the end.
	var billed []api.LockInfo
	for path := "/locks?prefix=billing:"; path != ""; {
		page := g.do(t, "GET", path, "", bearer(opsOnCall)...).list(t)
		billed = append(billed, page.Locks...)
		path = ""
		if page.NextCursor != "" {
			path = "/locks?prefix=billing:&cursor=" + page.NextCursor
		}
	}
	if len(billed) != 1 || billed[0].FencingToken != billing.FencingToken {
		t.Errorf("the on-call token lists billing: as %+v", billed)
	}

	for _, tc := range []struct {
		tok    string
		status int
	}{{opsWriter, 403}, {opsReader, 403}, {"", 401}} {
		var hdr []string
		if tc.tok != "" {
			hdr = bearer(tc.tok)
		}
		if a := g.do(t, "DELETE", "/locks/billing:1?force=true", "", hdr...); a.status != tc.status {
			t.Errorf("force release without the force operation: %d %s, want %d", a.status, a.body, tc.status)
		}
	}
	if a := g.do(t, "DELETE", "/locks/billing:1?force=true", "", bearer(opsOnCall)...); a.status != http.StatusNoContent {
		t.Fatalf("force release by the on-call token: %d %s", a.status, a.body)
	}
	if a := g.do(t, "DELETE", "/locks/billing:1?force=true", "", bearer(opsOnCall)...); a.status != http.StatusNotFound {
		t.Errorf("force release of a free lock: %d %s, want 404", a.status, a.body)
	}
	next := g.do(t, "PUT", "/locks/billing:1", "", bearer(opsWriter)...).lease(t)
	if next.FencingToken <= billing.FencingToken {
		t.Errorf("the next token %d is not above the broken lock's %d", next.FencingToken, billing.FencingToken)
	}

	logs := g.log.String()
	for _, secret := range append([]string{opsWriter, opsReader, opsOnCall, billing.LeaseID, next.LeaseID}, leases[0].LeaseID) {
		if strings.Contains(logs, secret) {
			t.Errorf("the log shows the secret %q", secret)
		}
	}
	want := fmt.Sprintf(`"audit":true,"op":"force","caller":"on-call","resource":"billing:1","outcome":"force_released","status":204,"fencing_token":%d`, billing.FencingToken)
	if !strings.Contains(logs, want) {
		t.Errorf("no audit line %s in\n%s", want, logs)
	}
	if !strings.Contains(logs, `"audit":true,"op":"force","caller":"writer","resource":"billing:1","outcome":"forbidden","status":403`) {
		t.Errorf("the refused force release by the writer is not in the audit log")
	}
}

// Without access control, force release is refused with 403 over Redis too.
func TestForceReleaseIsRefusedWithoutAccessControl(t *testing.T) {
	servers := redistest.StartN(t, 3, nil)
	g := startGateway(t, []string{"-redis", redisURLs(servers), "-node-timeout", "200ms", "-min-ttl", "1s"}, nil)
	g.do(t, "PUT", "/locks/stuck", "").lease(t)
	a := g.do(t, "DELETE", "/locks/stuck?force=true", "")
	if a.status != http.StatusForbidden || !strings.Contains(a.body, "-auth-file") {
		t.Errorf("force release without access control: %d %s, want 403 saying how to enable it", a.status, a.body)
	}
	if a := g.do(t, "GET", "/locks/stuck", ""); a.status != http.StatusOK {
		t.Errorf("the lock was broken: %d %s", a.status, a.body)
	}
}

// SIGHUP re-reads the auth file: a new token works at once, a removed one is
// refused, and a file that does not parse keeps the tokens in force, with
// the reason logged. A request in flight (a waiting acquire) is answered by
// the rules it arrived under.
func TestSIGHUPReloadsTheAuthFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(opsWriter + " * * writer\n")
	g := startGateway(t, nil, map[string]string{"LOCKGATE_AUTH_FILE": file})
	hangup := func(want string, n int) {
		t.Helper()
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for strings.Count(g.log.String(), want) < n {
			if time.Now().After(deadline) {
				t.Fatalf("no %q in the log after SIGHUP:\n%s", want, g.log)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	r1 := g.do(t, "PUT", "/locks/r1", `{"ttl_ms":60000}`, bearer(opsWriter)...).lease(t)
	// A waiting acquire, in flight across the reload that removes its token.
	waited := make(chan answer, 1)
	go func() {
		// Not g.do: only the test goroutine may fail the test.
		req, _ := http.NewRequest("PUT", g.base+"/locks/r1", strings.NewReader(`{"wait_ms":20000}`))
		req.Header.Set("Content-Type", api.MediaJSON)
		req.Header.Set("Authorization", "Bearer "+opsWriter)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			waited <- answer{body: err.Error()}
			return
		}
		resp.Body.Close()
		waited <- answer{status: resp.StatusCode}
	}()
	// It is in flight once the gateway holds it in its queue.
	if !g.waiters(t, 1, 10*time.Second) {
		t.Fatal("the waiting acquire never reached the queue")
	}

	write(opsNew + " * * newcomer\n")
	hangup("auth file reloaded", 1)
	if a := g.do(t, "PUT", "/locks/r2", "", bearer(opsNew)...); a.status != http.StatusCreated {
		t.Errorf("the new token after SIGHUP: %d %s", a.status, a.body)
	}
	if a := g.do(t, "PUT", "/locks/r3", "", bearer(opsWriter)...); a.status != http.StatusUnauthorized {
		t.Errorf("the removed token after SIGHUP: %d %s, want 401", a.status, a.body)
	}
	// r1 is released (with the new token) after the reload: the waiter,
	// let in before it, gets the lock.
	if a := g.do(t, "DELETE", "/locks/r1", "", append(bearer(opsNew), api.HeaderLeaseID, r1.LeaseID)...); a.status != http.StatusNoContent {
		t.Errorf("releasing r1 after SIGHUP: %d %s", a.status, a.body)
	}
	select {
	case a := <-waited:
		if a.status != http.StatusCreated {
			t.Errorf("the acquire in flight across the reload: %d %s, want 201", a.status, a.body)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the waiting acquire never answered")
	}

	write("this line is not a token line\n")
	hangup("auth file not reloaded", 1)
	if !strings.Contains(g.log.String(), `"reason":"line 1: want 3 or 4 fields`) {
		t.Errorf("the log does not say why the file was refused:\n%s", g.log)
	}
	if a := g.do(t, "PUT", "/locks/r4", "", bearer(opsNew)...); a.status != http.StatusCreated {
		t.Errorf("the tokens in force after a bad file: %d %s, want 201", a.status, a.body)
	}
	if strings.Contains(g.log.String(), opsNew) || strings.Contains(g.log.String(), opsWriter) {
		t.Error("the log shows a token")
	}
}

// The auth file's mode and prefixes are checked each time the file is read:
// a file group or other users may read, and a prefix without a trailing
// separator, are warned about at start-up and at every reload.
func TestAuthFileWarningsAtEveryLoad(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte(opsWriter+" * * writer\n"+opsNew+" GET tenant1,tenant2- reader\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	chmod := func(mode os.FileMode) {
		t.Helper()
		if err := os.Chmod(file, mode); err != nil {
			t.Fatal(err)
		}
	}
	const warning = "the auth file is readable by users other than its owner"
	chmod(0o640)
	g := startGateway(t, nil, map[string]string{"LOCKGATE_AUTH_FILE": file})
	if n := strings.Count(g.log.String(), warning); n != 1 {
		t.Fatalf("%d warnings at start-up for a 0640 file, want 1:\n%s", n, g.log)
	}
	// So is a prefix without a trailing separator, at start-up and at every
	// reload.
	open := `"prefixes":["line 2: tenant1"]`
	if n := strings.Count(g.log.String(), open); n != 1 {
		t.Fatalf("%d warnings of the prefix tenant1 at start-up, want 1:\n%s", n, g.log)
	}
	reloads := 0
	for _, tc := range []struct {
		mode     os.FileMode
		warnings int
	}{{0o600, 1}, {0o666, 2}, {0o604, 3}, {0o400, 3}} {
		chmod(tc.mode)
		reloads++
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for strings.Count(g.log.String(), "auth file reloaded") < reloads {
			if time.Now().After(deadline) {
				t.Fatalf("no reload after SIGHUP:\n%s", g.log)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if n := strings.Count(g.log.String(), warning); n != tc.warnings {
			t.Errorf("after a reload of a %v file: %d warnings in all, want %d", tc.mode, n, tc.warnings)
		}
		if n := strings.Count(g.log.String(), open); n != reloads+1 {
			t.Errorf("after %d reloads: %d warnings of the prefix tenant1, want %d", reloads, n, reloads+1)
		}
	}
}

// go-redis's own messages (here: dials refused by a stopped node) are JSON
// lines of the gateway's log, not plain text between them.
func TestGoRedisLogsGoIntoTheJSONLog(t *testing.T) {
	servers := redistest.StartN(t, 3, nil)
	g := startGateway(t, []string{"-redis", redisURLs(servers), "-node-timeout", "200ms", "-min-ttl", "1s"}, nil)
	servers[0].Kill()
	for i := range 5 {
		g.do(t, "PUT", fmt.Sprintf("/locks/go-redis-%d", i), "")
	}
	sawRedis := false
	for line := range strings.Lines(g.log.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Errorf("a log line is not JSON: %q", line)
			continue
		}
		if m["component"] == "go-redis" && strings.Contains(fmt.Sprint(m["message"]), "dial") {
			sawRedis = true
		}
	}
	if !sawRedis {
		t.Errorf("no go-redis line in the JSON log:\n%s", g.log)
	}
}

// In a fresh process (go-redis's logger not yet set by an earlier test),
// a start over a Redis that refuses connections logs only JSON lines, from
// the very first: go-redis's failed dials included.
func TestTheFirstLogLinesOfAStartWithoutRedisAreJSON(t *testing.T) {
	port := freeport.Ports(t, 1)[0] // closed: nothing listens there
	p := startLockgate(t, "-addr", "127.0.0.1:0", "-node-timeout", "100ms", "-min-ttl", "1s",
		"-redis", fmt.Sprintf("redis://127.0.0.1:%d", port))
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(p.stderr.String(), "failed to dial") || !strings.Contains(p.stderr.String(), "lockgate listening") {
		if time.Now().After(deadline) {
			t.Fatalf("no go-redis dial failure and listening line within 20s:\n%s", p.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	p.wait(t, 20*time.Second)
	out := p.stderr.String()
	if out == "" || out[0] != '{' {
		t.Errorf("the first log line is not JSON:\n%s", out)
	}
	sawRedis := false
	for line := range strings.Lines(out) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Errorf("a log line is not JSON: %q", line)
		}
		sawRedis = sawRedis || m["component"] == "go-redis"
	}
	if !sawRedis {
		t.Errorf("no go-redis line in the JSON log:\n%s", out)
	}
}

// -rate-limit through the environment: a caller beyond its rate gets 429
// with Retry-After.
func TestRateLimitSetting(t *testing.T) {
	g := startGateway(t, nil, map[string]string{"LOCKGATE_RATE_LIMIT": "0.01", "LOCKGATE_RATE_BURST": "2"})
	var statuses []int
	for range 3 {
		statuses = append(statuses, g.do(t, "GET", "/locks/limited", "").status)
	}
	a := g.do(t, "GET", "/locks/limited", "")
	if !slices.Equal(statuses, []int{404, 404, 429}) || a.status != 429 || a.header.Get("Retry-After") == "" {
		t.Errorf("statuses %v then %d (Retry-After %q), want 404 404 429 429 with Retry-After", statuses, a.status, a.header.Get("Retry-After"))
	}
	if h := g.do(t, "GET", "/healthz", ""); h.status != 200 {
		t.Errorf("/healthz is limited: %d", h.status)
	}
}
