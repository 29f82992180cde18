// Package gatewaytest starts lockgate gateways for tests, in one of two
// ways:
//
//   - in process: InProcess serves the gateway's HTTP API (package
//     handlers over a lockcore.Redlock of the given nodes) from an
//     httptest server, for tests of clients and of the API;
//   - as a built binary: Binary builds a command of this module (lockgate,
//     fencedkv) once per test binary, and Start runs it on a free loopback
//     address until it answers, for tests of the program as deployed.
//
// Both stop what they started when the test ends. Free addresses come from
// package freeport.
package gatewaytest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockgate/lockgate/handlers"
	"github.com/lockgate/lockgate/internal/freeport"
	"github.com/lockgate/lockgate/internal/testlog"
	"github.com/lockgate/lockgate/lockcore"
)

// Server is a gateway served in process.
type Server struct {
	// URL is the base URL, http://127.0.0.1:port.
	URL string
	// Locker is the gateway's Redlock.
	Locker *lockcore.Redlock
}

// InProcessOptions are InProcess's settings; the zero value is lockcore's
// and handlers' defaults.
type InProcessOptions struct {
	Core     *lockcore.Options
	Handlers *handlers.Options
	// Front, if not nil, wraps the gateway's handler (to count or alter
	// requests).
	Front func(http.Handler) http.Handler
}

// InProcess serves the gateway over nodes until the test ends. It returns
// once the Redlock's first check is done (lockcore.Redlock.Ready), so a new
// cluster is initialized before the test times anything. At the end the
// Redlock is closed first, which ends requests still waiting, then the
// server, which waits for its handlers.
func InProcess(t testing.TB, nodes []lockcore.Node, o *InProcessOptions) *Server {
	t.Helper()
	if o == nil {
		o = &InProcessOptions{}
	}
	locker, err := lockcore.New(nodes, o.Core)
	if err != nil {
		t.Fatal(err)
	}
	h, err := handlers.New(locker, o.Handlers)
	if err != nil {
		locker.Close()
		t.Fatal(err)
	}
	if err := locker.Ready(context.Background()); err != nil {
		locker.Close()
		t.Fatal(err)
	}
	var handler http.Handler = h
	if o.Front != nil {
		handler = o.Front(h)
	}
	srv := httptest.NewServer(handler)
	t.Cleanup(func() {
		locker.Close()
		srv.Close()
	})
	return &Server{URL: srv.URL, Locker: locker}
}

var (
	buildMu  sync.Mutex
	buildDir string
	built    = map[string]error{}
)

// Binary builds github.com/lockgate/lockgate/cmd/<name> once per test
// binary and returns its path; a failed build fails t (and every later
// call for name). The binaries live in one temporary directory that
// RemoveBinaries deletes.
func Binary(t testing.TB, name string) string {
	t.Helper()
	return BinaryTagged(t, name)
}

// BinaryTagged is Binary for a build with the given build tags (for
// example lockgate_unprotected, see cmd/lockgate), built once per set of
// tags and kept apart from the other builds of name.
func BinaryTagged(t testing.TB, name string, tags ...string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if buildDir == "" {
		dir, err := os.MkdirTemp("", "lockgate-bin-")
		if err != nil {
			t.Fatal(err)
		}
		buildDir = dir
	}
	args := []string{"build"}
	path := filepath.Join(buildDir, name)
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
		path += "-" + strings.Join(tags, "-")
	}
	err, done := built[path]
	if !done {
		args = append(args, "-o", path, "github.com/lockgate/lockgate/cmd/"+name)
		out, e := exec.Command("go", args...).CombinedOutput()
		if e != nil {
			err = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), e, out)
		}
		built[path] = err
	}
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// RemoveBinaries deletes what Binary built; call it from TestMain after
// m.Run.
func RemoveBinaries() {
	buildMu.Lock()
	defer buildMu.Unlock()
	if buildDir != "" {
		os.RemoveAll(buildDir)
		buildDir, built = "", map[string]error{}
	}
}

// Process is a binary that Start runs.
type Process struct {
	// URL is the base URL, http://Addr.
	URL  string
	Addr string
	// Cmd is the process; Done is closed once it has exited, then
	// Cmd.ProcessState holds its exit status.
	Cmd  *exec.Cmd
	Done <-chan struct{}
	// Log is what the process wrote to stdout and stderr.
	Log *testlog.Buffer
}

// Kill kills the process and waits until it has exited.
func (p *Process) Kill() {
	_ = p.Cmd.Process.Kill()
	<-p.Done
}

// Start runs bin with -addr on a free loopback address, then args, with
// only PATH in its environment (no LOCKGATE_* of the caller's) plus env
// ("NAME=value" each), and returns once GET /healthz answers 200. It fails
// t when the process exits first or does not answer within 10s. The
// process is killed with the test (and with the test binary: it gets
// SIGKILL when its parent dies), and its log is printed when t failed.
func Start(t testing.TB, bin string, env []string, args ...string) *Process {
	t.Helper()
	addr := freeport.Addr(t)
	done := make(chan struct{})
	p := &Process{URL: "http://" + addr, Addr: addr, Log: &testlog.Buffer{}, Done: done}
	p.Cmd = exec.Command(bin, append([]string{"-addr", addr}, args...)...)
	p.Cmd.Stdout, p.Cmd.Stderr = p.Log, p.Log
	p.Cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.Cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("%s log:\n%s", filepath.Base(bin), p.Log.String())
		}
	})
	if err := waitHealthy(p, 10*time.Second); err != nil {
		t.Fatalf("%s: %v\n%s", bin, err, p.Log.String())
	}
	return p
}

// errExited: the process exited before it answered.
var errExited = errors.New("exited at start")

// waitHealthy polls p's /healthz until it answers 200, p exits, or within
// passes.
func waitHealthy(p *Process, within time.Duration) error {
	hc := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case <-p.Done:
			return errExited
		default:
		}
		if resp, err := hc.Get(p.URL + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
	return fmt.Errorf("no 200 from /healthz within %v", within)
}
