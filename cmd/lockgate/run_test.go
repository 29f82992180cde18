package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/api"
	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/internal/testlog"
)

// clientGateway is the real gateway (run(), as main starts it) over three
// redis-server nodes, with node timeouts generous enough for a loaded
// machine and TTLs down to 500ms.
func clientGateway(t *testing.T) (*gateway, []*redistest.Server) {
	t.Helper()
	srvs := redistest.StartN(t, 3, nil)
	g := startGateway(t, []string{"-redis", redisURLs(srvs), "-node-timeout", "150ms", "-min-ttl", "500ms"}, nil)
	return g, srvs
}

// lockgateProc is this test binary run as the lockgate binary (TestMain
// calls main when LOCKGATETEST_RUN_MAIN=1), with args: a real process, with
// real signals and a real child.
type lockgateProc struct {
	cmd            *exec.Cmd
	stdout, stderr *testlog.Buffer
}

func startLockgate(t *testing.T, args ...string) *lockgateProc {
	t.Helper()
	return startLockgateEnv(t, nil, args...)
}

// startLockgateEnv is startLockgate with env added to the environment.
func startLockgateEnv(t *testing.T, env []string, args ...string) *lockgateProc {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &lockgateProc{stdout: &testlog.Buffer{}, stderr: &testlog.Buffer{}}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(append(os.Environ(), "LOCKGATETEST_RUN_MAIN=1"), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	// A command that outlives run holds the output pipes open: do not wait
	// for them for ever.
	p.cmd.WaitDelay = 5 * time.Second
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
	})
	return p
}

// wait waits at most d for the process and returns its exit status.
func (p *lockgateProc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- p.cmd.Wait() }()
	select {
	case <-errc:
	case <-time.After(d):
		_ = p.cmd.Process.Kill()
		<-errc
		t.Fatalf("lockgate %v still running after %v\nstdout: %s\nstderr: %s", p.cmd.Args[1:], d, p.stdout, p.stderr)
	}
	return exitStatus(p.cmd.ProcessState)
}

// waitFor polls until the file at path contains want, for at most d.
func waitFor(t *testing.T, path, want string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not contain %q after %v: %q", path, want, d, b)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func runArgs(g *gateway, lock string, extra ...string) []string {
	return append([]string{"run", "--gateway", g.base, "--lock", lock}, extra...)
}

// The command gets the lock's resource, lease id and fencing token in its
// environment, its exit status is run's, and the lock is released when it
// exits.
func TestRunPassesTheLockAndTheExitStatus(t *testing.T) {
	g, _ := clientGateway(t)
	tests := []struct {
		name   string
		script string
		want   int
	}{
		{"a command that succeeds", "exit 0", 0},
		{"a command that fails", "exit 3", 3},
		{"a command that exits 42", "exit 42", 42},
		{"a command killed by SIGKILL", "kill -KILL $$", 128 + 9},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lock := "run-env-" + strconv.Itoa(i)
			script := `printf '%s|%s|%s' "$LOCKGATE_RESOURCE" "$LOCKGATE_FENCING_TOKEN" "$LOCKGATE_LEASE_ID"; ` + tt.script
			p := startLockgate(t, runArgs(g, lock, "--ttl", "2s", "--", "sh", "-c", script)...)
			if got := p.wait(t, 20*time.Second); got != tt.want {
				t.Fatalf("exit status %d, want %d; stderr: %s", got, tt.want, p.stderr)
			}
			parts := strings.Split(p.stdout.String(), "|")
			if len(parts) != 3 || parts[0] != lock || !regexp.MustCompile(`^[1-9][0-9]*$`).MatchString(parts[1]) ||
				!regexp.MustCompile(`^[A-Za-z0-9_-]{16,128}$`).MatchString(parts[2]) {
				t.Fatalf("the command saw resource|token|lease %q", p.stdout)
			}
			if a := g.do(t, http.MethodGet, "/locks/"+lock, ""); a.status != http.StatusNotFound {
				t.Fatalf("after run: GET %d %s, want 404 (released)", a.status, a.body)
			}
		})
	}
}

