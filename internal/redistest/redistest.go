// Package redistest starts real redis-server processes for tests.
//
// Each Server is a child process on a free loopback port with its own data
// directory under t.TempDir(). Tests own their servers: they can kill, pause
// (SIGSTOP), resume and restart them, and every server is stopped by
// t.Cleanup. Nothing on the machine outside the test's own processes is used.
//
// Integration tests call Start; under `go test -short` Start skips the test,
// and otherwise a missing redis-server binary fails the test with a message
// that says what to install.
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/freeport"
	"github.com/lockgate/lockgate/internal/proc"
)

// Server is one redis-server child process owned by a test.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	args []string
	proc proc.Process
	// sentinel is the monitor line of a Sentinel (see StartSentinel), or
	// "" for a plain server.
	sentinel string
	// clockLib is the clock library loaded into the server (Options.Clock),
	// or ""; the clock read clockFake at real time clockReal (Unix ns) and
	// runs at clockRate (0 before the first SetClock: real).
	clockLib             string
	clockReal, clockFake int64
	clockRate            float64
}

// Options tune a Server. The zero value runs a server with no persistence.
type Options struct {
	// AOF enables appendonly persistence with appendfsync always, so a
	// killed and restarted server keeps every acknowledged write.
	AOF bool
	// Args are extra redis-server arguments, e.g. "--requirepass", "x".
	Args []string
	// Clock starts the server with a wall clock that Server.SetClock can
	// step and speed up or slow down (a library loaded into the process,
	// built with the C compiler the race detector needs).
	Clock bool
}

// Binary returns the path of redis-server. Under -short it skips t when the
// binary is missing; otherwise it fails t with installation advice.
func Binary(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs redis-server; skipped under -short")
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found in PATH: integration tests need Redis 7 " +
			"(Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis)")
	}
	return bin
}

// Start launches a redis-server on a free loopback port and waits until it
// answers PING. The server is killed when the test ends.
func Start(t testing.TB, opts *Options) *Server {
	t.Helper()
	bin := Binary(t)
	if opts == nil {
		opts = &Options{}
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir()}
	s.args = []string{"--bind", "127.0.0.1", "--save", "", "--dir", s.dir,
		"--protected-mode", "no", "--daemonize", "no", "--logfile", "redis.log",
		"--maxmemory-policy", "noeviction", "--repl-backlog-ttl", "0"}
	if opts.AOF {
		s.args = append(s.args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		s.args = append(s.args, "--appendonly", "no")
	}
	s.args = append(s.args, opts.Args...)
	if opts.Clock {
		s.clockLib = clockLibrary(t, s.dir)
	}
	s.start(t)
	return s
}

// start launches s on a free port (package freeport), trying another port
// when one was taken meanwhile, and kills it when the test ends.
func (s *Server) start(t testing.TB) {
	t.Helper()
	var lastErr error
	for range 5 {
		port, err := freeport.Port()
		if err != nil {
			t.Fatalf("redistest: no free port: %v", err)
		}
		s.port = port
		if lastErr = s.launch(); lastErr == nil {
			t.Cleanup(s.proc.Kill)
			return
		}
	}
	t.Fatalf("redistest: redis-server did not start: %v", lastErr)
}

// StartSentinel launches a Redis Sentinel (redis-server --sentinel) on a
// free loopback port that monitors master under the name name, alone (a
// quorum of 1), and fails it over after a second without answers. It is
// killed when the test ends.
func StartSentinel(t testing.TB, master *Server, name string) *Server {
	t.Helper()
	s := &Server{t: t, bin: Binary(t), dir: t.TempDir()}
	s.sentinel = fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1\n"+
		"sentinel down-after-milliseconds %s 1000\nsentinel failover-timeout %s 3000\n", name, master.port, name, name)
	s.args = []string{"--bind", "127.0.0.1", "--protected-mode", "no", "--daemonize", "no",
		"--logfile", "sentinel.log", "--dir", s.dir}
	s.start(t)
	return s
}

// StartN starts n independent servers.
func StartN(t testing.TB, n int, opts *Options) []*Server {
	t.Helper()
	out := make([]*Server, n)
	for i := range out {
		out[i] = Start(t, opts)
	}
	return out
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL is the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr() }

// Dir is the server's data directory (its AOF lives here).
func (s *Server) Dir() string { return s.dir }

// Kill sends SIGKILL and waits for the process to exit. Killing a stopped
// server is a no-op.
func (s *Server) Kill() { s.proc.Kill() }

// Pause freezes the process with SIGSTOP: connections stay open but nothing
// is answered, like a node stuck in a long pause or behind a black-holing
// network.
func (s *Server) Pause() {
	s.t.Helper()
	if err := s.proc.Pause(); err != nil {
		s.t.Fatalf("redistest: %v", err)
	}
}

// Resume continues a paused process with SIGCONT.
func (s *Server) Resume() {
	s.t.Helper()
	if err := s.proc.Resume(); err != nil {
		s.t.Fatalf("redistest: %v", err)
	}
}

// Restart starts a killed server again on the same port and data directory
// and waits until it answers PING. With AOF its data survives.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		if err = s.launch(); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond) // the old socket may linger briefly
	}
	s.t.Fatalf("redistest: restart on port %d: %v", s.port, err)
}

// RestartEmpty kills the server, deletes everything in its data directory
// but its log and its clock (Options.Clock) (the AOF and any RDB snapshot),
// and starts it again on the same port: the server comes back answering
// PING with no data, as a node that lost its disk would, on the same host
// clock.
func (s *Server) RestartEmpty() {
	s.t.Helper()
	s.Kill()
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		s.t.Fatalf("redistest: read data directory: %v", err)
	}
	for _, e := range entries {
		switch e.Name() {
		case "redis.log", "clock", "clock.so", "clock.c":
			continue
		}
		if err := os.RemoveAll(s.dir + "/" + e.Name()); err != nil {
			s.t.Fatalf("redistest: wipe data directory: %v", err)
		}
	}
	s.Restart()
}

// Pid is the process id of the running (or paused) redis-server, or 0 when
// it is not running. Benchmarks read its CPU time from /proc/<pid>/stat.
func (s *Server) Pid() int { return s.proc.Pid() }

// Running reports whether the process is running (paused counts as running).
func (s *Server) Running() bool { return s.proc.Running() }

// launch starts the server on its port and waits until it answers PING.
func (s *Server) launch() error {
	args := append([]string{"--port", strconv.Itoa(s.port)}, s.args...)
	if s.sentinel != "" {
		conf := filepath.Join(s.dir, "sentinel.conf")
		if err := os.WriteFile(conf, []byte(s.sentinel), 0o600); err != nil {
			return err
		}
		args = append([]string{conf, "--sentinel"}, args...)
	}
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	if s.clockLib != "" {
		cmd.Env = s.clockEnv()
	}
	if err := s.proc.Launch(cmd, func() error { return ping(s.Addr()) }, 5*time.Millisecond, 5*time.Second); err != nil {
		return fmt.Errorf("redis-server on port %d: %w: %s", s.port, err, s.logTail())
	}
	return nil
}

func (s *Server) logTail() string {
	b, err := os.ReadFile(s.dir + "/redis.log")
	if err != nil {
		return "(no log)"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " | ")
}

func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return errors.New("unexpected reply " + strings.TrimSpace(line))
	}
	return nil
}
