package redistest

import (
	"bufio"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestServerLifecycle(t *testing.T) {
	s := Start(t, &Options{AOF: true})
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("fresh server does not answer PING: %v", err)
	}
	s.Pause()
	if err := ping(s.Addr()); err == nil {
		t.Fatal("paused server answered PING")
	}
	s.Resume()
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("resumed server does not answer PING: %v", err)
	}
	s.Kill()
	if s.Running() {
		t.Fatal("killed server still reported as running")
	}
	deadline := time.Now().Add(time.Second)
	for ping(s.Addr()) == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := ping(s.Addr()); err == nil {
		t.Fatal("killed server still answers PING")
	}
	s.Restart()
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("restarted server does not answer PING: %v", err)
	}
}

// do sends one inline command and returns the first line of the reply.
func do(t *testing.T, addr, cmd string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte(cmd + "\r\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	return strings.TrimSpace(line)
}

func TestRestartKeepsDataRestartEmptyLosesIt(t *testing.T) {
	s := Start(t, &Options{AOF: true})
	if got := do(t, s.Addr(), "SET k v"); got != "+OK" {
		t.Fatalf("SET: %q", got)
	}
	s.Restart()
	if got := do(t, s.Addr(), "DBSIZE"); got != ":1" {
		t.Fatalf("after Restart (AOF) DBSIZE = %q, want :1", got)
	}
	port := s.Addr()
	s.RestartEmpty()
	if s.Addr() != port {
		t.Fatalf("RestartEmpty moved the server from %s to %s", port, s.Addr())
	}
	if got := do(t, s.Addr(), "DBSIZE"); got != ":0" {
		t.Fatalf("after RestartEmpty DBSIZE = %q, want :0", got)
	}
	if got := do(t, s.Addr(), "SET k2 v"); got != "+OK" {
		t.Fatalf("SET after RestartEmpty: %q", got)
	}
	s.Restart()
	if got := do(t, s.Addr(), "DBSIZE"); got != ":1" {
		t.Fatalf("the AOF written after RestartEmpty did not survive a Restart: DBSIZE = %q", got)
	}
}

func TestPidIsTheServersProcess(t *testing.T) {
	s := Start(t, nil)
	pid := s.Pid()
	if pid <= 0 {
		t.Fatalf("Pid() = %d for a running server", pid)
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		t.Skipf("no /proc on this system: %v", err)
	}
	// redis-server rewrites its title to "redis-server 127.0.0.1:<port>".
	title := strings.TrimRight(string(cmdline), "\x00")
	if !strings.Contains(title, "redis-server") || !strings.HasSuffix(title, ":"+strconv.Itoa(s.port)) {
		t.Fatalf("process %d is %q, not the redis-server on port %d", pid, title, s.port)
	}
	s.Kill()
	if got := s.Pid(); got != 0 {
		t.Fatalf("Pid() = %d after Kill, want 0", got)
	}
}

// TestAServersClockMovesAndChangesSpeed: a server started with
// Options.Clock expires a key early when its clock is stepped past the
// key's TTL, and its clock runs at the rate SetClock gives.
func TestAServersClockMovesAndChangesSpeed(t *testing.T) {
	s := Start(t, &Options{Clock: true})
	near := func(what string, got, want time.Time) {
		t.Helper()
		if d := got.Sub(want); d < -time.Second || d > time.Second {
			t.Fatalf("%s: the server's clock reads %v, want about %v", what, got, want)
		}
	}
	now, err := s.Time()
	if err != nil {
		t.Fatal(err)
	}
	near("before any change", now, time.Now())
	if _, err := s.Do("SET", "k", "v", "PX", "60000"); err != nil {
		t.Fatal(err)
	}
	s.SetClock(70*time.Second, 1)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if out, err := s.Do("PTTL", "k"); err == nil && strings.TrimSpace(out) == "-2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the key with 60 s to live did not expire after the clock was stepped 70 s ahead")
		}
	}
	now, err = s.Time()
	if err != nil {
		t.Fatal(err)
	}
	near("after a 70 s step", now, time.Now().Add(70*time.Second))

	s.SetClock(0, 2)
	time.Sleep(50 * time.Millisecond) // the change is read within 10 ms
	from, realFrom := mustTime(t, s), time.Now()
	for time.Since(realFrom) < time.Second {
		time.Sleep(50 * time.Millisecond)
	}
	to, realTo := mustTime(t, s), time.Now()
	if fake, real := to.Sub(from), realTo.Sub(realFrom); fake < real*3/2 {
		t.Fatalf("at rate 2 the server's clock advanced %v in %v of real time; want about twice", fake, real)
	}
	s.Restart()
	if after := mustTime(t, s); after.Before(time.Now().Add(60 * time.Second)) {
		t.Fatalf("after a restart the server's clock reads %v; want the moved clock kept", after)
	}
	s.RestartEmpty()
	if after := mustTime(t, s); after.Before(time.Now().Add(60 * time.Second)) {
		t.Fatalf("after an empty restart the server's clock reads %v; want the moved clock kept", after)
	}
}

func mustTime(t *testing.T, s *Server) time.Time {
	t.Helper()
	tm, err := s.Time()
	if err != nil {
		t.Fatal(err)
	}
	return tm
}