// A lock held by another lease: run exits 75 with a message, and the
// command never starts. A command that does not exist: 127.
func TestRunWhenTheLockCannotBeTakenOrTheCommandStarted(t *testing.T) {
	g, _ := clientGateway(t)
	if a := g.do(t, http.MethodPut, "/locks/run-taken", `{"ttl_ms":30000}`); a.status != http.StatusCreated {
		t.Fatalf("PUT: %d %s", a.status, a.body)
	}
	marker := filepath.Join(t.TempDir(), "ran")
	start := time.Now()
	p := startLockgate(t, runArgs(g, "run-taken", "--wait", "300ms", "--", "touch", marker)...)
	if got := p.wait(t, 20*time.Second); got != exitTaken {
		t.Fatalf("exit status %d, want %d; stderr: %s", got, exitTaken, p.stderr)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("gave up after %v, before --wait 300ms", took)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran without the lock")
	}
	if s := p.stderr.String(); !strings.Contains(s, "lock run-taken not taken") || strings.Count(s, "\n") != 1 {
		t.Errorf("stderr %q, want one line saying the lock was not taken", s)
	}

	p = startLockgate(t, runArgs(g, "run-nocmd", "--", filepath.Join(t.TempDir(), "no-such-command"))...)
	if got := p.wait(t, 20*time.Second); got != exitNotFound {
		t.Fatalf("missing command: exit status %d, want %d; stderr: %s", got, exitNotFound, p.stderr)
	}
	if a := g.do(t, http.MethodGet, "/locks/run-nocmd", ""); a.status != http.StatusNotFound {
		t.Fatalf("after a command that did not start: GET %d, want 404 (released)", a.status)
	}
}

// SIGINT and SIGTERM sent to run reach the command, which decides what to
// do: here it exits 7, and run exits 7 too, releasing the lock.
func TestRunForwardsSignalsToTheCommand(t *testing.T) {
	g, _ := clientGateway(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := t.TempDir()
			log := filepath.Join(dir, "log")
			lock := "run-signal-" + strconv.Itoa(int(sig))
			script := fmt.Sprintf(`trap 'echo got-signal >> %s; exit 7' INT TERM; echo ready >> %s; while :; do sleep 0.02; done`, log, log)
			p := startLockgate(t, runArgs(g, lock, "--ttl", "2s", "--", "sh", "-c", script)...)
			waitFor(t, log, "ready", 20*time.Second)
			if err := p.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if got := p.wait(t, 10*time.Second); got != 7 {
				t.Fatalf("exit status %d, want 7 (the command's); stderr: %s", got, p.stderr)
			}
			waitFor(t, log, "got-signal", time.Second)
			if a := g.do(t, http.MethodGet, "/locks/"+lock, ""); a.status != http.StatusNotFound {
				t.Fatalf("after run: GET %d, want 404", a.status)
			}
		})
	}
}

// When the lock is lost (its keys deleted on every node behind the
// gateway's back), the command gets SIGTERM within one renewal period
// (TTL/3), and SIGKILL after --kill-after if it ignores SIGTERM; run exits
// 70 saying why.
func TestRunStopsTheCommandWhenTheLockIsLost(t *testing.T) {
	g, srvs := clientGateway(t)
	const ttl = 1500 * time.Millisecond
	const period = ttl / 3
	tests := []struct {
		name     string
		trap     string // the command's handling of SIGTERM
		wantKill bool
	}{
		{"a command that stops on SIGTERM", `trap 'echo "term $(date +%s%N)" >> LOG; exit 143' TERM`, false},
		{"a command that ignores SIGTERM", `trap 'echo "term $(date +%s%N)" >> LOG' TERM`, true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "log")
			lock := "run-lost-" + strconv.Itoa(i)
			script := strings.ReplaceAll(tt.trap, "LOG", log) + `; echo ready >> ` + log + `; while :; do sleep 0.02; done`
			p := startLockgate(t, runArgs(g, lock, "--ttl", ttl.String(), "--kill-after", "500ms", "--", "sh", "-c", script)...)
			waitFor(t, log, "ready", 20*time.Second)
			for _, s := range srvs {
				rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
				if err := rc.Del(context.Background(), "lockgate:{"+lock+"}:lock").Err(); err != nil {
					t.Fatal(err)
				}
				rc.Close()
			}
			deleted := time.Now()
			waitFor(t, log, "term ", 3*ttl)
			status := p.wait(t, 5*time.Second)
			exited := time.Since(deleted)
			b, _ := os.ReadFile(log)
			m := regexp.MustCompile(`term (\d+)`).FindSubmatch(b)
			ns, _ := strconv.ParseInt(string(m[1]), 10, 64)
			termAfter := time.Unix(0, ns).Sub(deleted)
			t.Logf("SIGTERM handled %v after the delete (renewal period %v); run exited after %v with %d; stderr: %s",
				termAfter.Round(time.Millisecond), period, exited.Round(time.Millisecond), status, p.stderr)
			// The trap runs between two 20ms sleeps: allow for that and a
			// loaded machine, not for a second renewal period.
			if termAfter > period+150*time.Millisecond {
				t.Errorf("the command got SIGTERM %v after the lock was lost, more than one renewal period (%v)", termAfter, period)
			}
			if status != exitLost || !strings.Contains(p.stderr.String(), "lost") {
				t.Errorf("run exited %d, want %d with a message saying the lock was lost", status, exitLost)
			}
			if tt.wantKill && (exited < 500*time.Millisecond || !strings.Contains(p.stderr.String(), "SIGKILL")) {
				t.Errorf("a command ignoring SIGTERM ended after %v; want SIGKILL after --kill-after 500ms", exited)
			}
		})
	}
}

