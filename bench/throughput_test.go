package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/lockgate/lockgate/handlers"
	"github.com/lockgate/lockgate/internal/faultproxy"
	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
	"github.com/lockgate/lockgate/lockcore/redisnode"
)

// The throughput benchmark (TestThroughput).
//
// Targets, all on the same three redis-server processes (and one etcd
// member when etcd is installed):
//
//   - lockgate-3: the gateway in-process over three redisnode nodes, served
//     over HTTP on 127.0.0.1 (httptest.NewServer), as in the hand-off bench;
//   - lockgate-1: the same over the first server alone;
//   - lockgate-embedded: the same over one memnode (no Redis);
//   - http-floor: an HTTP lock server that does no lock work (a map and a
//     FIFO in memory, floor_test.go), for what HTTP alone costs here;
//   - http-redsync: redsync-3 behind the http-floor's net/http server
//     (redsyncfloor_test.go), for what serving redsync's own lock work
//     over HTTP costs here; uncontended scenarios only;
//   - redsync-3: redsync/v4 in-process over the three servers, default
//     options;
//   - redislock-1: bsm/redislock in-process over the first server;
//   - etcd: etcd's /v3/lock JSON API over HTTP, one member (a fresh one
//     for every case), a lease per worker (etcd_test.go);
//   - lockgate-3x3: the gateway in-process over three Redis Cluster nodes
//     of three shards each (redisnode.ClusterNode, nine more redis-server
//     processes, started once and flushed before each case); uncontended
//     scenarios only (a contended case is one resource, hence one shard
//     per node). Its redis-server CPU is the nine servers' (the
//     "redis-server CPU" column), and the report states its pairs/s ratio
//     to lockgate-3. Since every target shares this machine's cores, the
//     ratio shows what sharding costs or saves per pair here, not how far
//     it scales on more cores;
//   - lockgate-3-slow and redsync-3-slow: lockgate-3 and redsync-3 with the
//     third server reached through internal/faultproxy delaying every reply
//     by LOCKGATE_BENCH_SLOW_DELAY (default 30ms): one slow node. Only in
//     the C = 16 scenarios (slowScenarios);
//   - lockgate-3-trace1 and lockgate-3-trace100: lockgate-3 with
//     OpenTelemetry tracing on, sampled at 1 % and 100 %
//     (parentbased_traceidratio), spans batched and exported by the real
//     OTLP/HTTP protobuf exporter to an in-process sink that reads and
//     discards each body (newTracedLockgate); uncontended scenarios only.
//     The report gives their pairs/s ratio to lockgate-3 ("tracing cost").
//
// Scenarios:
//
//   - uncontended, C = 1, 16, 64 workers, each on its own resource "u-<i>":
//     acquire, release at once, again. lockgate: PUT {"ttl_ms":10000} (no
//     wait) then DELETE; redsync: Lock, Unlock; redislock: Obtain (no retry,
//     10 s TTL), Release; etcd: lock, unlock. Measured over the window:
//     pairs whose release returned inside it, per second; acquire and
//     release latency of the pairs that started inside it; failed pairs;
//     CPU time per 1,000 pairs of the bench process (getrusage: the
//     in-process gateway or client library together with the load
//     generator, nothing subtracted), of the three redis-server processes
//     (utime+stime from /proc/<pid>/stat, all three summed whatever the
//     target uses) and of the etcd process;
//   - contended, C = 16, 64 on the one resource "bench", holding 1 ms
//     (holdLock): runCase of the hand-off bench, unchanged. redislock, which
//     does not retry by default, retries with its ExponentialBackoff(16 ms,
//     256 ms) (16 ms is the least its documentation recommends);
//   - memory, once per run after the timed rounds: LOCKGATE_BENCH_HELD
//     (default 100,000) locks on distinct resources taken and held (TTL
//     1 h) by 16 workers; the bench process's RSS and Go heap in use (after
//     runtime.GC and debug.FreeOSMemory) and Redis used_memory summed over
//     the three servers, before and after.
//
// Interleaving: LOCKGATE_BENCH_ROUNDS rounds (default 3). In each round,
// every timed scenario runs for every target in turn (A B C ... A B C ...),
// the target order rotating by one from round to round, so that the
// machine's drift falls on all targets alike. The figures pool the rounds'
// samples; the ratio table also gives each round's ratio. Each case has a
// warm-up and a window as in the hand-off bench (LOCKGATE_BENCH_WARMUP,
// LOCKGATE_BENCH_WINDOW), and a fresh gateway; the servers are flushed
// between cases.

var thrTargets = []string{"lockgate-3", "lockgate-1", "lockgate-embedded", "http-floor", "http-redsync", "redsync-3", "redislock-1", "etcd", "lockgate-3-slow", "redsync-3-slow", "lockgate-3x3", "lockgate-3-trace1", "lockgate-3-trace100"}

// slowScenarios are the scenarios the -slow targets run in: lockgate-3 and
// redsync-3 with the third server behind a proxy that delays every reply by
// LOCKGATE_BENCH_SLOW_DELAY (default 30ms), a slow minority node.
var slowScenarios = map[scenario]bool{{false, 16}: true, {true, 16}: true}

type scenario struct {
	contended bool
	c         int
}

func (s scenario) String() string {
	if s.contended {
		return fmt.Sprintf("contended C=%d", s.c)
	}
	return fmt.Sprintf("uncontended C=%d", s.c)
}

var scenarios = []scenario{{false, 1}, {false, 16}, {false, 64}, {true, 16}, {true, 64}}

// memTargets are the targets of the memory scenario.
var memTargets = []string{"lockgate-3", "lockgate-1", "lockgate-embedded", "redsync-3", "redislock-1"}

func init() {
	// Commands the new targets run only inside Lua scripts (runCase's
	// command counts; see inScript in handoff_test.go).
	inScript["lockgate-3"] = inScript["lockgate"]
	inScript["lockgate-1"] = inScript["lockgate"]
	inScript["redsync-3"] = inScript["redsync"]
	inScript["lockgate-3-slow"] = inScript["lockgate"]
	inScript["lockgate-3-trace1"] = inScript["lockgate"]
	inScript["lockgate-3-trace100"] = inScript["lockgate"]
	inScript["redsync-3-slow"] = inScript["redsync"]
	inScript["redislock-1"] = map[string]bool{"set": true, "getrange": true, "get": true, "del": true, "pexpire": true}
}

