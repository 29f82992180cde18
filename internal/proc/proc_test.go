package proc_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/proc"
)

func ok() error { return nil }

// state is the process state letter of pid in /proc (R, S, T for stopped,
// ...), or "" when there is no such process.
func state(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return fields[0]
}

// eventually reports whether pid's state satisfies cond within 5 s: a
// signal is delivered asynchronously.
func eventually(pid int, cond func(string) bool) bool {
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if cond(state(pid)) {
			return true
		}
	}
	return false
}

func sleeper() *exec.Cmd { return exec.Command("sleep", "60") }

func TestLaunchWaitsUntilReady(t *testing.T) {
	var p proc.Process
	calls := 0
	ready := func() error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	}
	if err := p.Launch(sleeper(), ready, time.Millisecond, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	if calls != 3 || !p.Running() || p.Pid() == 0 || state(p.Pid()) == "" {
		t.Fatalf("after %d checks: running %v, pid %d (state %q); want running after the third", calls, p.Running(), p.Pid(), state(p.Pid()))
	}
	if err := p.Launch(sleeper(), ok, time.Millisecond, time.Second); err == nil {
		t.Fatal("a second Launch while running succeeded")
	}
}

func TestLaunchFails(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cmd   *exec.Cmd
		ready func() error
		want  error
	}{
		{"exits at start", exec.Command("sh", "-c", "exit 3"), func() error { return errors.New("never") }, proc.ErrExited},
		{"never ready", sleeper(), func() error { return errors.New("never") }, proc.ErrNotReady},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p proc.Process
			err := p.Launch(tc.cmd, tc.ready, 5*time.Millisecond, 300*time.Millisecond)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if p.Running() || p.Pid() != 0 || p.Done() != nil {
				t.Fatal("a process that failed to launch counts as running")
			}
			if tc.cmd.ProcessState == nil {
				t.Fatal("the child was not waited for")
			}
			if !errors.Is(p.Pause(), proc.ErrNotRunning) {
				t.Fatal("Pause of a process that is not running did not fail with ErrNotRunning")
			}
		})
	}
}

func TestPauseResumeKill(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func(p *proc.Process)
	}{
		{"kill", func(p *proc.Process) { p.Kill() }},
		{"kill when paused", func(p *proc.Process) {
			if err := p.Pause(); err != nil {
				t.Fatal(err)
			}
			p.Kill()
		}},
		{"terminate", func(p *proc.Process) { p.Terminate(5 * time.Second) }},
		{"terminate when paused", func(p *proc.Process) {
			if err := p.Pause(); err != nil {
				t.Fatal(err)
			}
			p.Terminate(5 * time.Second)
		}},
		{"terminate one that ignores SIGTERM", func(p *proc.Process) { p.Terminate(100 * time.Millisecond) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p proc.Process
			cmd := sleeper()
			if strings.Contains(tc.name, "ignores") {
				cmd = exec.Command("sh", "-c", "trap '' TERM; while :; do sleep 1; done")
			}
			if err := p.Launch(cmd, ok, time.Millisecond, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			pid, done := p.Pid(), p.Done()
			if err := p.Pause(); err != nil {
				t.Fatal(err)
			}
			if !eventually(pid, func(s string) bool { return s == "T" }) {
				t.Fatalf("paused process in state %q, want T (stopped)", state(pid))
			}
			if err := p.Resume(); err != nil {
				t.Fatal(err)
			}
			if !eventually(pid, func(s string) bool { return s != "T" && s != "" }) {
				t.Fatalf("resumed process in state %q", state(pid))
			}
			tc.stop(&p)
			select {
			case <-done:
			default:
				t.Fatal("stop returned before the process exited")
			}
			if p.Running() || state(pid) != "" {
				t.Fatalf("after stop: running %v, state %q", p.Running(), state(pid))
			}
			p.Kill() // a no-op now
			p.Terminate(time.Second)
			if err := p.Launch(sleeper(), ok, time.Millisecond, 5*time.Second); err != nil {
				t.Fatalf("launch again: %v", err)
			}
			p.Kill()
		})
	}
}

// ExampleProcess starts a child, pauses and resumes it, and kills it.
func ExampleProcess() {
	var p proc.Process
	if err := p.Launch(exec.Command("sleep", "60"), func() error { return nil }, 10*time.Millisecond, 5*time.Second); err != nil {
		panic(err)
	}
	_ = p.Pause()  // SIGSTOP: it answers nothing, its sockets stay open
	_ = p.Resume() // SIGCONT
	p.Kill()       // SIGKILL, and wait until it has exited
	fmt.Println(p.Running())
	// Output: false
}
