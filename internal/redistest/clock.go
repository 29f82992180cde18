package redistest

import (
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clockSource is an LD_PRELOAD library that moves the wall clock of the
// process it is loaded into (see its comment). Debian's libfaketime does
// not start Redis 7 (its clock_gettime recurses while jemalloc starts), so
// the tests build their own.
//
//go:embed clocklib/clock.c
var clockSource []byte

// clockLibrary compiles clocklib/clock.c into dir with the C compiler (the one cgo
// and the race detector use) and returns the library's path.
func clockLibrary(t testing.TB, dir string) string {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Fatalf("redistest: a server with a movable clock needs a C compiler (%s): %v (Debian: apt-get install gcc)", cc, err)
	}
	src, lib := filepath.Join(dir, "clock.c"), filepath.Join(dir, "clock.so")
	if err := os.WriteFile(src, clockSource, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-O2", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("redistest: compiling the clock library: %v: %s", err, out)
	}
	return lib
}

// clockEnv returns the environment that loads the clock library into a
// server whose clock file is in s.dir.
func (s *Server) clockEnv() []string {
	return append(os.Environ(), "LD_PRELOAD="+s.clockLib, "LOCKGATE_CLOCK_FILE="+filepath.Join(s.dir, "clock"))
}

// SetClock moves the server's wall clock (Options.Clock must be set): it
// jumps by step from where it is and runs at rate times real speed from
// then on (1 for real speed). The server's monotonic clock is not moved.
// The change reaches the server within 10 ms of its next reading of the
// clock, and lasts across restarts of the server (the clock's state is a
// file in its directory). Calls must not overlap.
func (s *Server) SetClock(step time.Duration, rate float64) {
	s.t.Helper()
	if s.clockLib == "" {
		s.t.Fatal("redistest: SetClock on a server started without Options.Clock")
	}
	if rate <= 0 {
		s.t.Fatalf("redistest: SetClock rate %v: want a positive rate", rate)
	}
	now := time.Now().UnixNano()
	fake := now
	if s.clockRate != 0 { // where the clock is now, by the last setting
		fake = s.clockFake + int64(float64(now-s.clockReal)*s.clockRate)
	}
	s.clockReal, s.clockFake, s.clockRate = now, fake+step.Nanoseconds(), rate
	line := fmt.Sprintf("%d %d %d\n", s.clockReal, s.clockFake, int64(rate*1e6+0.5))
	tmp := filepath.Join(s.dir, "clock.tmp")
	if err := os.WriteFile(tmp, []byte(line), 0o600); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, "clock")); err != nil {
		s.t.Fatal(err)
	}
}

// Time returns the server's wall clock (the TIME command).
func (s *Server) Time() (time.Time, error) {
	out, err := s.Do("TIME")
	if err != nil {
		return time.Time{}, err
	}
	f := strings.Fields(out)
	if len(f) != 2 {
		return time.Time{}, fmt.Errorf("TIME answered %q", out)
	}
	sec, err1 := strconv.ParseInt(f[0], 10, 64)
	usec, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		return time.Time{}, fmt.Errorf("TIME answered %q", out)
	}
	return time.Unix(sec, usec*1000), nil
}