func intEnv(tb testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		tb.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// pair is one uncontended acquire+release of one worker.
type pair struct {
	start, got, released time.Time
	ok                   bool // acquired
}

// thrTarget is a target of the throughput bench: a peer of the hand-off
// bench (contended cycles on "bench") that can also run uncontended pairs.
type thrTarget interface {
	peer
	// pairer returns worker i's uncontended cycle on its own resource:
	// acquire, then release at once. It fills p's times and ok.
	pairer(tb testing.TB, i int) func(ctx context.Context, p *pair) error
}

// thrEnv is what one run starts: the three redis-server processes and etcd.
type thrEnv struct {
	c       *cluster
	slow    *faultproxy.Proxy // to the third server, delaying replies
	slowRDB *redis.Client     // redsync's client through slow
	etcd    *etcdServer
	etcdErr error // why there is no etcd
	cases   int   // makes each case's etcd lock names its own
	// clusters are lockgate-3x3's three Redis Clusters, started by its
	// first case.
	clusters []*redistest.Cluster
	only     map[string]bool // LOCKGATE_BENCH_TARGETS, if set
}

func (e *thrEnv) available(target string) error {
	if target == "etcd" && e.etcd == nil {
		return e.etcdErr
	}
	if e.only != nil && !e.only[target] {
		return errNotSelected
	}
	return nil
}

// errNotSelected: LOCKGATE_BENCH_TARGETS leaves the target out.
var errNotSelected = errors.New("not selected")

func (e *thrEnv) newTarget(tb testing.TB, name string) thrTarget {
	tb.Helper()
	e.cases++
	switch name {
	case "lockgate-3":
		return newLockgateOn(tb, e.c.srvs, false)
	case "lockgate-3x3":
		return newLockgateURLs(tb, e.clusterURLs(tb), false)
	case "lockgate-3-trace1":
		return newTracedLockgate(tb, e.c.srvs, 0.01)
	case "lockgate-3-trace100":
		return newTracedLockgate(tb, e.c.srvs, 1)
	case "lockgate-3-slow":
		return newLockgateURLs(tb, []string{e.c.srvs[0].URL(), e.c.srvs[1].URL(), "redis://" + e.slow.Addr()}, false)
	case "redsync-3-slow":
		return newRedsyncOn([]*redis.Client{e.c.clients[0], e.c.clients[1], e.slowRDB})
	case "lockgate-1":
		return newLockgateOn(tb, e.c.srvs[:1], false)
	case "lockgate-embedded":
		return newLockgateOn(tb, nil, true)
	case "http-floor":
		return newFloorPeer()
	case "http-redsync":
		return newRedsyncServerPeer(e.c.clients)
	case "redsync-3":
		return newRedsync(e.c)
	case "redislock-1":
		return &redislockPeer{c: redislock.New(e.c.clients[0])}
	case "etcd":
		// A fresh member for every case: after a contended case whose
		// post-window waiters were cancelled (HTTP requests abandoned),
		// later lock requests to the same etcd 3.4 member hung without
		// creating their keys (seen on 2026-11-23, not explained), and the
		// cases of the other targets get fresh servers too.
		e.etcd.stop()
		s, err := startEtcd(tb)
		if err != nil {
			tb.Fatalf("etcd restart: %v", err)
		}
		e.etcd = s
		return newEtcdPeer(e.etcd.url, fmt.Sprintf("c%d/", e.cases))
	}
	tb.Fatalf("unknown target %q", name)
	return nil
}

// clusterURLs starts lockgate-3x3's Clusters on first use, flushes every
// primary (each case starts from empty nodes, as the others do), and
// returns their redis-cluster:// URLs.
func (e *thrEnv) clusterURLs(tb testing.TB) []string {
	tb.Helper()
	if e.clusters == nil {
		for range 3 {
			e.clusters = append(e.clusters, redistest.StartCluster(tb, 3, 0))
		}
	}
	urls := make([]string, len(e.clusters))
	for i, c := range e.clusters {
		for _, p := range c.Primaries() {
			if _, err := p.Do("FLUSHALL"); err != nil {
				tb.Fatalf("flush %s: %v", p.Addr(), err)
			}
		}
		urls[i] = c.URL()
	}
	return urls
}

// newLockgateOn is newLockgate over the given servers, or over one memnode.
func newLockgateOn(tb testing.TB, srvs []*redistest.Server, embedded bool) *lockgatePeer {
	var urls []string
	for _, s := range srvs {
		urls = append(urls, s.URL())
	}
	return newLockgateURLs(tb, urls, embedded)
}

// newLockgateURLs is newLockgateOn over Redis URLs.
func newLockgateURLs(tb testing.TB, urls []string, embedded bool) *lockgatePeer {
	tb.Helper()
	return newLockgateWith(tb, urls, embedded, nil, nil)
}

// newTracedLockgate is lockgate-3 (newLockgateOn over srvs) with tracing
// on as cmd/lockgate turns it on (see its tracing.go): an OpenTelemetry
// SDK TracerProvider given to the handlers (handlers.Options.Tracer),
// sampling parentbased_traceidratio at ratio (the bench's requests carry
// no traceparent, so ratio decides), with the default batch span
// processor and the OTLP/HTTP protobuf exporter (otlptracehttp), which
// does the real encoding and sending. Its collector is an in-process HTTP
// server that reads each export's body, discards it and answers 200: the
// exporter's work is measured, a collector's is not. Its CPU is the bench
// process's.
func newTracedLockgate(tb testing.TB, srvs []*redistest.Server, ratio float64) *lockgatePeer {
	tb.Helper()
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
	}))
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(collector.URL+"/v1/traces"))
	if err != nil {
		collector.Close()
		tb.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))))
	var urls []string
	for _, s := range srvs {
		urls = append(urls, s.URL())
	}
	return newLockgateWith(tb, urls, false, &handlers.Options{Tracer: tp}, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = tp.Shutdown(ctx) // exports what is still buffered
		collector.Close()
	})
}