// interval is one command's hold of the lock, from its own clock readings.
type interval struct{ start, stop int64 }

// readIntervals parses "start NS" and "stop NS" lines written by the
// commands, each prefixed with its id.
func readIntervals(t *testing.T, path string) map[string]*interval {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*interval{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var id, what string
		var ns int64
		if _, err := fmt.Sscan(line, &id, &what, &ns); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if out[id] == nil {
			out[id] = &interval{}
		}
		if what == "start" {
			out[id].start = ns
		} else {
			out[id].stop = ns
		}
	}
	return out
}

// overlaps returns the first pair of intervals that overlap, or "".
func overlaps(iv map[string]*interval) string {
	ids := make([]string, 0, len(iv))
	for id := range iv {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return iv[ids[i]].start < iv[ids[j]].start })
	for i := 1; i < len(ids); i++ {
		if iv[ids[i]].start < iv[ids[i-1]].stop {
			return ids[i-1] + " and " + ids[i]
		}
	}
	return ""
}

const holdScript = `echo "$ID start $(date +%s%N)" >> "$LOG"; sleep 0.3; echo "$ID stop $(date +%s%N)" >> "$LOG"`

// Three `run` invocations on one lock, started together, run their
// commands one after the other: the start and stop times the commands
// record never overlap. The same commands started without run do overlap,
// which shows the check can fail.
func TestThreeRunsOnOneLockNeverOverlap(t *testing.T) {
	g, _ := clientGateway(t)
	for _, locked := range []bool{true, false} {
		log := filepath.Join(t.TempDir(), "log")
		var wg sync.WaitGroup
		errs := make(chan string, 3)
		for i := range 3 {
			id := "cmd" + strconv.Itoa(i)
			args := []string{"sh", "-c", holdScript}
			var cmd *exec.Cmd
			if locked {
				bin, _ := os.Executable()
				cmd = exec.Command(bin, append(runArgs(g, "run-overlap", "--ttl", "1s", "--wait", "20s", "--"), args...)...)
				cmd.Env = append(os.Environ(), "LOCKGATETEST_RUN_MAIN=1")
			} else {
				cmd = exec.Command(args[0], args[1:]...)
			}
			cmd.Env = append(cmd.Environ(), "ID="+id, "LOG="+log)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := cmd.Run(); err != nil {
					errs <- fmt.Sprintf("%s: %v: %s", id, err, stderr.String())
				}
			}()
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Fatal(e)
		}
		iv := readIntervals(t, log)
		if len(iv) != 3 {
			t.Fatalf("locked=%v: %d commands recorded, want 3", locked, len(iv))
		}
		got := overlaps(iv)
		t.Logf("locked=%v: overlap %q", locked, got)
		if locked && got != "" {
			t.Errorf("under lockgate run, %s overlapped", got)
		}
		if !locked && got == "" {
			t.Errorf("without a lock the commands did not overlap: the check cannot tell")
		}
	}
}

