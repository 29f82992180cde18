package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lockgate/lockgate/client"
)

// runCommand is `lockgate run`: take the lock, run the command while the
// watchdog keeps the lock alive, release it when the command exits, and exit
// with the command's status. If the lock is lost, the command's process group
// gets SIGTERM at once and SIGKILL after --kill-after, and run exits
// exitLost. SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to run go to the
// command's process group.
//
// The command runs in a process group of its own so that a lost lock stops
// every process it started (a shell's children too), not just the first. If
// run itself dies, the command gets SIGTERM (Linux's parent-death signal).
// The price: it is not the terminal's foreground group, so it should not
// read from a terminal.
func runCommand(args []string, getenv func(string) string, _, stderr io.Writer) int {
	fs, c := newFlags("run", getenv, stderr, "--lock NAME [flags] -- command [args...]\n\n"+
		"Runs the command while holding the lock, a distributed flock(1). The command gets\n"+
		"LOCKGATE_RESOURCE, LOCKGATE_LEASE_ID and LOCKGATE_FENCING_TOKEN in its environment.\n"+
		"Exit status: the command's (128+N if signal N killed it); 75 the lock is held by\n"+
		"another lease and --wait ran out; 69 the gateway could not be reached or refused;\n"+
		"77 access denied; 70 the lock was lost while the command ran (it was sent SIGTERM,\n"+
		"then SIGKILL after --kill-after); 126/127 the command could not be started; 64 usage.\n"+
		"With --permits K, NAME is a semaphore of K permits: the command runs while holding\n"+
		"one of them (up to K commands at once) and also gets LOCKGATE_PERMIT, its number;\n"+
		"75 then means all K are held, 64 that their holders use another K.\n"+
		"With --shared (or --exclusive), NAME is a readers-writer lock: the command runs with a\n"+
		"reader's hold (any number at once) or the writer's (alone), and also gets LOCKGATE_MODE;\n"+
		"75 then means the lock is held in a conflicting mode (a waiting writer keeps new\n"+
		"readers out).\n"+
		"With --set a,b,c (instead of --lock), the command runs while holding every lock of the\n"+
		"set, all or none (taken in one order: sets never deadlock); LOCKGATE_RESOURCE is the set\n"+
		"(its members sorted, joined by commas) and LOCKGATE_FENCING_TOKENS lists each member's\n"+
		"token (a=12,b=7,c=40) instead of LOCKGATE_FENCING_TOKEN; 75 then means a member is held.")
	ttl := fs.Duration("ttl", 30*time.Second, "lock TTL; the lock is renewed about every TTL/3")
	wait := fs.Duration("wait", 0, "how long to wait for a lock another lease holds")
	killAfter := fs.Duration("kill-after", 10*time.Second, "after a lost lock, SIGKILL this long after SIGTERM")
	owner := fs.String("owner", defaultOwner(), "label shown by status")
	permits := fs.Int("permits", 0, "hold one of the K permits of the semaphore NAME instead of the lock NAME (1 to 64)")
	shared := fs.Bool("shared", false, "hold a reader's hold on the readers-writer lock NAME instead of the lock NAME")
	exclusive := fs.Bool("exclusive", false, "hold the writer's hold on the readers-writer lock NAME instead of the lock NAME")
	set := fs.String("set", "", "hold every lock of the set a,b,c (all or none) instead of the lock NAME")
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	command := fs.Args()
	var members []string
	if *set != "" {
		if c.lock != "" || *permits > 0 || *shared || *exclusive {
			return c.usagef("--set takes a lock set: not with --lock, --permits, --shared or --exclusive")
		}
		members = strings.Split(*set, ",")
		c.lock = *set // named so in run's messages
	}
	switch {
	case c.lock == "":
		return c.usagef("--lock NAME (or --set a,b,c) is required")
	case len(command) == 0:
		return c.usagef("no command: lockgate run --lock NAME -- command [args...]")
	case badDurations(*ttl, *killAfter, *wait):
		return c.usagef("--ttl and --kill-after must be positive, --wait not negative")
	case *permits < 0 || *permits > 64:
		return c.usagef("--permits must be between 1 and 64 (0: a lock)")
	case *shared && *exclusive:
		return c.usagef("--shared and --exclusive exclude each other")
	case (*shared || *exclusive) && *permits > 0:
		return c.usagef("--permits takes a semaphore, --shared and --exclusive a readers-writer lock: not both")
	}
	mode := ""
	switch {
	case *shared:
		mode = "shared"
	case *exclusive:
		mode = "exclusive"
	}
	cl, err := c.client()
	if err != nil {
		return c.usagef("%v", err)
	}

	// Signals are caught from the start: one that arrives while waiting
	// for the lock ends the wait, and the command never starts.
	sigc := make(chan os.Signal, 8)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigc)
	ctx, cancel := context.WithCancel(context.Background())
	caught := make(chan os.Signal, 1)
	acquired, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case s := <-sigc:
			caught <- s
			cancel()
		case <-acquired:
		}
	}()
	var l *client.Lock
	if members != nil {
		l, err = cl.HoldSet(ctx, members, &client.LockOptions{TTL: *ttl, Wait: *wait, Owner: *owner})
	} else {
		l, err = take(ctx, cl, c.lock, *permits, mode, &client.LockOptions{TTL: *ttl, Wait: *wait, Owner: *owner})
	}
	close(acquired)
	<-watched
	cancel()
	select {
	case sig := <-caught:
		if err == nil {
			release(c, l)
		}
		return c.failf(128+sigNum(sig), "lock %s: interrupted by %v before the command started", c.lock, sig)
	default:
	}
	if err != nil {
		return c.failf(acquireExit(err), "lock %s not taken: %v", c.lock, err)
	}

	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = commandEnv(l, mode)
	// Pdeathsig: if run itself dies (SIGKILL, OOM), nobody renews the lock
	// any more, so the command is told at once.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		release(c, l)
		code := exitCannotExec
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = exitNotFound
		}
		return c.failf(code, "cannot start %s: %v", command[0], err)
	}
	pgid := cmd.Process.Pid
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()

	done := l.Done()
	var kill <-chan time.Time
	var lost error
	for waiting := true; waiting; {
		select {
		case sig := <-sigc:
			_ = syscall.Kill(-pgid, sig.(syscall.Signal))
		case <-done:
			done = nil
			lost = l.Err()
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			c.failf(0, "lock %s lost (%s): sent SIGTERM to the command, SIGKILL in %v", c.lock, why(lost), *killAfter)
			t := time.NewTimer(*killAfter)
			defer t.Stop()
			kill = t.C
		case <-kill:
			kill = nil
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			c.failf(0, "the command outlived --kill-after %v: sent SIGKILL", *killAfter)
		case <-exited:
			waiting = false
		}
	}
	if lost != nil {
		release(c, l) // in case the lock was only out of reach: free it now
		return c.failf(exitLost, "lock %s was lost while the command ran (%s); the command was stopped", c.lock, why(lost))
	}
	// Stop every straggler the command left in its group? No: a command
	// that exits and leaves a daemon behind meant to.
	release(c, l)
	return exitStatus(cmd.ProcessState)
}