// newLockgateWith is newLockgateURLs with the handlers' options; stop, if
// not nil, runs when the peer closes, after its gateway.
func newLockgateWith(tb testing.TB, urls []string, embedded bool, hopts *handlers.Options, stop func()) *lockgatePeer {
	tb.Helper()
	p := &lockgatePeer{stop: stop}
	var nodes []lockcore.Node
	if embedded {
		nodes = append(nodes, memnode.New(&memnode.Options{Name: "embedded"}))
	}
	for _, u := range urls {
		var n interface {
			lockcore.Node
			Close() error
		}
		var err error
		if redisnode.IsClusterURL(u) {
			n, err = redisnode.NewCluster(u)
		} else {
			n, err = redisnode.New(u)
		}
		if err != nil {
			tb.Fatal(err)
		}
		p.nodes = append(p.nodes, n)
		nodes = append(nodes, n)
	}
	locker, err := lockcore.New(nodes, nil)
	if err != nil {
		tb.Fatal(err)
	}
	h, err := handlers.New(locker, hopts)
	if err != nil {
		tb.Fatal(err)
	}
	p.locker = locker
	p.srv = httptest.NewServer(h)
	p.url = p.srv.URL + "/locks/" + resource
	// A fresh gateway's first call makes the guard's first pass over the
	// nodes (a few hundred ms on a flushed cluster here): wait for /readyz,
	// as a deployment would before sending traffic, so that the warm-up
	// need not absorb it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := p.srv.Client().Get(p.srv.URL + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			p.close()
			tb.Fatalf("lockgate over %d node(s) not ready within 30s: %v", len(nodes), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return p
}

// lgClient is one worker's HTTP client: its own Transport, one keep-alive
// connection.
func lgClient(tb testing.TB) func(*http.Request) (int, http.Header, error) {
	client := &http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Minute},
		Timeout:   time.Minute,
	}
	tb.Cleanup(client.CloseIdleConnections)
	return func(req *http.Request) (int, http.Header, error) {
		resp, err := client.Do(req)
		if err != nil {
			return 0, nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode, resp.Header, nil
	}
}

// lgAcquire PUTs /locks/name with body and returns the Lease-Id of a 201.
func lgAcquire(ctx context.Context, do func(*http.Request) (int, http.Header, error), url, body string) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	code, hdr, err := do(req)
	if err != nil {
		return "", err
	}
	if code != http.StatusCreated {
		return "", fmt.Errorf("PUT: %d", code)
	}
	return hdr.Get("Lease-Id"), nil
}

func lgRelease(do func(*http.Request) (int, http.Header, error), url, lease string) error {
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodDelete, url, nil)
	req.Header.Set("Lease-Id", lease)
	code, _, err := do(req)
	if err != nil {
		return err
	}
	if code != http.StatusNoContent {
		return fmt.Errorf("DELETE: %d", code)
	}
	return nil
}

func (p *lockgatePeer) pairer(tb testing.TB, i int) func(context.Context, *pair) error {
	return pairerAt(tb, p.srv.URL+"/locks/u-"+strconv.Itoa(i))
}

func (p *redsyncPeer) pairer(_ testing.TB, i int) func(context.Context, *pair) error {
	m := p.rs.NewMutex("u-" + strconv.Itoa(i)) // default options
	return func(ctx context.Context, pr *pair) error {
		err := m.LockContext(ctx)
		pr.got = time.Now()
		if err != nil {
			return err
		}
		pr.ok = true
		ok, err := m.UnlockContext(context.Background())
		pr.released = time.Now()
		if err == nil && !ok {
			err = fmt.Errorf("redsync: unlock returned false")
		}
		return err
	}
}

// ---- bsm/redislock ----

type redislockPeer struct{ c *redislock.Client }

func (p *redislockPeer) close() {}

const redislockTTL = 10 * time.Second

func (p *redislockPeer) pairer(_ testing.TB, i int) func(context.Context, *pair) error {
	key := "u-" + strconv.Itoa(i)
	return func(ctx context.Context, pr *pair) error {
		l, err := p.c.Obtain(ctx, key, redislockTTL, nil) // no retry: the default
		pr.got = time.Now()
		if err != nil {
			return err
		}
		pr.ok = true
		err = l.Release(context.Background())
		pr.released = time.Now()
		return err
	}
}

func (p *redislockPeer) contender(_ testing.TB, _ int) func(context.Context, *acquisition) error {
	return func(ctx context.Context, a *acquisition) error {
		// A retry strategy counts its retries: one per Obtain.
		opt := &redislock.Options{RetryStrategy: redislock.ExponentialBackoff(16*time.Millisecond, 256*time.Millisecond)}
		l, err := p.c.Obtain(ctx, resource, redislockTTL, opt)
		a.got = time.Now()
		if err != nil {
			return err
		}
		a.ok = true
		holdLock()
		a.holdEnd = time.Now()
		err = l.Release(context.Background())
		a.released = time.Now()
		return err
	}
}

// ---- CPU accounting ----

// clockTick is USER_HZ, the unit of /proc/<pid>/stat's utime and stime: 100
// on every Linux architecture Go supports (it is part of the kernel's ABI).
const clockTick = 10 * time.Millisecond

// procCPU is the user+system CPU time of process pid so far.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: count from the last ')'.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return time.Duration(utime+stime) * clockTick, nil
}

// selfCPU is this process's user+system CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

type cpuSnap struct {
	self, redis, etcd time.Duration
	cluster           time.Duration // lockgate-3x3's nine servers
	err               error
}

func (e *thrEnv) cpu() cpuSnap {
	s := cpuSnap{self: selfCPU()}
	for _, srv := range e.c.srvs {
		d, err := procCPU(srv.Pid())
		if err != nil {
			s.err = err
		}
		s.redis += d
	}
	for _, c := range e.clusters {
		for _, srv := range c.Servers {
			d, err := procCPU(srv.Pid())
			if err != nil {
				s.err = err
			}
			s.cluster += d
		}
	}
	if e.etcd != nil {
		d, err := procCPU(e.etcd.pid)
		if err != nil {
			s.err = err
		}
		s.etcd = d
	}
	return s
}

// ---- uncontended ----

// pairResult is what one or more uncontended windows measured.
type pairResult struct {
	Pairs    int           // pairs whose release returned inside the window
	Errors   int           // pairs started inside the window that failed
	Window   time.Duration // summed over the pooled windows
	Acq, Rel []time.Duration
	CPU      cpuSnap // CPU time used over the window(s)
	Samples  []string
	Kinds    map[string]int // failed pairs by error message
}

func (r *pairResult) add(o pairResult) {
	r.Pairs += o.Pairs
	r.Errors += o.Errors
	r.Window += o.Window
	r.Acq = append(r.Acq, o.Acq...)
	r.Rel = append(r.Rel, o.Rel...)
	r.CPU.self += o.CPU.self
	r.CPU.redis += o.CPU.redis
	r.CPU.etcd += o.CPU.etcd
	if len(r.Samples) < 5 {
		r.Samples = append(r.Samples, o.Samples...)
	}
	for k, n := range o.Kinds {
		if r.Kinds == nil {
			r.Kinds = map[string]int{}
		}
		r.Kinds[k] += n
	}
}