// The scripting subcommands, in a shell: acquire --env, extend, status,
// release, and status again, which then says the lock is not held.
func TestScriptingSubcommandsInAShell(t *testing.T) {
	g, _ := clientGateway(t)
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	script := `set -e
eval "$(lockgate acquire --env --ttl 5s shell-lock)"
echo "token=$LOCKGATE_FENCING_TOKEN"
lockgate extend --ttl 10s > /dev/null
lockgate status shell-lock
lockgate release
if lockgate status shell-lock; then echo "still held"; exit 1; else echo "status=$?"; fi`
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = append(os.Environ(), "LOCKGATETEST_RUN_MAIN=1", "LOCKGATE_URL="+g.base)
	// "lockgate" is this test binary, through a function.
	cmd.Args = []string{"sh", "-c", "lockgate() { \"" + bin + "\" \"$@\"; }\n" + script}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 4 || lines[0] != "token=1" || lines[2] != "lockgate status: shell-lock is not held" || lines[3] != "status=3" {
		t.Fatalf("output:\n%s", out)
	}
	var info api.LockInfo
	if err := json.Unmarshal([]byte(lines[1]), &info); err != nil || info.Resource != "shell-lock" || info.FencingToken != 1 || info.TTLms != 10000 {
		t.Fatalf("status printed %q (%v)", lines[1], err)
	}
}

// Each subcommand exits 0 on success and otherwise non-zero with one line
// saying why.
func TestScriptingSubcommandsExitStatus(t *testing.T) {
	g, _ := clientGateway(t)
	env := envOf(map[string]string{"LOCKGATE_URL": g.base})
	call := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := subcommand(args[0], args[1:], env, &out, &errb)
		return code, out.String(), errb.String()
	}
	code, out, stderr := call("acquire", "--ttl", "5s", "--owner", "me", "script-lock")
	var lease api.Lease
	if code != 0 || json.Unmarshal([]byte(out), &lease) != nil || lease.FencingToken != 1 || lease.ValidityMs <= 0 {
		t.Fatalf("acquire: %d %q %q", code, out, stderr)
	}
	tests := []struct {
		name string
		args []string
		want int
		msg  string // in the one line on stderr
	}{
		{"acquire of a held lock", []string{"acquire", "script-lock"}, exitTaken, "409 Lock held by another lease"},
		{"extend by the holder", []string{"extend", "--lease-id", lease.LeaseID, "script-lock"}, 0, ""},
		{"extend by another lease", []string{"extend", "--lease-id", "another-lease-0123456789", "script-lock"}, exitFailed, "another lease"},
		{"extend with a wrong token", []string{"extend", "--lease-id", lease.LeaseID, "--if-token", "9", "script-lock"}, exitFailed, "If-Match"},
		{"status of a held lock", []string{"status", "script-lock"}, 0, ""},
		{"status of a free lock", []string{"status", "nobody-holds-this"}, exitNotHeld, "not held"},
		{"release by another lease", []string{"release", "--lease-id", "another-lease-0123456789", "script-lock"}, exitFailed, "another lease"},
		{"a bad TTL", []string{"acquire", "--ttl", "1ms", "other-lock"}, exitFailed, "ttl_ms"},
		{"no lock name", []string{"status"}, exitUsage, "no lock name"},
		{"no lease id", []string{"release", "script-lock"}, exitUsage, "no lease id"},
		{"an unreachable gateway", []string{"status", "--gateway", "http://127.0.0.1:1", "x"}, exitFailed, "no answer"},
		{"release by the holder", []string{"release", "--lease-id", lease.LeaseID, "script-lock"}, 0, ""},
		{"release again", []string{"release", "--lease-id", lease.LeaseID, "script-lock"}, exitFailed, "not held"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := call(tt.args...)
			if code != tt.want {
				t.Fatalf("exit %d, want %d; stderr %q", code, tt.want, stderr)
			}
			if tt.want == 0 && stderr != "" {
				t.Fatalf("stderr %q on success", stderr)
			}
			if tt.want != 0 && (!strings.Contains(stderr, tt.msg) || strings.Count(stderr, "\n") != 1) {
				t.Fatalf("stderr %q, want one line containing %q", stderr, tt.msg)
			}
		})
	}
}

