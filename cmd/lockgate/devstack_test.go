package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/internal/freeport"
	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/internal/walkthrough"
)

const devStack = "../../scripts/dev-stack"

// devStackRun runs scripts/dev-stack with a subcommand and returns its
// output and exit code.
func devStackRun(t *testing.T, env []string, sub string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", devStack, sub)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &ee):
		return out.String(), ee.ExitCode()
	default:
		t.Fatalf("dev-stack %s: %v\n%s", sub, err, out.String())
		return "", -1
	}
}

// TestDevStack brings scripts/dev-stack up as a developer would (on free
// ports, in a temporary state directory), pastes every walkthrough of
// README.md and docs/*.md twice in a row against it and compares each
// answer with the docs, checks that the stack runs with docker-compose.yml's
// settings, and brings it down.
func TestDevStack(t *testing.T) {
	redistest.Binary(t) // skips under -short; fails with install advice without redis-server
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatal("redis-cli not found: apt-get install redis-server (it brings redis-tools)")
	}
	ports := freeport.Ports(t, 5)
	state := t.TempDir()
	env := []string{
		"DEVSTACK_DIR=" + state,
		"DEVSTACK_REDIS_PORTS=" + strconv.Itoa(ports[0]) + " " + strconv.Itoa(ports[1]) + " " + strconv.Itoa(ports[2]),
		"DEVSTACK_GATEWAY_PORT=" + strconv.Itoa(ports[3]),
		"DEVSTACK_KV_PORT=" + strconv.Itoa(ports[4]),
	}
	for _, kv := range os.Environ() { // the test's own LOCKGATE_* must not leak in
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "LOCKGATE_") {
			env = append(env, k+"=")
		}
	}
	t.Cleanup(func() {
		out, code := devStackRun(t, env, "down")
		if code != 0 {
			t.Errorf("dev-stack down: exit %d\n%s", code, out)
		}
		if t.Failed() {
			for _, name := range []string{"lockgate", "fencedkv", "redis-1"} {
				b, _ := os.ReadFile(filepath.Join(state, "logs", name+".log"))
				t.Logf("%s.log:\n%s", name, b)
			}
		}
	})
	out, code := devStackRun(t, env, "up")
	if code != 0 {
		t.Fatalf("dev-stack up: exit %d\n%s", code, out)
	}
	out, code = devStackRun(t, env, "status")
	if code != 0 || strings.Count(out, "healthy") != 5 || strings.Contains(out, "NOT healthy") {
		t.Fatalf("dev-stack status: exit %d\n%s", code, out)
	}
	out, _ = devStackRun(t, env, "up")
	if !strings.Contains(out, "already running") {
		t.Errorf("a second up did not notice the running stack:\n%s", out)
	}

	t.Run("every walkthrough of the docs, pasted twice in a row, answers as shown", func(t *testing.T) {
		if _, err := exec.LookPath("curl"); err != nil {
			t.Fatal("curl not found: apt-get install curl")
		}
		root, err := filepath.Abs("../..")
		if err != nil {
			t.Fatal(err)
		}
		ws, err := walkthrough.LoadDocs(root)
		if err != nil {
			t.Fatal(err)
		}
		base := walkthrough.Env{
			Root: root, Gateway: "127.0.0.1:" + strconv.Itoa(ports[3]), Store: "127.0.0.1:" + strconv.Itoa(ports[4]),
			RedisPort: ports[0], Path: []string{filepath.Join(state, "bin")},
			// The stack's 50 ms node timeout, as in docker-compose.yml, can
			// be missed on a loaded machine: retry such a 503, as the docs
			// say to.
			RetryNoQuorum: true,
		}
		for _, w := range ws {
			t.Run(w.Doc+"#"+w.Heading, func(t *testing.T) {
				res, err := walkthrough.Check(t.Context(), w, func(paste int) (walkthrough.Env, error) {
					env := base
					if w.FreshStore && paste > 1 {
						// The stack's fencedkv keeps its fences in Redis: as
						// the document says, another key.
						env.Rename = [2]string{"report", "report-again"}
					}
					return env, nil
				})
				if err != nil {
					t.Error(err)
				}
				for paste, rs := range res {
					for _, r := range rs {
						if r.Retried > 0 {
							t.Logf("paste %d, %s:%d: %d no-quorum answers retried", paste+1, w.Doc, r.Step.Line, r.Retried)
						}
					}
				}
			})
		}
		// The extraction fails loudly on an answer without the member.
		probe := exec.Command("bash", "-e", "-c", readmeLine(t, "field() {")+"\n"+
			`T=$(echo '{"type":"urn:lockgate:problem:lock-taken","status":409}' | field fencing_token); echo "went on with T=$T"`)
		out, err := probe.CombinedOutput()
		if err == nil || strings.Contains(string(out), "went on") || !strings.Contains(string(out), "no fencing_token in:") {
			t.Errorf("field on a 409: %v\n%s", err, out)
		}
	})

	t.Run("it runs with the settings of docker-compose.yml", func(t *testing.T) {
		doc, _ := loadCompose(t)
		want := redisSettings(t, doc.Services["redis-1"].command(t))
		delete(want, "protected-mode") // compose's network vs dev-stack's 127.0.0.1 bind
		for i, p := range ports[:3] {
			rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(p)})
			for k, v := range want {
				got, err := rdb.ConfigGet(context.Background(), k).Result()
				if err != nil {
					t.Fatal(err)
				}
				if got[k] != v {
					t.Errorf("redis-%d: %s is %q, docker-compose.yml says %q", i+1, k, got[k], v)
				}
			}
			rdb.Close()
		}

		logText, err := os.ReadFile(filepath.Join(state, "logs", "lockgate.log"))
		if err != nil {
			t.Fatal(err)
		}
		var shown map[string]any
		for line := range strings.Lines(string(logText)) {
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) == nil && strings.HasPrefix(m["message"].(string), "configuration") {
				shown, _ = m["settings"].(map[string]any)
			}
		}
		if shown == nil {
			t.Fatalf("no configuration line in the gateway's log:\n%s", logText)
		}
		composeEnv := doc.Services["lockgate"].env(t)
		for _, s := range settings {
			if s.flag == "addr" || s.flag == "redis" {
				continue // addresses differ by design
			}
			want, set := composeEnv[s.env]
			if !set {
				want = s.def
			}
			if shown[s.flag] != want {
				t.Errorf("-%s: the dev stack runs with %q, docker-compose.yml with %q", s.flag, shown[s.flag], want)
			}
		}
	})

	// A lock held across the restart below.
	gateway := "http://127.0.0.1:" + strconv.Itoa(ports[3])
	devStackPut(t, gateway+"/locks/held-across-a-restart", `{"ttl_ms": 120000}`, 201)

	out, code = devStackRun(t, env, "down")
	if code != 0 {
		t.Fatalf("dev-stack down: exit %d\n%s", code, out)
	}
	for _, p := range ports {
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(p), time.Second); err == nil {
			c.Close()
			t.Errorf("127.0.0.1:%d still answers after down", p)
		}
	}
	if out, code := devStackRun(t, env, "status"); code != 3 || strings.Count(out, "stopped") != 5 {
		t.Errorf("status after down: exit %d\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(state, "data", "redis-1", "appendonlydir")); err != nil {
		t.Errorf("down lost the AOF: %v", err)
	}

	// Up again: every Redis process is new (a majority restart), on
	// appendfsync always. The nodes come back from their own data (rule 8
	// of lockcore's doc) instead of a quarantine of -max-ttl (1 h).
	began := time.Now()
	out, code = devStackRun(t, env, "up")
	if code != 0 {
		t.Fatalf("dev-stack up after down: exit %d\n%s", code, out)
	}
	devStackPut(t, gateway+"/locks/after-the-restart", `{"ttl_ms": 10000}`, 201)
	took := time.Since(began)
	t.Logf("down then up: first 201 %v after up began (it builds the binaries and waits for every part)", took.Round(time.Millisecond))
	if took > 30*time.Second {
		t.Errorf("first 201 %v after up began", took)
	}
	devStackPut(t, gateway+"/locks/held-across-a-restart", `{"ttl_ms": 1000}`, 409) // still held
}

// devStackPut PUTs body to url, retrying a 503 for up to 10 s, and fails
// the test unless the answer has status want; it returns the answer's
// fencing token (0 when it has none).
func devStackPut(t *testing.T, url, body string, want int) int64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		req, _ := http.NewRequest("PUT", url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 503 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if resp.StatusCode != want {
			t.Fatalf("PUT %s: %d %s, want %d", url, resp.StatusCode, raw, want)
		}
		var v struct {
			Token int64 `json:"fencing_token"`
		}
		_ = json.Unmarshal(raw, &v)
		return v.Token
	}
}

// readmeLine returns the line of README.md that starts with prefix.
func readmeLine(t *testing.T, prefix string) string {
	t.Helper()
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(raw)) {
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
	t.Fatalf("no line starting with %q in README.md", prefix)
	return ""
}