// kinds lists the most frequent error messages with their counts.
func (r pairResult) kinds() string {
	type kn struct {
		k string
		n int
	}
	var l []kn
	for k, n := range r.Kinds {
		l = append(l, kn{k, n})
	}
	slices.SortFunc(l, func(a, b kn) int { return b.n - a.n })
	var out []string
	for i, x := range l {
		if i == 5 {
			out = append(out, "…")
			break
		}
		out = append(out, fmt.Sprintf("%q × %d", x.k, x.n))
	}
	return strings.Join(out, ", ")
}

func (r pairResult) rate() float64 {
	if r.Window <= 0 {
		return 0
	}
	return float64(r.Pairs) / r.Window.Seconds()
}

// perK is CPU seconds per 1,000 pairs.
func (r pairResult) perK(d time.Duration) float64 {
	if r.Pairs == 0 {
		return 0
	}
	return d.Seconds() * 1000 / float64(r.Pairs)
}

// runPairs runs n workers of uncontended pairs on t for the warm-up and
// the window.
func runPairs(tb testing.TB, e *thrEnv, name string, t thrTarget, n int, warm, win time.Duration) pairResult {
	tb.Helper()
	cycles := make([]func(context.Context, *pair) error, n)
	for i := range cycles {
		cycles[i] = t.pairer(tb, i)
	}
	hardCtx, cancel := context.WithTimeout(context.Background(), warm+win+time.Minute)
	defer cancel()
	snaps := make(chan cpuSnap, 2)
	start := time.Now().Add(warm)
	end := start.Add(win)
	t1 := time.AfterFunc(warm, func() { snaps <- e.cpu() })
	defer t1.Stop()
	t2 := time.AfterFunc(warm+win, func() { snaps <- e.cpu() })
	defer t2.Stop()

	type worker struct {
		pairs, errors int
		acq, rel      []time.Duration
		samples       []string
		kinds         map[string]int
	}
	ws := make([]worker, n)
	var wg sync.WaitGroup
	var stop atomic.Bool
	for i := range n {
		wg.Go(func() {
			w := &ws[i]
			for !stop.Load() && hardCtx.Err() == nil {
				p := pair{start: time.Now()}
				if !p.start.Before(end) {
					return
				}
				ctx, cancel := context.WithTimeout(hardCtx, 30*time.Second)
				err := cycles[i](ctx, &p)
				cancel()
				in := !p.start.Before(start)
				if err != nil {
					if in {
						w.errors++
						if len(w.samples) < 2 {
							w.samples = append(w.samples, err.Error())
						}
						if w.kinds == nil {
							w.kinds = map[string]int{}
						}
						msg := err.Error()
						if len(msg) > 120 {
							msg = msg[:120] + "…"
						}
						w.kinds[msg]++
					}
					continue
				}
				if !p.released.Before(start) && !p.released.After(end) {
					w.pairs++
				}
				if in {
					w.acq = append(w.acq, p.got.Sub(p.start))
					w.rel = append(w.rel, p.released.Sub(p.got))
				}
			}
		})
	}
	wg.Wait()
	if hardCtx.Err() != nil {
		tb.Fatalf("%s/uncontended C=%d: did not finish within %v", name, n, warm+win+time.Minute)
	}
	var before, after cpuSnap
	for k := range 2 {
		select {
		case s := <-snaps:
			if k == 0 {
				before = s
			} else {
				after = s
			}
		case <-time.After(time.Minute):
			tb.Fatalf("%s/uncontended C=%d: CPU times not read", name, n)
		}
	}
	if before.err != nil || after.err != nil {
		tb.Fatalf("%s: reading CPU times: %v %v", name, before.err, after.err)
	}
	r := pairResult{Window: win, CPU: cpuSnap{
		self: after.self - before.self, redis: after.redis - before.redis, etcd: after.etcd - before.etcd,
		cluster: after.cluster - before.cluster}}
	if name == "lockgate-3x3" {
		r.CPU.redis = r.CPU.cluster
	}
	for _, w := range ws {
		r.add(pairResult{Kinds: w.kinds})
		r.Pairs += w.pairs
		r.Errors += w.errors
		r.Acq = append(r.Acq, w.acq...)
		r.Rel = append(r.Rel, w.rel...)
		if len(r.Samples) < 5 {
			r.Samples = append(r.Samples, w.samples...)
		}
	}
	return r
}

// ---- contended: pooled results of runCase ----

type contResult struct {
	Acquired, Failed, InWindowOK int
	Window                       time.Duration
	waits, idle                  []time.Duration
	changes, counted             int
	Samples                      []string
}

func (c *contResult) add(r result) {
	c.Acquired += r.Acquired
	c.Failed += r.Failed
	c.InWindowOK += r.InWindowOK
	c.Window += r.Window
	c.waits = append(c.waits, r.waits...)
	c.idle = append(c.idle, r.idle...)
	c.changes += r.changes
	c.counted += r.counted
	if len(c.Samples) < 5 {
		c.Samples = append(c.Samples, r.FailSamples...)
	}
}

func (c contResult) rate() float64 {
	if c.Window <= 0 {
		return 0
	}
	return float64(c.InWindowOK) / c.Window.Seconds()
}

func (c contResult) mean() time.Duration { return mean(c.waits) }

func (c contResult) changePct() float64 {
	if c.counted == 0 {
		return 0
	}
	return 100 * float64(c.changes) / float64(c.counted)
}

func mean(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	var s time.Duration
	for _, x := range d {
		s += x
	}
	return s / time.Duration(len(d))
}

// ---- memory ----

type memResult struct {
	Held, Errors         int
	Fill                 time.Duration
	RSS0, RSS1           uint64 // bench process VmRSS, bytes
	Heap0, Heap1         uint64 // Go HeapInuse, bytes
	RedisMem0, RedisMem1 int64  // used_memory summed over the servers
	Samples              []string
}

// rss is this process's resident set size after a full GC that returns
// what it can to the OS, and the Go heap in use.
func rss() (rssBytes, heap uint64) {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b, err := os.ReadFile("/proc/self/status")
	if err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				rssBytes = kb * 1024
			}
		}
	}
	return rssBytes, ms.HeapInuse
}

func (c *cluster) usedMemory(tb testing.TB) int64 {
	var sum int64
	for _, rdb := range c.clients {
		s, err := rdb.Info(context.Background(), "memory").Result()
		if err != nil {
			tb.Fatalf("INFO memory: %v", err)
		}
		for line := range strings.SplitSeq(s, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				sum += n
			}
		}
	}
	return sum
}

// holder takes and keeps lock k (of held); it returns what keeps it held.
type holder func(ctx context.Context, k int) (any, error)

