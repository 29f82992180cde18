package bench

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/proc"
)

// etcdServer is one etcd member started by the bench: a child process on
// two free loopback ports (client and peer) with its data directory under
// the test's temporary directory, stopped when the test ends.
//
// It runs with etcd's defaults otherwise, so every write is fsynced to the
// WAL before it is acknowledged (the redis-server processes of the bench
// persist nothing). LOCKGATE_BENCH_ETCD_ARGS adds arguments, e.g.
// "--unsafe-no-fsync" to compare without the fsync.
type etcdServer struct {
	url  string // http://127.0.0.1:<client port>
	pid  int
	ver  string
	proc proc.Process
}

// stop ends the member (SIGTERM, then SIGKILL after 5 s); it is idempotent
// and also runs when the test ends.
func (s *etcdServer) stop() { s.proc.Terminate(5 * time.Second) }

// errEtcdMissing says that no etcd binary is in PATH.
var errEtcdMissing = errors.New("not installed")

// startEtcd starts one etcd member and waits until /health answers true. It
// returns errEtcdMissing when there is no etcd binary.
func startEtcd(tb testing.TB) (*etcdServer, error) {
	tb.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return nil, errEtcdMissing
	}
	out, _ := exec.Command(bin, "--version").Output()
	ver := strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	var lastErr error
	for range 3 { // a free port may be taken before etcd binds it
		s, err := launchEtcd(tb, bin)
		if err == nil {
			s.ver = ver
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func launchEtcd(tb testing.TB, bin string) (*etcdServer, error) {
	dir := tb.TempDir()
	cport, err := freePort()
	if err != nil {
		return nil, err
	}
	pport, err := freePort()
	if err != nil {
		return nil, err
	}
	curl := "http://127.0.0.1:" + strconv.Itoa(cport)
	purl := "http://127.0.0.1:" + strconv.Itoa(pport)
	args := []string{
		"--name", "bench", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", curl, "--advertise-client-urls", curl,
		"--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
		"--initial-cluster", "bench=" + purl, "--initial-cluster-state", "new",
		"--log-level", "warn", "--logger", "zap",
	}
	args = append(args, strings.Fields(os.Getenv("LOCKGATE_BENCH_ETCD_ARGS"))...)
	logf, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	s := &etcdServer{url: curl}
	ready := func() error {
		if !healthy(curl) {
			return errors.New("/health is not true")
		}
		return nil
	}
	if err := s.proc.Launch(cmd, ready, 50*time.Millisecond, 30*time.Second); err != nil {
		return nil, fmt.Errorf("etcd on %s: %w: %s", curl, err, tail(filepath.Join(dir, "etcd.log")))
	}
	s.pid = s.proc.Pid()
	tb.Cleanup(s.stop)
	return s, nil
}

func healthy(url string) bool {
	c := &http.Client{Timeout: time.Second}
	resp, err := c.Get(url + "/health")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusOK && strings.Contains(string(b), `"true"`)
}

func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log)"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 3 {
		lines = lines[len(lines)-3:]
	}
	return strings.Join(lines, " | ")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ---- etcd's lock API over HTTP ----

// etcdPeer locks through etcd's v3 JSON API (the grpc-gateway of the etcd
// server): every worker has its own http.Client (one keep-alive connection)
// and its own lease, granted once when the worker is made (POST
// /v3/lease/grant, TTL 10 minutes), as etcd's Go client holds one lease per
// session. A cycle is POST /v3/lock/lock {"name","lease"} (it blocks until
// the lock is held and returns the key that holds it) and POST
// /v3/lock/unlock {"key"}. Every lease is revoked on close, which drops any
// lock a cancelled waiter may still have queued.
type etcdPeer struct {
	url    string
	prefix string // keeps the cases' lock names apart

	mu     sync.Mutex
	leases []string
	admin  *http.Client
}

func newEtcdPeer(url, prefix string) *etcdPeer {
	return &etcdPeer{url: url, prefix: prefix, admin: &http.Client{Timeout: 10 * time.Second}}
}

func (p *etcdPeer) close() {
	p.mu.Lock()
	leases := p.leases
	p.leases = nil
	p.mu.Unlock()
	for _, id := range leases {
		_ = etcdCall(context.Background(), p.admin, p.url+"/v3/lease/revoke", map[string]any{"ID": id}, nil)
	}
	p.admin.CloseIdleConnections()
}

// worker returns a worker's client and its lease.
func (p *etcdPeer) worker(tb testing.TB) (*http.Client, string) {
	tb.Helper()
	client := &http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Minute},
		Timeout:   time.Minute,
	}
	tb.Cleanup(client.CloseIdleConnections)
	var grant struct {
		ID string `json:"ID"`
	}
	err := etcdCall(context.Background(), client, p.url+"/v3/lease/grant", map[string]any{"TTL": 600}, &grant)
	if err != nil || grant.ID == "" {
		tb.Fatalf("etcd lease grant: %v (ID %q)", err, grant.ID)
	}
	p.mu.Lock()
	p.leases = append(p.leases, grant.ID)
	p.mu.Unlock()
	return client, grant.ID
}

// lock blocks until name is held under lease and returns the lock's key.
func (p *etcdPeer) lock(ctx context.Context, c *http.Client, name, lease string) (string, error) {
	var out struct {
		Key string `json:"key"`
	}
	in := map[string]any{"name": base64.StdEncoding.EncodeToString([]byte(p.prefix + name)), "lease": lease}
	if err := etcdCall(ctx, c, p.url+"/v3/lock/lock", in, &out); err != nil {
		return "", err
	}
	if out.Key == "" {
		return "", errors.New("etcd lock: no key in the reply")
	}
	return out.Key, nil
}

func (p *etcdPeer) unlock(c *http.Client, key string) error {
	return etcdCall(context.Background(), c, p.url+"/v3/lock/unlock", map[string]any{"key": key}, nil)
}

func (p *etcdPeer) contender(tb testing.TB, _ int) func(context.Context, *acquisition) error {
	c, lease := p.worker(tb)
	return func(ctx context.Context, a *acquisition) error {
		key, err := p.lock(ctx, c, resource, lease)
		a.got = time.Now()
		if err != nil {
			return err
		}
		a.ok = true
		holdLock()
		a.holdEnd = time.Now()
		err = p.unlock(c, key)
		a.released = time.Now()
		return err
	}
}

func (p *etcdPeer) pairer(tb testing.TB, i int) func(context.Context, *pair) error {
	c, lease := p.worker(tb)
	name := "u-" + strconv.Itoa(i)
	return func(ctx context.Context, pr *pair) error {
		key, err := p.lock(ctx, c, name, lease)
		pr.got = time.Now()
		if err != nil {
			return err
		}
		pr.ok = true
		err = p.unlock(c, key)
		pr.released = time.Now()
		return err
	}
}

// etcdCall POSTs in as JSON and decodes a 200 answer into out (if not nil).
func etcdCall(ctx context.Context, c *http.Client, url string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %d %s", url[strings.LastIndex(url, "/v3/"):], resp.StatusCode, bytes.TrimSpace(b))
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}