// The variables acquire --env sets serve the next steps: status and acquire
// take the lock's name from LOCKGATE_RESOURCE as extend and release do,
// the lock has an owner status can show, and extend never prints the lease
// id (a secret: stdout ends up in logs).
func TestScriptStepsShareTheLockAndKeepTheLeaseIDOffStdout(t *testing.T) {
	g, _ := clientGateway(t)
	vars := map[string]string{"LOCKGATE_URL": g.base}
	call := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := subcommand(args[0], args[1:], envOf(vars), &out, &errb)
		return code, out.String(), errb.String()
	}
	code, out, stderr := call("acquire", "--env", "--ttl", "30s", "script-steps")
	if code != 0 {
		t.Fatalf("acquire --env: %d %q %q", code, out, stderr)
	}
	for _, line := range strings.Split(out, "\n") {
		if name, v, ok := strings.Cut(line, "="); ok {
			vars[name] = strings.Trim(v, "'")
		}
	}
	lease := vars["LOCKGATE_LEASE_ID"]
	if vars["LOCKGATE_RESOURCE"] != "script-steps" || lease == "" {
		t.Fatalf("acquire --env printed %q", out)
	}

	code, out, stderr = call("status")
	var info api.LockInfo
	if code != 0 || json.Unmarshal([]byte(out), &info) != nil || info.Resource != "script-steps" {
		t.Fatalf("status with LOCKGATE_RESOURCE: %d %q %q", code, out, stderr)
	}
	if !strings.HasPrefix(info.Owner, "lockgate-acquire@") {
		t.Errorf("owner %q, want acquire's default naming the machine", info.Owner)
	}
	if code, _, stderr := call("acquire"); code != exitTaken || !strings.Contains(stderr, "script-steps") {
		t.Errorf("acquire with LOCKGATE_RESOURCE of a held lock: %d %q, want %d naming script-steps", code, stderr, exitTaken)
	}

	code, out, stderr = call("extend")
	var ext map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &ext) != nil || ext["resource"] != "script-steps" || ext["fencing_token"] == nil {
		t.Fatalf("extend: %d %q %q", code, out, stderr)
	}
	if strings.Contains(out, lease) || ext["lease_id"] != nil {
		t.Errorf("extend printed the lease id: %q", out)
	}
	if code, _, stderr := call("release"); code != 0 {
		t.Fatalf("release: %d %q", code, stderr)
	}
	if code, _, _ := call("status"); code != exitNotHeld {
		t.Errorf("status after the release: %d, want %d", code, exitNotHeld)
	}
}

// A signal that reaches run while it waits for the lock ends the wait: run
// exits 128+N and the command never starts. A gateway that cannot be
// reached: 69.
func TestRunInterruptedOrWithoutAGateway(t *testing.T) {
	g, _ := clientGateway(t)
	if a := g.do(t, http.MethodPut, "/locks/run-interrupted", `{"ttl_ms":30000}`); a.status != http.StatusCreated {
		t.Fatalf("PUT: %d %s", a.status, a.body)
	}
	marker := filepath.Join(t.TempDir(), "ran")
	p := startLockgate(t, runArgs(g, "run-interrupted", "--wait", "30s", "--", "touch", marker)...)
	// Wait until the gateway holds run's request in its queue.
	if !g.waiters(t, 1, 20*time.Second) {
		t.Fatalf("run never waited; stderr: %s", p.stderr)
	}
	start := time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if got := p.wait(t, 5*time.Second); got != 128+int(syscall.SIGTERM) {
		t.Fatalf("exit status %d, want %d; stderr: %s", got, 128+int(syscall.SIGTERM), p.stderr)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("run took %v to give up its wait", took)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran")
	}

	p = startLockgate(t, "run", "--gateway", "http://127.0.0.1:1", "--lock", "x", "--", "touch", marker)
	if got := p.wait(t, 20*time.Second); got != exitUnavailable {
		t.Fatalf("no gateway: exit status %d, want %d; stderr: %s", got, exitUnavailable, p.stderr)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran without a gateway")
	}
}