// holders returns a maker of one holder per worker (each lockgate worker
// has its own HTTP client).
func (e *thrEnv) holders(tb testing.TB, name string, t thrTarget) func() holder {
	const ttl = time.Hour
	switch p := t.(type) {
	case *lockgatePeer:
		return func() holder {
			do := lgClient(tb)
			return func(ctx context.Context, k int) (any, error) {
				return lgAcquire(ctx, do, p.srv.URL+"/locks/m-"+strconv.Itoa(k), `{"ttl_ms":3600000}`)
			}
		}
	case *redsyncPeer:
		return func() holder {
			return func(ctx context.Context, k int) (any, error) {
				m := p.rs.NewMutex("m-"+strconv.Itoa(k), redsync.WithExpiry(ttl))
				return m, m.LockContext(ctx)
			}
		}
	case *redislockPeer:
		return func() holder {
			return func(ctx context.Context, k int) (any, error) {
				return p.c.Obtain(ctx, "m-"+strconv.Itoa(k), ttl, nil)
			}
		}
	}
	tb.Fatalf("%s: no memory scenario", name)
	return nil
}

func runMemory(tb testing.TB, e *thrEnv, name string, held int) memResult {
	tb.Helper()
	e.c.reset(tb)
	t := e.newTarget(tb, name)
	defer t.close()
	mk := e.holders(tb, name, t)
	var r memResult
	r.RSS0, r.Heap0 = rss()
	r.RedisMem0 = e.c.usedMemory(tb)
	keep := make([]any, held) // what holds each lock stays reachable
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var next atomic.Int64
	var errs atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for range 16 {
		h := mk()
		wg.Go(func() {
			for {
				k := int(next.Add(1)) - 1
				if k >= held || ctx.Err() != nil {
					return
				}
				v, err := h(ctx, k)
				if err != nil {
					errs.Add(1)
					mu.Lock()
					if len(r.Samples) < 3 {
						r.Samples = append(r.Samples, err.Error())
					}
					mu.Unlock()
					continue
				}
				keep[k] = v
			}
		})
	}
	wg.Wait()
	r.Fill = time.Since(start)
	r.Errors = int(errs.Load())
	r.Held = held - r.Errors
	r.RSS1, r.Heap1 = rss()
	r.RedisMem1 = e.c.usedMemory(tb)
	runtime.KeepAlive(keep)
	if ctx.Err() != nil {
		tb.Errorf("%s: holding %d locks took more than 10 minutes", name, held)
	}
	return r
}

// ---- the run ----

type thrKey struct {
	target string
	sc     scenario
}

type thrRun struct {
	warm, win  time.Duration
	rounds     int
	held       int
	etcdVer    string
	etcdErr    error
	pairs      map[thrKey]*pairResult
	cont       map[thrKey]*contResult
	roundPairs []map[thrKey]pairResult // per round, for the ratio spread
	roundCont  []map[thrKey]result
	mem        map[string]memResult
	started    time.Time
	took       time.Duration
	slowDelay  time.Duration // of the -slow targets' third server
}

