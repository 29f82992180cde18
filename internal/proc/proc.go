// Package proc runs the child processes that tests and benchmarks start,
// kill, pause and start again (redis-server, etcd, lockgate itself).
//
// A Process is started with a readiness check and counts as running only
// once the check passes. It is killed with its parent (Linux's parent-death
// signal), so no child outlives a test binary that crashed or was killed.
package proc

import (
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Errors of Launch, Pause and Resume.
var (
	// ErrExited: the process exited before its readiness check passed.
	ErrExited = errors.New("proc: exited at start")
	// ErrNotReady: the readiness check did not pass in time; the process
	// was killed.
	ErrNotReady = errors.New("proc: not ready in time")
	// ErrNotRunning: there is no process to pause or resume.
	ErrNotRunning = errors.New("proc: not running")
)

// Process is one child process at a time: launched, then killed, then maybe
// launched again. The zero value is a Process that is not running. It is
// safe for concurrent use.
type Process struct {
	launch sync.Mutex // held by Launch: one launch at a time
	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{} // closed when cmd has exited
	paused bool
}

// Launch starts cmd, which must not have been started, and calls ready every
// poll until it returns nil: then the process is running. It fails with
// ErrExited when the process exits first, and with ErrNotReady (wrapping
// ready's last error) when within passes first, after killing it. A
// Process that is running must be killed before it is launched again.
func (p *Process) Launch(cmd *exec.Cmd, ready func() error, poll, within time.Duration) error {
	p.launch.Lock()
	defer p.launch.Unlock()
	if p.Running() {
		return errors.New("proc: launch while running")
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	var last error
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(poll) {
		select {
		case <-done:
			return ErrExited
		default:
		}
		if last = ready(); last == nil {
			p.mu.Lock()
			p.cmd, p.done, p.paused = cmd, done, false
			p.mu.Unlock()
			return nil
		}
	}
	_ = cmd.Process.Kill()
	<-done
	return fmt.Errorf("%w (%v): %v", ErrNotReady, within, last)
}

// Kill sends SIGKILL and waits until the process has exited; a paused one
// is continued too. It does nothing when no process runs.
func (p *Process) Kill() {
	p.mu.Lock()
	cmd, done, paused := p.cmd, p.done, p.paused
	p.cmd, p.paused = nil, false
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	if paused {
		_ = cmd.Process.Signal(syscall.SIGCONT)
	}
	<-done
}

// Terminate sends SIGTERM (and SIGCONT, in case it is paused) and waits up
// to grace for the process to exit, then kills it. It does nothing when no
// process runs.
func (p *Process) Terminate(grace time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
	}
	p.mu.Lock()
	if p.cmd == cmd {
		p.cmd, p.paused = nil, false
	}
	p.mu.Unlock()
}

// signal sends sig to the process and records whether it leaves it paused
// (SIGSTOP) or not (SIGCONT), which Kill needs to know. It fails with
// ErrNotRunning when no process runs.
func (p *Process) signal(sig syscall.Signal, paused bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("signal %v: %w", sig, ErrNotRunning)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %v: %w", sig, err)
	}
	p.paused = paused
	return nil
}

// Pause freezes the process with SIGSTOP: its sockets stay open, but it
// answers nothing.
func (p *Process) Pause() error { return p.signal(syscall.SIGSTOP, true) }

// Resume continues a paused process with SIGCONT.
func (p *Process) Resume() error { return p.signal(syscall.SIGCONT, false) }

// Pid is the process id of the running (or paused) process, or 0.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Running reports whether a launched process has not been killed (a paused
// one counts as running).
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil
}

// Done returns a channel closed once the running process has exited, for
// whatever reason, or nil when none runs.
func (p *Process) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return nil
	}
	return p.done
}
