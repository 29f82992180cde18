package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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

	"github.com/lockgate/lockgate/api"
	"github.com/lockgate/lockgate/internal/redistest"
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

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// TestDevStack brings scripts/dev-stack up as a developer would (on free
// ports, in a temporary state directory), walks through acquire → 409 →
// release and a fenced write to the demo store, checks that the stack runs
// with docker-compose.yml's settings, and brings it down.
func TestDevStack(t *testing.T) {
	redistest.Binary(t) // skips under -short; fails with install advice without redis-server
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatal("redis-cli not found: apt-get install redis-server (it brings redis-tools)")
	}
	ports := freePorts(t, 5)
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

	t.Run("the README's walkthroughs run twice in a row", func(t *testing.T) {
		script := readmeWalkthroughs(t)
		script = strings.ReplaceAll(script, "localhost:8080", "127.0.0.1:"+strconv.Itoa(ports[3]))
		script = strings.ReplaceAll(script, "localhost:8081", "127.0.0.1:"+strconv.Itoa(ports[4]))
		for run := 1; run <= 2; run++ {
			cmd := exec.Command("bash", "-e", "-c", script)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil || stderr.Len() > 0 {
				t.Fatalf("paste %d: %v\nstderr: %s\nstdout:\n%s", run, err, stderr.String(), out)
			}
			for _, want := range []string{
				"HTTP/1.1 201 Created", "urn:lockgate:problem:lock-taken", "urn:lockgate:problem:held-by-another-lease",
				"urn:lockgate:problem:stale-fencing-token", "final by client 2",
			} {
				if !strings.Contains(string(out), want) {
					t.Errorf("paste %d: no %q in the output:\n%s", run, want, out)
				}
			}
			// Steps 6 and 10, and the fencing story's 1, 2 and 5: 204s.
			if n := strings.Count(string(out), "HTTP/1.1 204 No Content"); n != 5 {
				t.Errorf("paste %d: %d answers 204, want 5:\n%s", run, n, out)
			}
		}
		// The extraction fails loudly on an answer without the member.
		probe := exec.Command("bash", "-e", "-c", readmeLine(t, "field() {")+"\n"+
			`T=$(echo '{"type":"urn:lockgate:problem:lock-taken","status":409}' | field fencing_token); echo "went on with T=$T"`)
		out, err := probe.CombinedOutput()
		if err == nil || strings.Contains(string(out), "went on") || !strings.Contains(string(out), "no fencing_token in:") {
			t.Errorf("field on a 409: %v\n%s", err, out)
		}
	})

	t.Run("the walkthrough works against it", func(t *testing.T) {
		g := &gateway{base: "http://127.0.0.1:" + strconv.Itoa(ports[3])}
		lease := []string{api.HeaderLeaseID, "devstack-lease-0123456789"}
		a := g.do(t, "PUT", "/locks/invoice-42", `{"ttl_ms":30000,"owner":"billing-worker-1"}`, lease...)
		if a.status != http.StatusCreated {
			t.Fatalf("acquire: %d %s", a.status, a.body)
		}
		token := a.header.Get(api.HeaderFencingToken)
		if a := g.do(t, "PUT", "/locks/invoice-42", "", lease...); a.status != http.StatusOK || a.header.Get(api.HeaderFencingToken) != token {
			t.Errorf("same lease again: %d token %s, want 200 and token %s", a.status, a.header.Get(api.HeaderFencingToken), token)
		}
		if a := g.do(t, "PUT", "/locks/invoice-42", ""); a.status != http.StatusConflict || a.header.Get(api.HeaderRetryAfter) == "" {
			t.Errorf("another lease: %d %s, want 409 with Retry-After", a.status, a.body)
		}
		if a := g.do(t, "GET", "/locks/invoice-42", ""); a.status != http.StatusOK || !strings.Contains(a.body, "billing-worker-1") {
			t.Errorf("inspect: %d %s", a.status, a.body)
		}
		if a := g.do(t, "PATCH", "/locks/invoice-42", `{"ttl_ms":60000}`, lease...); a.status != http.StatusOK {
			t.Errorf("extend: %d %s", a.status, a.body)
		}
		if a := g.do(t, "DELETE", "/locks/invoice-42", "", lease...); a.status != http.StatusNoContent {
			t.Errorf("release: %d %s", a.status, a.body)
		}
		next := g.do(t, "PUT", "/locks/invoice-42", "")
		old, _ := strconv.Atoi(token)
		newer, _ := strconv.Atoi(next.header.Get(api.HeaderFencingToken))
		if next.status != http.StatusCreated || newer <= old {
			t.Fatalf("next holder: %d token %d, want 201 and a token above %d", next.status, newer, old)
		}

		// The demo store refuses the old holder's token once it saw the new one.
		kv := &gateway{base: "http://127.0.0.1:" + strconv.Itoa(ports[4])}
		put := func(tok int) int {
			return kv.do(t, "PUT", "/kv/invoice-42", "", "Fencing-Token", strconv.Itoa(tok), "Content-Type", "text/plain").status
		}
		if st := put(newer); st != http.StatusNoContent {
			t.Errorf("fencedkv write with the new token: %d", st)
		}
		if st := put(old); st != http.StatusConflict {
			t.Errorf("fencedkv write with the old token: %d, want 409", st)
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
}

// readmeWalkthroughs returns the sh blocks of README.md's two walkthroughs,
// in order, as one script.
func readmeWalkthroughs(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var script strings.Builder
	section, inBlock, blocks := "", false, 0
	for line := range strings.Lines(string(raw)) {
		switch {
		case strings.HasPrefix(line, "## "):
			section = strings.TrimSpace(line)
		case line == "```sh\n" && strings.HasSuffix(section, "(paste it)"):
			inBlock = true
			blocks++
		case inBlock && line == "```\n":
			inBlock = false
		case inBlock:
			script.WriteString(line)
		}
	}
	if blocks < 4 {
		t.Fatalf("found %d sh blocks in README.md's walkthroughs, want at least 4", blocks)
	}
	return script.String()
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