// TestThroughput starts three redis-server processes and, when etcd is
// installed, one etcd member; runs every timed scenario for every target,
// interleaved, for LOCKGATE_BENCH_ROUNDS rounds, then the memory scenario;
// and prints the markdown tables of BENCHMARKS.md's throughput section (also
// written to LOCKGATE_BENCH_OUT, if set). It runs only with
// LOCKGATE_BENCH_THROUGHPUT=1. It fails when a target that is installed made
// no pair or no acquisition in a case.
func TestThroughput(t *testing.T) {
	if os.Getenv("LOCKGATE_BENCH_THROUGHPUT") != "1" {
		t.Skip("set LOCKGATE_BENCH_THROUGHPUT=1 to run the throughput bench (BENCHMARKS.md)")
	}
	warm, win := settings(t)
	run := &thrRun{warm: warm, win: win, rounds: intEnv(t, "LOCKGATE_BENCH_ROUNDS", 3),
		held: intEnv(t, "LOCKGATE_BENCH_HELD", 100000), started: time.Now(),
		pairs: map[thrKey]*pairResult{}, cont: map[thrKey]*contResult{}, mem: map[string]memResult{}}
	e := &thrEnv{c: startCluster(t)}
	slow, err := faultproxy.Start(e.c.srvs[2].Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = slow.Close() })
	delay := durationEnv(t, "LOCKGATE_BENCH_SLOW_DELAY", 30*time.Millisecond, false)
	slow.SetDelay(delay)
	e.slow, e.slowRDB = slow, redis.NewClient(&redis.Options{Addr: slow.Addr(), DisableIdentity: true, PoolSize: 128})
	t.Cleanup(func() { _ = e.slowRDB.Close() })
	run.slowDelay = delay
	if v := os.Getenv("LOCKGATE_BENCH_TARGETS"); v != "" {
		e.only = map[string]bool{}
		for _, name := range strings.Split(v, ",") {
			if !slices.Contains(thrTargets, name) {
				t.Fatalf("LOCKGATE_BENCH_TARGETS: unknown target %q (want some of %s)", name, strings.Join(thrTargets, ","))
			}
			e.only[name] = true
		}
	}
	e.etcd, e.etcdErr = startEtcd(t)
	if e.etcdErr != nil && e.etcdErr != errEtcdMissing {
		t.Fatalf("etcd is installed but did not start: %v", e.etcdErr)
	}
	if e.etcd != nil {
		run.etcdVer = e.etcd.ver
	}
	run.etcdErr = e.etcdErr
	n := len(scenarios) * len(thrTargets) * run.rounds
	t.Logf("%d timed cases of %v warm-up + %v window: about %v, then the memory scenario (%d locks × %d targets)",
		n, warm, win, time.Duration(n)*(warm+win+300*time.Millisecond), run.held, len(memTargets))

	for round := range run.rounds {
		rp, rc := map[thrKey]pairResult{}, map[thrKey]result{}
		for _, sc := range scenarios {
			for j := range thrTargets {
				name := thrTargets[(j+round)%len(thrTargets)]
				if e.available(name) != nil || (strings.HasSuffix(name, "-slow") && !slowScenarios[sc]) || (name == "http-redsync" && sc.contended) || (name == "lockgate-3x3" && sc.contended) || (strings.Contains(name, "-trace") && sc.contended) {
					continue
				}
				k := thrKey{name, sc}
				e.c.reset(t)
				tg := e.newTarget(t, name)
				if sc.contended {
					r := runCase(t, e.c, name, tg, sc.c, warm, win)
					tg.close()
					rc[k] = r
					if run.cont[k] == nil {
						run.cont[k] = &contResult{}
					}
					run.cont[k].add(r)
					t.Logf("round %d %s %s: %.0f acq/s, mean %.2f ms, p99 %.2f ms, change %.1f %%, failed %d %v",
						round+1, name, sc, r.Throughput, ms(r.AcqMean), ms(r.AcqP99), r.ChangePct, r.Failed, r.FailSamples)
					if r.Acquired == 0 {
						t.Errorf("round %d %s %s: no acquisition; failures: %v", round+1, name, sc, r.FailSamples)
					}
					continue
				}
				r := runPairs(t, e, name, tg, sc.c, warm, win)
				tg.close()
				rp[k] = r
				if run.pairs[k] == nil {
					run.pairs[k] = &pairResult{}
				}
				run.pairs[k].add(r)
				t.Logf("round %d %s %s: %.0f pairs/s, acquire p50 %.3f ms, errors %d %v",
					round+1, name, sc, r.rate(), ms(pct(r.Acq, 50)), r.Errors, r.Samples)
				if r.Pairs == 0 {
					t.Errorf("round %d %s %s: no pair; failures: %v", round+1, name, sc, r.Samples)
				}
			}
		}
		run.roundPairs = append(run.roundPairs, rp)
		run.roundCont = append(run.roundCont, rc)
	}
	for _, name := range memTargets {
		if e.available(name) != nil {
			continue
		}
		r := runMemory(t, e, name, run.held)
		run.mem[name] = r
		t.Logf("memory %s: %d held in %v, %d errors %v", name, r.Held, r.Fill.Round(time.Millisecond), r.Errors, r.Samples)
		if r.Held == 0 {
			t.Errorf("memory %s: no lock held; failures: %v", name, r.Samples)
		}
	}
	run.took = time.Since(run.started)
	out := run.report()
	fmt.Println(out)
	if path := os.Getenv("LOCKGATE_BENCH_OUT"); path != "" {
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// ---- the report ----

func (run *thrRun) missing(target string) (string, bool) {
	if target == "etcd" && run.etcdErr != nil {
		return run.etcdErr.Error(), true
	}
	return "", false
}

func (run *thrRun) report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Throughput bench, %s: %d round(s), warm-up %v and window %v per case, hold %s (contended); run took %v.\n",
		run.started.UTC().Format(time.RFC3339), run.rounds, run.warm, run.win, holdName(), run.took.Round(time.Second))
	etcd := run.etcdVer
	if run.etcdErr != nil {
		etcd = "etcd " + run.etcdErr.Error()
	}
	fmt.Fprintf(&b, "%s; %d CPUs (GOMAXPROCS %d); %s; kernel %s; %s.\n\n", runtime.Version(), runtime.NumCPU(), runtime.GOMAXPROCS(0),
		cpuModel(), kernelRelease(), etcd)

	b.WriteString("Uncontended (each worker its own resource; CPU: seconds per 1,000 pairs; bench process = the in-process gateway or client library and the load generator together):\n\n")
	b.WriteString("| target | C | pairs/s | acquire p50 ms | acquire p99 ms | release p50 ms | release p99 ms | errors | bench process CPU | redis-server CPU (3 summed) | etcd CPU |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, sc := range scenarios {
		if sc.contended {
			continue
		}
		for _, name := range thrTargets {
			if why, ok := run.missing(name); ok {
				fmt.Fprintf(&b, "| %s | %d | %s | | | | | | | | |\n", name, sc.c, why)
				continue
			}
			r := run.pairs[thrKey{name, sc}]
			if r == nil {
				continue
			}
			etcdCPU := "–"
			if name == "etcd" {
				etcdCPU = fmt.Sprintf("%.3f", r.perK(r.CPU.etcd))
			}
			fmt.Fprintf(&b, "| %s | %d | %.0f | %.3f | %.3f | %.3f | %.3f | %d | %.3f | %.3f | %s |\n",
				name, sc.c, r.rate(), ms(pct(r.Acq, 50)), ms(pct(r.Acq, 99)), ms(pct(r.Rel, 50)), ms(pct(r.Rel, 99)),
				r.Errors, r.perK(r.CPU.self), r.perK(r.CPU.redis), etcdCPU)
		}
	}

	b.WriteString("\nlockgate-3x3 (three Cluster nodes of three shards; redis-server CPU: the nine servers) against lockgate-3, uncontended:\n\n")
	for _, sc := range scenarios {
		a, b3 := run.pairs[thrKey{"lockgate-3x3", sc}], run.pairs[thrKey{"lockgate-3", sc}]
		if sc.contended || a == nil || b3 == nil {
			continue
		}
		fmt.Fprintf(&b, "- C=%d: %.0f ÷ %.0f pairs/s = %.2f; redis-server CPU per 1,000 pairs %.3f s against %.3f s\n",
			sc.c, a.rate(), b3.rate(), ratio(a.rate(), b3.rate()), a.perK(a.CPU.redis), b3.perK(b3.CPU.redis))
	}

	b.WriteString("\ntracing cost (OTLP/HTTP export to an in-process sink; sampled 1 % and 100 %) against lockgate-3, uncontended:\n\n")
	b.WriteString("| C | lockgate-3 pairs/s | lockgate-3-trace1 ÷ lockgate-3 | lockgate-3-trace100 ÷ lockgate-3 | bench process CPU per 1,000 pairs: off, 1 %, 100 % |\n")
	b.WriteString("|---:|---:|---:|---:|---:|\n")
	for _, sc := range scenarios {
		off, t1, t100 := run.pairs[thrKey{"lockgate-3", sc}], run.pairs[thrKey{"lockgate-3-trace1", sc}], run.pairs[thrKey{"lockgate-3-trace100", sc}]
		if sc.contended || off == nil || (t1 == nil && t100 == nil) {
			continue
		}
		rel := func(r *pairResult) string {
			if r == nil {
				return "–"
			}
			return fmt.Sprintf("%.3f", ratio(r.rate(), off.rate()))
		}
		cpu := func(r *pairResult) string {
			if r == nil {
				return "–"
			}
			return fmt.Sprintf("%.3f", r.perK(r.CPU.self))
		}
		fmt.Fprintf(&b, "| %d | %.0f | %s | %s | %s, %s, %s s |\n", sc.c, off.rate(), rel(t1), rel(t100), cpu(off), cpu(t1), cpu(t100))
	}

	first := true
	for _, sc := range scenarios {
		for _, name := range thrTargets {
			if r := run.pairs[thrKey{name, sc}]; r != nil && r.Errors > 0 {
				if first {
					b.WriteString("\nFailed pairs by error (a failed release leaves the lock held until its TTL, so the next acquire of that worker may fail too):\n\n")
					first = false
				}
				fmt.Fprintf(&b, "- %s %s: %d: %s\n", name, sc, r.Errors, r.kinds())
			}
		}
	}

	b.WriteString("\nContended (one resource, hold 1 ms):\n\n")
	b.WriteString("| target | C | acquisitions/s | acquire mean ms | acquire p50 ms | acquire p99 ms | p99 ÷ mean | change of hands % | idle p50 ms | idle p99 ms | failed |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, sc := range scenarios {
		if !sc.contended {
			continue
		}
		for _, name := range thrTargets {
			if why, ok := run.missing(name); ok {
				fmt.Fprintf(&b, "| %s | %d | %s | | | | | | | | |\n", name, sc.c, why)
				continue
			}
			r := run.cont[thrKey{name, sc}]
			if r == nil {
				continue
			}
			fmt.Fprintf(&b, "| %s | %d | %.0f | %.2f | %.2f | %.2f | %.2f | %.1f | %.3f | %.3f | %d |\n",
				name, sc.c, r.rate(), ms(r.mean()), ms(pct(r.waits, 50)), ms(pct(r.waits, 99)),
				ratio(ms(pct(r.waits, 99)), ms(r.mean())), r.changePct(), ms(pct(r.idle, 50)), ms(pct(r.idle, 99)), r.Failed)
		}
	}

	first = true
	for _, sc := range scenarios {
		for _, name := range thrTargets {
			if r := run.cont[thrKey{name, sc}]; r != nil && len(r.Samples) > 0 {
				if first {
					b.WriteString("\nErrors (failed acquisitions, and releases that failed after a successful acquisition), e.g.:\n\n")
					first = false
				}
				fmt.Fprintf(&b, "- %s %s: %d: %q\n", name, sc, r.Failed, r.Samples)
			}
		}
	}

	fmt.Fprintf(&b, "\nMemory with %d locks held (bench process after GC and FreeOSMemory; Redis used_memory summed over the 3 servers):\n\n", run.held)
	b.WriteString("| target | held (errors) | filled in s | process RSS before → after MiB | RSS per lock B | Go heap in use before → after MiB | Redis used_memory before → after MiB | Redis per lock B |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, name := range memTargets {
		r, ok := run.mem[name]
		if !ok {
			continue
		}
		perLock := func(a, z float64) float64 {
			if r.Held == 0 {
				return 0
			}
			return (z - a) / float64(r.Held)
		}
		fmt.Fprintf(&b, "| %s | %d (%d) | %.1f | %.1f → %.1f | %.0f | %.1f → %.1f | %.1f → %.1f | %.0f |\n",
			name, r.Held, r.Errors, r.Fill.Seconds(), mib(float64(r.RSS0)), mib(float64(r.RSS1)),
			perLock(float64(r.RSS0), float64(r.RSS1)), mib(float64(r.Heap0)), mib(float64(r.Heap1)),
			mib(float64(r.RedisMem0)), mib(float64(r.RedisMem1)), perLock(float64(r.RedisMem0), float64(r.RedisMem1)))
	}

	if run.pairs[thrKey{"lockgate-3", scenario{false, 1}}] == nil || run.pairs[thrKey{"redsync-3", scenario{false, 1}}] == nil {
		b.WriteString("\nTargets of issue 13: not judged (they need both lockgate-3 and redsync-3 in LOCKGATE_BENCH_TARGETS).\n")
		return b.String()
	}
	b.WriteString("\nTargets of issue 13 (lockgate = lockgate-3; pooled over the rounds, then each round's ratio):\n\n")
	b.WriteString("| measure | target | pooled | per round |\n|---|---|---:|---|\n")
	unc := func(c int) scenario { return scenario{false, c} }
	con := func(c int) scenario { return scenario{true, c} }
	pairsRatio := func(c int, other string) (float64, []float64) {
		a, z := run.pairs[thrKey{"lockgate-3", unc(c)}], run.pairs[thrKey{other, unc(c)}]
		if a == nil || z == nil {
			return math.NaN(), nil
		}
		var per []float64
		for _, rp := range run.roundPairs {
			per = append(per, ratio(rp[thrKey{"lockgate-3", unc(c)}].rate(), rp[thrKey{other, unc(c)}].rate()))
		}
		return ratio(a.rate(), z.rate()), per
	}
	row := func(measure, target string, pooled float64, per []float64, met bool, format string) {
		if math.IsNaN(pooled) {
			why, _ := run.missing("etcd")
			fmt.Fprintf(&b, "| %s | %s | %s | |\n", measure, target, why)
			return
		}
		var ps []string
		for _, v := range per {
			ps = append(ps, fmt.Sprintf(format, v))
		}
		fmt.Fprintf(&b, "| %s | %s | "+format+" %s | %s |\n", measure, target, pooled, verdict(met), strings.Join(ps, ", "))
	}
	for _, c := range []int{16, 64} {
		v, per := pairsRatio(c, "redsync-3")
		row(fmt.Sprintf("uncontended C=%d: pairs/s lockgate ÷ redsync", c), "≥ 1.0", v, per, v >= 1, "%.2f")
	}
	{
		a, z := run.pairs[thrKey{"lockgate-3", unc(1)}], run.pairs[thrKey{"redsync-3", unc(1)}]
		var per []float64
		for _, rp := range run.roundPairs {
			per = append(per, ratio(ms(pct(rp[thrKey{"lockgate-3", unc(1)}].Acq, 50)), ms(pct(rp[thrKey{"redsync-3", unc(1)}].Acq, 50))))
		}
		v := ratio(ms(pct(a.Acq, 50)), ms(pct(z.Acq, 50)))
		row(fmt.Sprintf("uncontended C=1: acquire p50 lockgate ÷ redsync (%.3f ÷ %.3f ms)", ms(pct(a.Acq, 50)), ms(pct(z.Acq, 50))),
			"≤ 2", v, per, v <= 2, "%.2f")
	}
	{
		v, per := pairsRatio(16, "etcd")
		row("uncontended C=16: pairs/s lockgate ÷ etcd", "≥ 4", v, per, v >= 4, "%.2f")
	}
	for _, c := range []int{16, 64} {
		a, z := run.cont[thrKey{"lockgate-3", con(c)}], run.cont[thrKey{"redsync-3", con(c)}]
		var per, perP99, perChange []float64
		for _, rc := range run.roundCont {
			l, r := rc[thrKey{"lockgate-3", con(c)}], rc[thrKey{"redsync-3", con(c)}]
			per = append(per, ratio(l.Throughput, r.Throughput))
			perP99 = append(perP99, ratio(ms(pct(l.waits, 99)), ms(mean(l.waits))))
			perChange = append(perChange, l.ChangePct)
		}
		v := ratio(a.rate(), z.rate())
		row(fmt.Sprintf("contended C=%d: acquisitions/s lockgate ÷ redsync", c), "≥ 1.2", v, per, v >= 1.2, "%.2f")
		p := ratio(ms(pct(a.waits, 99)), ms(a.mean()))
		row(fmt.Sprintf("contended C=%d: lockgate acquire p99 ÷ mean (redsync: %.2f)", c, ratio(ms(pct(z.waits, 99)), ms(z.mean()))),
			"≤ 1.3", p, perP99, p <= 1.3, "%.2f")
		row(fmt.Sprintf("contended C=%d: lockgate change of hands %%", c), "≥ 90", a.changePct(), perChange, a.changePct() >= 90, "%.1f")
	}
	run.floorReport(&b)
	b.WriteString(fmt.Sprintf("\nOne slow node (the third server's replies delayed %v), C = 16, pooled (not a target of the issue; for the claim that a slow minority does not slow every call):\n\n", run.slowDelay))
	b.WriteString("| target | uncontended pairs/s healthy → slow | slow ÷ healthy | acquire p50 ms healthy → slow | contended acquisitions/s healthy → slow | slow ÷ healthy |\n|---|---:|---:|---:|---:|---:|\n")
	for _, name := range []string{"lockgate-3", "redsync-3"} {
		h, sl := run.pairs[thrKey{name, scenario{false, 16}}], run.pairs[thrKey{name + "-slow", scenario{false, 16}}]
		hc, sc := run.cont[thrKey{name, scenario{true, 16}}], run.cont[thrKey{name + "-slow", scenario{true, 16}}]
		if h == nil || sl == nil || hc == nil || sc == nil {
			continue
		}
		fmt.Fprintf(&b, "| %s | %.0f → %.0f | %.2f | %.3f → %.3f | %.0f → %.0f | %.2f |\n", name, h.rate(), sl.rate(), ratio(sl.rate(), h.rate()),
			ms(pct(h.Acq, 50)), ms(pct(sl.Acq, 50)), hc.rate(), sc.rate(), ratio(sc.rate(), hc.rate()))
	}
	return b.String()
}

