// Package e2e drives the real binaries (cmd/lockgate, cmd/fencedkv) as
// processes over loopback HTTP, against real redis-server processes: the
// README's walkthrough, the stale writer refused end to end, shutdown and
// configuration errors.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/internal/testlog"
	"github.com/lockgate/lockgate/lockcore"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binary builds cmd/<name> once per test run and returns its path.
func binary(t *testing.T, name string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: builds and runs the binaries; skipped under -short")
	}
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "lockgate-e2e-")
		if buildErr != nil {
			return
		}
		for _, cmd := range []string{"lockgate", "fencedkv"} {
			out, err := exec.Command("go", "build", "-o", filepath.Join(binDir, cmd), "../cmd/"+cmd).CombinedOutput()
			if err != nil {
				buildErr = fmt.Errorf("go build ./cmd/%s: %v\n%s", cmd, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, name)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// proc is a running binary with its captured log.
type proc struct {
	cmd  *exec.Cmd
	log  *testlog.Buffer
	base string
	done chan struct{}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// start runs bin with args, waits until GET /healthz answers, and kills it
// when the test ends.
func start(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	addr := freeAddr(t)
	p := &proc{log: &testlog.Buffer{}, base: "http://" + addr, done: make(chan struct{})}
	p.cmd = exec.Command(bin, append([]string{"-addr", addr}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.cmd.Env = []string{"PATH=" + os.Getenv("PATH")} // no LOCKGATE_* from the caller
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("%s log:\n%s", filepath.Base(bin), p.log.String())
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			t.Fatalf("%s exited at start:\n%s", bin, p.log.String())
		default:
		}
		if resp, err := http.Get(p.base + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s did not answer /healthz within 10s:\n%s", bin, p.log.String())
	return nil
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body is not JSON: %q", r.body)
	}
	return m
}

func (r reply) token(t *testing.T) int64 {
	t.Helper()
	v, ok := r.json(t)["fencing_token"].(float64)
	if !ok {
		t.Fatalf("no fencing_token in %s", r.body)
	}
	return int64(v)
}

func call(t *testing.T, method, url, body string, headers ...string) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

func expect(t *testing.T, step string, got reply, status int) {
	t.Helper()
	if got.status != status {
		t.Fatalf("%s: status %d, want %d; body %s", step, got.status, status, got.body)
	}
}

// TestReadmeWalkthrough follows README.md's walkthrough against the gateway
// started as the README says (no Redis: the embedded store).
func TestReadmeWalkthrough(t *testing.T) {
	bin := binary(t, "lockgate")
	began0 := time.Now()
	gw := start(t, bin)
	if !strings.Contains(gw.log.String(), "using the embedded in-memory lock store") {
		t.Fatalf("startup log does not say it uses the embedded store:\n%s", gw.log.String())
	}
	url := gw.base + "/locks/invoice-42"
	lease := "562bfdf4c227afaeca25559c4d89a6b2"

	r := call(t, "PUT", url, `{"ttl_ms": 30000, "owner": "billing-worker-1"}`, "Lease-Id", lease)
	expect(t, "1. acquire", r, 201)
	// The embedded store's tokens start from the clock (so that they grow
	// across restarts): above any token of an earlier start.
	t0 := r.token(t)
	if t0 <= lockcore.ClockFloor(began0) {
		t.Fatalf("1. token %d, want above the clock floor of the gateway's start %d", t0, lockcore.ClockFloor(began0))
	}
	tok := strconv.FormatInt(t0, 10)
	if r.header.Get("Lease-Id") != lease || r.header.Get("Fencing-Token") != tok || r.header.Get("Etag") != `"`+tok+`"` ||
		r.header.Get("Location") != "/locks/invoice-42" {
		t.Fatalf("1. acquire headers: %v", r.header)
	}
	if v := r.json(t)["validity_ms"].(float64); v <= 0 || v > 30000-300-2 {
		t.Fatalf("1. validity_ms %v, want in (0, 29698]", v)
	}

	r = call(t, "PUT", url, "", "Lease-Id", lease)
	expect(t, "2. same lease again", r, 200)
	if r.token(t) != t0 {
		t.Fatalf("2. token %d, want %d", r.token(t), t0)
	}

	r = call(t, "PUT", url, "")
	expect(t, "3. anyone else", r, 409)
	if r.header.Get("Content-Type") != "application/problem+json" || r.header.Get("Retry-After") != "30" ||
		r.json(t)["type"] != "urn:lockgate:problem:lock-taken" {
		t.Fatalf("3. conflict: %v %s", r.header, r.body)
	}

	r = call(t, "GET", url, "")
	expect(t, "4. inspect", r, 200)
	if bytes.Contains(r.body, []byte(lease)) || r.json(t)["owner"] != "billing-worker-1" || r.token(t) != t0 {
		t.Fatalf("4. inspect: %s", r.body)
	}

	r = call(t, "PATCH", url, `{"ttl_ms": 60000}`, "Lease-Id", lease)
	expect(t, "5. extend", r, 200)
	if r.token(t) != t0 || r.json(t)["ttl_ms"].(float64) != 60000 {
		t.Fatalf("5. extend: %s", r.body)
	}

	expect(t, "6. release", call(t, "DELETE", url, "", "Lease-Id", lease), 204)

	r = call(t, "PUT", url, "")
	expect(t, "7. next holder", r, 201)
	if r.token(t) != t0+1 {
		t.Fatalf("7. token %d, want %d", r.token(t), t0+1)
	}

	r = call(t, "PATCH", url, "", "Lease-Id", lease)
	expect(t, "8. old lease", r, 409)
	if r.json(t)["type"] != "urn:lockgate:problem:held-by-another-lease" {
		t.Fatalf("8. old lease: %s", r.body)
	}

	began := time.Now()
	r = call(t, "PUT", url, `{"wait_ms": 2000}`)
	expect(t, "9. wait for a held lock", r, 409)
	if waited := time.Since(began); waited < 2*time.Second {
		t.Fatalf("9. answered after %v, want after the 2s wait", waited)
	}

	if strings.Contains(gw.log.String(), lease) {
		t.Fatal("the lease id appears in the gateway's log")
	}
}

// TestStaleWriterIsRefused is the failure from the seeds, end to end: client
// 1 acquires and stalls past its TTL; client 2 acquires with a higher token
// and writes; client 1 wakes and writes with its old token and is refused;
// the stored value is client 2's.
func TestStaleWriterIsRefused(t *testing.T) {
	lockgate, fencedkv := binary(t, "lockgate"), binary(t, "fencedkv")
	nodes := redistest.StartN(t, 3, nil)
	var urls []string
	for _, n := range nodes {
		urls = append(urls, n.URL())
	}
	gw := start(t, lockgate, "-redis", strings.Join(urls, ","))
	kv := start(t, fencedkv, "-redis", redistest.Start(t, nil).URL())

	lock, doc := gw.base+"/locks/doc-7", kv.base+"/kv/doc-7"

	r := call(t, "PUT", lock, `{"ttl_ms": 300}`)
	expect(t, "client 1 acquires", r, 201)
	t1 := r.token(t)

	// Client 1 stalls (a GC pause, say) until its lock has expired.
	deadline := time.Now().Add(5 * time.Second)
	for call(t, "GET", lock, "").status != 404 {
		if time.Now().After(deadline) {
			t.Fatal("lock with a 300ms TTL still held after 5s")
		}
		time.Sleep(20 * time.Millisecond)
	}

	r = call(t, "PUT", lock, `{"ttl_ms": 30000}`)
	expect(t, "client 2 acquires", r, 201)
	t2 := r.token(t)
	if t2 <= t1 {
		t.Fatalf("client 2's token %d is not above client 1's %d", t2, t1)
	}
	put := func(value string, token int64) reply {
		req, _ := http.NewRequest("PUT", doc, strings.NewReader(value))
		req.Header.Set("Fencing-Token", strconv.FormatInt(token, 10))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return reply{status: resp.StatusCode, header: resp.Header, body: b}
	}
	expect(t, "client 2 writes", put("written by client 2", t2), 204)

	r = put("written by client 1", t1)
	expect(t, "client 1 writes with its stale token", r, 409)
	if r.header.Get("Content-Type") != "application/problem+json" || !bytes.Contains(r.body, []byte(strconv.FormatInt(t2, 10))) {
		t.Fatalf("stale write refusal should be a problem naming the highest token %d: %s", t2, r.body)
	}

	r = call(t, "GET", doc, "")
	expect(t, "read back", r, 200)
	if string(r.body) != "written by client 2" || r.header.Get("Fencing-Token") != strconv.FormatInt(t2, 10) {
		t.Fatalf("stored value %q with token %s, want client 2's with %d", r.body, r.header.Get("Fencing-Token"), t2)
	}
}

// TestShutdownEndsWaits: SIGTERM ends a waiting PUT with 503 at once and the
// gateway exits cleanly.
func TestShutdownEndsWaits(t *testing.T) {
	gw := start(t, binary(t, "lockgate"))
	url := gw.base + "/locks/shutdown"
	expect(t, "holder acquires", call(t, "PUT", url, `{"ttl_ms": 60000}`), 201)

	waited := make(chan reply, 1)
	go func() {
		req, _ := http.NewRequest("PUT", url, strings.NewReader(`{"wait_ms": 60000}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			waited <- reply{status: -1, body: []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		waited <- reply{status: resp.StatusCode, header: resp.Header, body: b}
	}()
	// The waiter is queued once the gateway counts it in lockgate_waiters.
	deadline := time.Now().Add(10 * time.Second)
	for !bytes.Contains(call(t, "GET", gw.base+"/metrics", "").body, []byte("\nlockgate_waiters 1\n")) {
		if time.Now().After(deadline) {
			t.Fatal("lockgate_waiters never reached 1")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := gw.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-waited:
		expect(t, "waiting PUT at shutdown", r, 503)
		if r.header.Get("Retry-After") == "" || !bytes.Contains(r.body, []byte("urn:lockgate:problem:shutting-down")) {
			t.Fatalf("shutdown answer: %v %s", r.header, r.body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiting PUT not answered within 10s of SIGTERM")
	}
	select {
	case <-gw.done:
		if code := gw.cmd.ProcessState.ExitCode(); code != 0 {
			t.Fatalf("exit code %d after SIGTERM:\n%s", code, gw.log.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("gateway did not exit within 15s of SIGTERM")
	}
}

// TestBadConfigurationStopsTheStart: each bad value stops the start with a
// message naming the setting.
func TestBadConfigurationStopsTheStart(t *testing.T) {
	bin := binary(t, "lockgate")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"a Redis URL of the wrong scheme", []string{"-redis", "http://127.0.0.1:6379"}, "-redis"},
		{"a Redis URL whose password must not be printed", []string{"-redis", "redis://:hunter2@127.0.0.1:6379,redis://:hunter2@127.0.0.1:6379"}, "-redis"},
		{"a node timeout that leaves no validity", []string{"-node-timeout", "80ms"}, "-node-timeout"},
		{"a TTL bound that is not a duration", []string{"-max-ttl", "forever"}, "-max-ttl"},
		{"an address in use or malformed", []string{"-addr", "nonsense"}, "-addr"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, bin, c.args...).CombinedOutput()
			if err == nil {
				t.Fatalf("started with bad settings; output:\n%s", out)
			}
			if !strings.Contains(string(out), c.want) {
				t.Fatalf("message does not name %s:\n%s", c.want, out)
			}
			if strings.Contains(string(out), "hunter2") {
				t.Fatalf("message leaks a password:\n%s", out)
			}
		})
	}
}

// TestTheEmbeddedStoreKeepsTokensGrowingAcrossAKill: the fencing
// walkthrough on the embedded gateway, with the gateway killed (SIGKILL)
// between the two holders. Client 2's token must be above client 1's, and
// client 1's late write refused, although the gateway kept nothing.
func TestTheEmbeddedStoreKeepsTokensGrowingAcrossAKill(t *testing.T) {
	lockgate, fencedkv := binary(t, "lockgate"), binary(t, "fencedkv")
	kv := start(t, fencedkv)
	doc := kv.base + "/kv/report-9"
	put := func(value string, token int64) reply {
		return call(t, "PUT", doc, value, "Fencing-Token", strconv.FormatInt(token, 10))
	}
	gw := start(t, lockgate)
	r := call(t, "PUT", gw.base+"/locks/report-9", `{"ttl_ms": 60000}`)
	expect(t, "client 1 acquires", r, 201)
	t1 := r.token(t)
	expect(t, "client 1 writes", put("draft by client 1", t1), 204)
	_ = gw.cmd.Process.Kill()
	<-gw.done

	gw = start(t, lockgate)
	r = call(t, "PUT", gw.base+"/locks/report-9", `{"ttl_ms": 60000}`)
	expect(t, "client 2 acquires after the restart", r, 201)
	t2 := r.token(t)
	if t2 <= t1 {
		t.Fatalf("after a restart of the embedded gateway, token %d is not above %d", t2, t1)
	}
	expect(t, "client 2 writes", put("final by client 2", t2), 204)
	expect(t, "client 1's late write", put("late write by client 1", t1), 409)
}