// With a majority of the nodes frozen, renewals fail with 503 and are
// retried; the command gets SIGTERM before the validity last granted runs
// out: when it does, the lock's copy on the live node has time left.
func TestRunStopsTheCommandBeforeTheValidityEndsWhenAMajorityIsFrozen(t *testing.T) {
	g, srvs := clientGateway(t)
	log := filepath.Join(t.TempDir(), "log")
	// The command notes SIGTERM and keeps running, so that run (which
	// releases the lock once its command exits) leaves the lock alone until
	// its SIGKILL a second later, while this test reads the PTTL.
	script := fmt.Sprintf(`trap 'echo term >> %s' TERM; echo ready >> %s; while :; do sleep 0.02; done`, log, log)
	// A 3s TTL: Done closes 300ms before the validity ends, which leaves
	// room for the trap's latency and for this test's reading of the PTTL.
	p := startLockgate(t, runArgs(g, "run-frozen", "--ttl", "3s", "--kill-after", "1s", "--", "sh", "-c", script)...)
	waitFor(t, log, "ready", 20*time.Second)
	time.Sleep(1200 * time.Millisecond) // past the first renewal
	srvs[1].Pause()
	srvs[2].Pause()
	defer srvs[2].Resume()
	defer srvs[1].Resume()
	frozen := time.Now()
	waitFor(t, log, "term", 6*time.Second)
	rc := redis.NewClient(&redis.Options{Addr: srvs[0].Addr()})
	defer rc.Close()
	left, err := rc.PTTL(context.Background(), "lockgate:{run-frozen}:lock").Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGTERM handled %v after the freeze; the live node's copy had %v left", time.Since(frozen).Round(time.Millisecond), left)
	if left <= 0 {
		t.Errorf("the lock had expired on the live node (PTTL %v) when the command got SIGTERM", left)
	}
	if got := p.wait(t, 10*time.Second); got != exitLost {
		t.Errorf("exit status %d, want %d; stderr: %s", got, exitLost, p.stderr)
	}
}

// With access control on, --token-file carries the bearer token; a token
// the gateway does not know gets 77 from run and from acquire.
func TestRunAndAcquireWithABearerToken(t *testing.T) {
	srvs := redistest.StartN(t, 3, nil)
	dir := t.TempDir()
	const good = "good-token-0123456789abcdef"
	authFile := filepath.Join(dir, "tokens")
	if err := os.WriteFile(authFile, []byte(good+" * *\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, []string{"-redis", redisURLs(srvs), "-node-timeout", "150ms", "-min-ttl", "500ms", "-auth-file", authFile}, nil)
	goodFile, badFile := filepath.Join(dir, "good"), filepath.Join(dir, "bad")
	_ = os.WriteFile(goodFile, []byte(good+"\n"), 0o600)
	_ = os.WriteFile(badFile, []byte("bad-token-0123456789abcdef\n"), 0o600)

	p := startLockgate(t, runArgs(g, "run-auth", "--token-file", goodFile, "--", "true")...)
	if got := p.wait(t, 20*time.Second); got != 0 {
		t.Fatalf("good token: exit status %d; stderr: %s", got, p.stderr)
	}
	p = startLockgate(t, runArgs(g, "run-auth", "--token-file", badFile, "--", "true")...)
	if got := p.wait(t, 20*time.Second); got != exitDenied {
		t.Fatalf("bad token: exit status %d, want %d; stderr: %s", got, exitDenied, p.stderr)
	}
	if strings.Contains(p.stderr.String(), "bad-token") {
		t.Errorf("stderr shows the token: %s", p.stderr)
	}
	var out, errb bytes.Buffer
	if code := subcommand("acquire", []string{"--gateway", g.base, "--token-file", badFile, "x"}, envOf(nil), &out, &errb); code != exitDenied {
		t.Errorf("acquire with a bad token: exit %d, want %d (%s)", code, exitDenied, errb.String())
	}
}

// If run itself is killed (SIGKILL: nothing renews the lock any more), the
// command gets SIGTERM at once. (Without the parent-death signal this test
// fails, and its cleanup stops the orphaned command.)
func TestTheCommandHearsOfRunsDeath(t *testing.T) {
	g, _ := clientGateway(t)
	log := filepath.Join(t.TempDir(), "log")
	script := fmt.Sprintf(`trap 'echo term >> %s; exit 143' TERM; echo "ready $$" >> %s; while :; do sleep 0.02; done`, log, log)
	p := startLockgate(t, runArgs(g, "run-killed", "--ttl", "30s", "--", "sh", "-c", script)...)
	waitFor(t, log, "ready", 20*time.Second)
	b, _ := os.ReadFile(log)
	var pid int
	if _, err := fmt.Sscanf(string(b), "ready %d", &pid); err != nil || pid <= 1 {
		t.Fatalf("log %q: %v", b, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) }) // the command's group, if it outlived the test
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	waitFor(t, log, "term", 2*time.Second)
}