// floorReport writes what HTTP alone allows: the http-floor target (a lock
// server that does no lock work, floor_test.go) and the http-redsync target
// (redsync behind the same server, redsyncfloor_test.go) beside redsync-3
// and lockgate-3, pooled over the rounds. No HTTP lock service on this
// machine can do better than the floor, so a target that the floor misses
// is out of reach over HTTP here; http-redsync is what serving redsync's own
// lock work costs.
func (run *thrRun) floorReport(b *strings.Builder) {
	if run.pairs[thrKey{"http-floor", scenario{false, 1}}] == nil || run.pairs[thrKey{"redsync-3", scenario{false, 1}}] == nil {
		return
	}
	b.WriteString("\nWhat HTTP alone allows (http-floor: the same HTTP client and net/http server, a lock that is a map and a FIFO in memory, no lock work; pooled; not a target but a bound on any lock served over HTTP here; http-redsync: redsync-3 behind that server, not a bound but a reference, what serving redsync's own lock work costs):\n\n")
	b.WriteString("| scenario | measure | http-floor | http-redsync | redsync-3 | lockgate-3 | floor ÷ redsync | http-redsync ÷ redsync | lockgate ÷ floor |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, sc := range scenarios {
		f, h, z, l := thrKey{"http-floor", sc}, thrKey{"http-redsync", sc}, thrKey{"redsync-3", sc}, thrKey{"lockgate-3", sc}
		switch {
		case sc.contended && run.cont[f] != nil && run.cont[z] != nil && run.cont[l] != nil:
			a, r, g := run.cont[f], run.cont[z], run.cont[l]
			fmt.Fprintf(b, "| %s | acquisitions/s | %.0f | – | %.0f | %.0f | %.2f | – | %.2f |\n", sc, a.rate(), r.rate(), g.rate(),
				ratio(a.rate(), r.rate()), ratio(g.rate(), a.rate()))
			fmt.Fprintf(b, "| %s | idle p50 ms | %.3f | – | %.3f | %.3f | %.2f | – | %.2f |\n", sc, ms(pct(a.idle, 50)), ms(pct(r.idle, 50)),
				ms(pct(g.idle, 50)), ratio(ms(pct(a.idle, 50)), ms(pct(r.idle, 50))), ratio(ms(pct(g.idle, 50)), ms(pct(a.idle, 50))))
		case !sc.contended && run.pairs[f] != nil && run.pairs[z] != nil && run.pairs[l] != nil:
			a, r, g := run.pairs[f], run.pairs[z], run.pairs[l]
			hr := run.pairs[h]
			// row writes one measure; with floorless set (the floor uses no
			// Redis, its few ticks are noise) the ratios to the floor are –.
			row := func(what, format string, get func(*pairResult) float64, floorless bool) {
				q := func(x, y float64) string {
					if y == 0 {
						return "–"
					}
					return fmt.Sprintf("%.2f", x/y)
				}
				fr, gf := q(get(a), get(r)), q(get(g), get(a))
				if floorless {
					fr, gf = "–", "–"
				}
				hv, hz := "–", "–"
				if hr != nil {
					hv, hz = fmt.Sprintf(format, get(hr)), q(get(hr), get(r))
				}
				fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", sc, what, fmt.Sprintf(format, get(a)), hv,
					fmt.Sprintf(format, get(r)), fmt.Sprintf(format, get(g)), fr, hz, gf)
			}
			if sc.c == 1 {
				row("acquire p50 ms", "%.3f", func(p *pairResult) float64 { return ms(pct(p.Acq, 50)) }, false)
			}
			row("pairs/s", "%.0f", (*pairResult).rate, false)
			row("bench process CPU s per 1,000 pairs", "%.3f", func(p *pairResult) float64 { return p.perK(p.CPU.self) }, false)
			row("redis-server CPU s per 1,000 pairs", "%.3f", func(p *pairResult) float64 { return p.perK(p.CPU.redis) }, true)
		}
	}
}

func mib(x float64) float64 { return x / (1 << 20) }

// cpuModel is the processor's name as /proc/cpuinfo gives it (x86 Linux;
// elsewhere "processor unknown"): the machine under the same name may change
// between runs, and its speed with it.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "processor unknown"
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "processor unknown"
}

// kernelRelease is the running Linux kernel's release, or "unknown".
func kernelRelease() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}