// why is the reason a lock was lost, without the "lock lost" prefix.
func why(err error) string {
	return strings.TrimPrefix(err.Error(), client.ErrLost.Error()+": ")
}

// release lets go of the lock, saying so if that fails.
func release(c *common, l *client.Lock) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Release(ctx); err != nil && !errors.Is(err, client.ErrNotHeld) && !errors.Is(err, client.ErrHeldByOther) {
		c.failf(0, "release of lock %s failed (it expires by its TTL): %v", l.Resource(), err)
	}
}

// badDurations reports whether run's durations are out of range.
func badDurations(ttl, killAfter, wait time.Duration) bool {
	return ttl <= 0 || killAfter <= 0 || wait < 0
}

// commandEnv is the command's environment: run's, with the lock's (or
// permit's, or readers-writer hold's, or lock set's) resource, lease id
// and fencing token (a set's: every member's), the permit's number, and
// the hold's mode.
func commandEnv(l *client.Lock, mode string) []string {
	env := append(os.Environ(),
		"LOCKGATE_RESOURCE="+l.Resource(),
		"LOCKGATE_LEASE_ID="+l.LeaseID())
	if ms := l.Members(); ms != nil {
		tokens := make([]string, len(ms))
		for i, m := range ms {
			tokens[i] = m.Resource + "=" + strconv.FormatInt(m.FencingToken, 10)
		}
		env = append(env, "LOCKGATE_FENCING_TOKENS="+strings.Join(tokens, ","))
	} else {
		env = append(env, "LOCKGATE_FENCING_TOKEN="+strconv.FormatInt(l.FencingToken(), 10))
	}
	if l.Permit() >= 0 {
		env = append(env, "LOCKGATE_PERMIT="+strconv.Itoa(l.Permit()))
	}
	if mode != "" {
		env = append(env, "LOCKGATE_MODE="+mode)
	}
	return env
}

// take holds the lock name, or with permits > 0 one of the permits of the
// semaphore name, or with mode "shared" or "exclusive" a hold on the
// readers-writer lock name.
func take(ctx context.Context, cl *client.Client, name string, permits int, mode string, o *client.LockOptions) (*client.Lock, error) {
	if permits > 0 {
		return cl.HoldPermit(ctx, name, permits, o)
	}
	if mode != "" {
		return cl.HoldRW(ctx, name, mode == "exclusive", o)
	}
	return cl.Lock(ctx, name, o)
}

// acquireExit is run's status when the lock could not be taken.
func acquireExit(err error) int {
	switch {
	case errors.Is(err, client.ErrTaken), errors.Is(err, client.ErrSemaphoreFull):
		return exitTaken
	case errors.Is(err, client.ErrPermitsMismatch):
		return exitUsage
	case errors.Is(err, client.ErrNotSupported):
		return exitUnavailable
	case errors.Is(err, client.ErrUnauthorized), errors.Is(err, client.ErrForbidden):
		return exitDenied
	case errors.Is(err, client.ErrBadRequest):
		return exitUsage
	}
	return exitUnavailable
}

// exitStatus is the command's exit code, or 128+N if signal N killed it.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

func sigNum(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return int(n)
	}
	return 1
}

func defaultOwner() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("lockgate-run@%s:%d", host, os.Getpid())
}
