package proc_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
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

// sleeping is a readiness check: cmd runs sleep (a shell has set its traps
// and exec'd it).
func sleeping(cmd *exec.Cmd) func() error {
	return func() error {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/comm")
		if err != nil || strings.TrimSpace(string(b)) != "sleep" {
			return errors.New("not sleeping yet")
		}
		return nil
	}
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
		name   string
		cmd    *exec.Cmd
		ready  func() error
		within time.Duration
		want   error
	}{
		{"exits at start", exec.Command("sh", "-c", "exit 3"), func() error { return errors.New("never") }, time.Minute, proc.ErrExited},
		{"never ready", sleeper(), func() error { return errors.New("never") }, 300 * time.Millisecond, proc.ErrNotReady},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p proc.Process
			err := p.Launch(tc.cmd, tc.ready, 5*time.Millisecond, tc.within)
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

// signaled returns the signal that ended cmd, or 0.
func signaled(cmd *exec.Cmd) syscall.Signal {
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ws.Signal()
	}
	return 0
}

func TestPauseResumeKill(t *testing.T) {
	// ignoresTerm is a child that SIGTERM does not end.
	ignoresTerm := func() *exec.Cmd { return exec.Command("sh", "-c", "trap '' TERM; exec sleep 60") }
	// pause stops the child and waits until it is stopped.
	pause := func(t *testing.T, p *proc.Process) {
		t.Helper()
		if err := p.Pause(); err != nil {
			t.Fatal(err)
		}
		if pid := p.Pid(); !eventually(pid, func(s string) bool { return s == "T" }) {
			t.Fatalf("paused process in state %q, want T (stopped)", state(pid))
		}
	}
	for _, tc := range []struct {
		name string
		cmd  func() *exec.Cmd
		stop func(t *testing.T, p *proc.Process)
		// The signal that must end the child, and the least and most time
		// stop may take.
		want     syscall.Signal
		min, max time.Duration
	}{
		{"kill", sleeper, func(_ *testing.T, p *proc.Process) { p.Kill() }, syscall.SIGKILL, 0, 5 * time.Second},
		{"kill when paused", sleeper, func(t *testing.T, p *proc.Process) { pause(t, p); p.Kill() }, syscall.SIGKILL, 0, 5 * time.Second},
		{"terminate", sleeper, func(_ *testing.T, p *proc.Process) { p.Terminate(10 * time.Second) }, syscall.SIGTERM, 0, 5 * time.Second},
		// Paused, SIGTERM would wait for SIGCONT: it must end well before
		// the grace, by SIGTERM.
		{"terminate when paused", sleeper, func(t *testing.T, p *proc.Process) { pause(t, p); p.Terminate(10 * time.Second) }, syscall.SIGTERM, 0, 5 * time.Second},
		{"terminate one that ignores SIGTERM", ignoresTerm, func(_ *testing.T, p *proc.Process) { p.Terminate(200 * time.Millisecond) }, syscall.SIGKILL, 200 * time.Millisecond, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p proc.Process
			cmd := tc.cmd()
			if err := p.Launch(cmd, sleeping(cmd), time.Millisecond, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			pid, done := p.Pid(), p.Done()
			pause(t, &p)
			if err := p.Resume(); err != nil {
				t.Fatal(err)
			}
			if !eventually(pid, func(s string) bool { return s != "T" && s != "" }) {
				t.Fatalf("resumed process in state %q", state(pid))
			}
			began := time.Now()
			tc.stop(t, &p)
			took := time.Since(began)
			select {
			case <-done:
			default:
				t.Fatal("stop returned before the process exited")
			}
			if sig := signaled(cmd); sig != tc.want || took < tc.min || took > tc.max {
				t.Fatalf("ended by signal %v after %v; want %v within %v to %v", sig, took, tc.want, tc.min, tc.max)
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
