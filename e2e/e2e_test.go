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
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/gatewaytest"
	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/internal/walkthrough"
	"github.com/lockgate/lockgate/lockcore"
)

// binary builds cmd/<name> once per test run and returns its path.
func binary(t *testing.T, name string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: builds and runs the binaries; skipped under -short")
	}
	return gatewaytest.Binary(t, name)
}

func TestMain(m *testing.M) {
	code := m.Run()
	gatewaytest.RemoveBinaries()
	os.Exit(code)
}

// start runs bin with args (see gatewaytest.Start).
func start(t *testing.T, bin string, args ...string) *gatewaytest.Process {
	t.Helper()
	return gatewaytest.Start(t, bin, nil, args...)
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

// TestReadmeWalkthrough pastes every walkthrough of README.md and docs/*.md
// (internal/walkthrough finds them) twice in a row into bash, against the
// gateway and the demo store started as the README says (no flags: their
// embedded in-memory stores) and a redis-server for redis-cli, and compares
// every answer with the one the documents show. A walkthrough whose
// document says it needs a fresh store gets a fresh fencedkv for each
// paste. It also checks what the answers alone cannot show: the embedded
// store's tokens start from the clock, a PUT with wait_ms that found the
// lock taken answered after its wait, and no lease id reached the log.
func TestReadmeWalkthrough(t *testing.T) {
	lockgate, fencedkv := binary(t, "lockgate"), binary(t, "fencedkv")
	redistest.Binary(t)
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatal("redis-cli not found: apt-get install redis-server (it brings redis-tools)")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl not found: apt-get install curl")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	ws, err := walkthrough.LoadDocs(root)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	gw := start(t, lockgate)
	if !strings.Contains(gw.Log.String(), "using the embedded in-memory lock store") {
		t.Fatalf("startup log does not say it uses the embedded store:\n%s", gw.Log.String())
	}
	kv := start(t, fencedkv)
	redis := redistest.Start(t, nil)
	_, port, _ := net.SplitHostPort(redis.Addr())
	redisPort, _ := strconv.Atoi(port)
	base := walkthrough.Env{
		Root: root, Gateway: strings.TrimPrefix(gw.URL, "http://"), RedisPort: redisPort, Path: []string{filepath.Dir(lockgate)},
	}

	var outputs []string
	waited, elections := 0, 0
	for _, w := range ws {
		if w.Doc+"#"+w.Heading == electionRecipe {
			elections++
			if err := checkTakeover(w); err != nil {
				t.Error(err)
			}
		}
		t.Run(w.Doc+"#"+w.Heading, func(t *testing.T) {
			res, err := walkthrough.Check(t.Context(), w, func(int) (walkthrough.Env, error) {
				if w.FreshStore { // as the document says: restart fencedkv, whose memory forgets
					kv.Kill()
					kv = start(t, fencedkv)
				}
				env := base
				env.Store = strings.TrimPrefix(kv.URL, "http://")
				return env, nil
			})
			if err != nil {
				t.Error(err)
			}
			for _, paste := range res {
				for _, r := range paste {
					outputs = append(outputs, r.Output)
					if m := waitMs.FindStringSubmatch(r.Step.Command); m != nil && strings.Contains(r.Output, "urn:lockgate:problem:lock-taken") {
						waited++
						if ms, _ := strconv.Atoi(m[1]); r.Took < time.Duration(ms)*time.Millisecond {
							t.Errorf("%s:%d: answered lock-taken after %v, before its wait_ms %d", w.Doc, r.Step.Line, r.Took, ms)
						}
					}
				}
			}
		})
	}
	if waited == 0 {
		t.Error("no walkthrough step waited for a held lock (a PUT with wait_ms answered lock-taken)")
	}
	if elections != 1 {
		t.Errorf("%d walkthroughs %s, want the election recipe's run", elections, electionRecipe)
	}
	// The embedded store's tokens start from the clock, so that they grow
	// across restarts: above any token of an earlier start.
	tokens, leases := 0, 0
	for _, o := range outputs {
		for _, m := range answeredToken.FindAllStringSubmatch(o, -1) {
			tokens++
			if v, _ := strconv.ParseInt(m[1], 10, 64); v <= lockcore.ClockFloor(began) {
				t.Errorf("token %d, want above the clock floor of the gateway's start %d", v, lockcore.ClockFloor(began))
			}
		}
		for _, m := range answeredLease.FindAllStringSubmatch(o, -1) {
			leases++
			if strings.Contains(gw.Log.String(), m[1]) {
				t.Errorf("the lease id %s… appears in the gateway's log", m[1][:4])
			}
		}
	}
	if tokens == 0 || leases == 0 {
		t.Errorf("the walkthroughs answered %d fencing tokens and %d lease ids; want some of each", tokens, leases)
	}
}

// electionRecipe is the walkthrough that runs the election script with two
// candidates and kills the leader.
const electionRecipe = "docs/watch.md#Leader election with curl"

// checkTakeover checks what the election recipe's answers alone cannot
// show: the leader is killed with its process group (kill -9), and the
// answer that must show the other candidate leading is asked for no later
// than the recipe's TTL and 2 s after. The answers (compared as for every
// walkthrough) show the new leader and its higher term.
func checkTakeover(w walkthrough.Walkthrough) error {
	var ttl time.Duration
	for i, s := range w.Steps {
		if m := leaderTTL.FindStringSubmatch(s.Command); m != nil {
			ms, _ := strconv.Atoi(m[1])
			ttl = time.Duration(ms) * time.Millisecond
		}
		if !strings.HasPrefix(s.Command, "kill -9 -- -") {
			continue
		}
		if ttl == 0 || i+1 == len(w.Steps) {
			return fmt.Errorf("%s:%d: the leader is killed without a LEADER_TTL_MS before or an answer after", w.Doc, s.Line)
		}
		next := w.Steps[i+1]
		m := sleepThenAsk.FindStringSubmatch(next.Command)
		if m == nil || !strings.Contains(next.Shown, `"owner":"node-b"`) {
			return fmt.Errorf("%s:%d: after the kill, want \"sleep N; curl …\" showing node-b leading, have %q showing %q", w.Doc, next.Line, next.Command, next.Shown)
		}
		if wait, _ := time.ParseDuration(m[1] + "s"); wait > ttl+2*time.Second {
			return fmt.Errorf("%s:%d: the new leader is asked for %v after the kill, later than the TTL (%v) and 2 s", w.Doc, next.Line, wait, ttl)
		}
		return nil
	}
	return fmt.Errorf("%s:%d: the election recipe's run kills no leader (kill -9 -- -PGID)", w.Doc, w.Line)
}

var (
	leaderTTL     = regexp.MustCompile(`LEADER_TTL_MS=([0-9]+)`)
	sleepThenAsk  = regexp.MustCompile(`^sleep ([0-9.]+); curl `)
	waitMs        = regexp.MustCompile(`"wait_ms": ?([0-9]+)`)
	answeredToken = regexp.MustCompile(`"fencing_token":([0-9]+)`)
	answeredLease = regexp.MustCompile(`(?:"lease_id":"|Lease-Id: )([A-Za-z0-9_-]{16,128})`)
)

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

	lock, doc := gw.URL+"/locks/doc-7", kv.URL+"/kv/doc-7"

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

// TestShutdownEndsWaits: SIGTERM, with no drain delay, ends a waiting PUT
// with 503 at once and the gateway exits cleanly.
func TestShutdownEndsWaits(t *testing.T) {
	gw := start(t, binary(t, "lockgate"), "-shutdown-delay", "0s")
	url := gw.URL + "/locks/shutdown"
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
	for !bytes.Contains(call(t, "GET", gw.URL+"/metrics", "").body, []byte("\nlockgate_waiters 1\n")) {
		if time.Now().After(deadline) {
			t.Fatal("lockgate_waiters never reached 1")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := gw.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
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
	case <-gw.Done:
		if code := gw.Cmd.ProcessState.ExitCode(); code != 0 {
			t.Fatalf("exit code %d after SIGTERM:\n%s", code, gw.Log.String())
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
	doc := kv.URL + "/kv/report-9"
	put := func(value string, token int64) reply {
		return call(t, "PUT", doc, value, "Fencing-Token", strconv.FormatInt(token, 10))
	}
	gw := start(t, lockgate)
	r := call(t, "PUT", gw.URL+"/locks/report-9", `{"ttl_ms": 60000}`)
	expect(t, "client 1 acquires", r, 201)
	t1 := r.token(t)
	expect(t, "client 1 writes", put("draft by client 1", t1), 204)
	gw.Kill()

	gw = start(t, lockgate)
	r = call(t, "PUT", gw.URL+"/locks/report-9", `{"ttl_ms": 60000}`)
	expect(t, "client 2 acquires after the restart", r, 201)
	t2 := r.token(t)
	if t2 <= t1 {
		t.Fatalf("after a restart of the embedded gateway, token %d is not above %d", t2, t1)
	}
	expect(t, "client 2 writes", put("final by client 2", t2), 204)
	expect(t, "client 1's late write", put("late write by client 1", t1), 409)
}
