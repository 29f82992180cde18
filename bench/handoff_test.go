package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	rsgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
)

// The hand-off benchmark.
//
// Every case runs C contender goroutines on the resource "bench": first for a
// warm-up W0 (LOCKGATE_BENCH_WARMUP, default 1s) that is not measured, then
// for a fixed measuring window W (LOCKGATE_BENCH_WINDOW, default 5s),
// whatever b.N is: percentiles over b.N iterations would be meaningless here.
// Each contender loops: acquire (blocking), hold the lock 1 ms, release, and
// at once acquire again.
//
// The hold (holdLock) waits for the deadline on the monotonic clock, calling
// runtime.Gosched in between, instead of time.Sleep(1ms). Go's runtime sleeps
// in epoll_wait with a whole-millisecond timeout: when network I/O wakes it
// during a sleep, the time left is rounded up to a full millisecond again.
// So time.Sleep(1ms) held 1.21 ms in lockgate's cases, whose process serves
// the other contenders' HTTP requests during each hold, against 1.14 ms in
// redsync's, whose waiters sleep: the hold depended on the peer under test.
// LOCKGATE_BENCH_HOLD=sleep brings back time.Sleep, for comparison.
//
//   - lockgate: the gateway in-process (lockcore.New over three
//     redisnode.New, handlers.New) behind httptest.NewServer on 127.0.0.1.
//     Each contender has its own http.Client and Transport (one keep-alive
//     connection): PUT /locks/bench {"ttl_ms":10000,"wait_ms":30000}, hold,
//     DELETE /locks/bench with the Lease-Id it got.
//   - lockgate-embedded: the same gateway over the embedded in-memory store
//     (one memnode, as cmd/lockgate runs with no Redis configured). It sends
//     no Redis command; it shows what the HTTP hops alone cost, a floor for
//     the Redis-backed gateway on the same machine.
//   - redsync: redsync/v4 over one go-redis v9 client per server, one
//     rs.NewMutex("bench") per contender with the default options (expiry
//     8s, 32 tries, retry delay uniform in 50–250 ms): Lock(), hold, Unlock().
//     A Lock() that gives up after its 32 tries counts as failed.
//
// Measured, for acquisitions that started inside the window (each is let run
// to its end, with the other contenders still competing; acquisitions that
// start after the window keep the contention up and are cancelled once every
// in-window one has finished; those that started in the warm-up are not
// measured, but count as predecessors for the change of hands and, when they
// return inside the window, in the throughput and the commands' divisor):
//
//   - acquire latency: from asking to holding (PUT sent to 201 read; Lock()
//     called to Lock() returned), successful acquisitions only;
//   - change of hands: the successful acquisitions (warm-up, window and
//     after) ordered by the time their acquire returned; over the in-window
//     ones, the share whose holder is not the previous one's;
//   - hand-off latency: for those, previous holder's release returned
//     (DELETE's 204 read; Unlock() returned) to the new holder's acquire
//     returned; it can be slightly negative, the two being read by different
//     goroutines;
//   - idle: for every in-window acquisition but the first, the previous
//     holder's hold ending (release asked) to this acquire returning, change
//     of hands or not: how long the lock goes unused between two holds;
//   - mean ÷ floor: the mean acquire divided by (C−1) × hold. With every
//     contender asking again at once, C−1 of them wait while one holds, and
//     at most one hold ends per hold time, so by Little's law no lock can
//     have a mean wait much below (C−1) × hold (less only the time a
//     contender spends releasing): a ratio of 1 is the best possible;
//   - Redis commands per acquisition: INFO commandstats summed over the
//     three servers between the start and the end of the window, divided by
//     the acquisitions that returned inside it. "sent" counts what clients
//     send (EVALSHA, SET NX, SUBSCRIBE, UNSUBSCRIBE, ...), "executed" adds
//     the commands run inside Lua scripts. INFO, CONFIG and connection set-up
//     (HELLO, CLIENT, PING, AUTH, SELECT) are not counted.
//
// Between cases the servers are flushed (FLUSHALL) and their statistics
// reset (CONFIG RESETSTAT); each lockgate case gets a fresh Redlock, nodes
// and HTTP server.

const resource = "bench"

const hold = time.Millisecond

// window is the measuring window of one case.
func window(tb testing.TB) time.Duration {
	return durationEnv(tb, "LOCKGATE_BENCH_WINDOW", 5*time.Second, false)
}

// warmup is how long each case runs before its window opens.
func warmup(tb testing.TB) time.Duration {
	return durationEnv(tb, "LOCKGATE_BENCH_WARMUP", time.Second, true)
}

func durationEnv(tb testing.TB, name string, def time.Duration, zeroOK bool) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || (d == 0 && !zeroOK) {
		want := "a positive Go duration such as 5s"
		if zeroOK {
			want = "a Go duration such as 1s, or 0"
		}
		tb.Fatalf("%s=%q: want %s", name, v, want)
	}
	return d
}

// holdMode is LOCKGATE_BENCH_HOLD: "" (1 ms on the clock, yielding),
// "sleep" (time.Sleep) or "spin" (1 ms on the clock, never yielding).
var holdMode = os.Getenv("LOCKGATE_BENCH_HOLD")

// settings checks the environment and returns the warm-up and the window.
func settings(tb testing.TB) (warm, win time.Duration) {
	if v := holdMode; v != "" && v != "sleep" && v != "spin" {
		tb.Fatalf("LOCKGATE_BENCH_HOLD=%q: want sleep, spin, or nothing for 1 ms on the clock", v)
	}
	return warmup(tb), window(tb)
}

// holdLock holds the lock for hold: see the package comment for why it does
// not simply call time.Sleep. It waits on the monotonic clock and yields its
// processor on every turn, as a sleeping holder would leave it to the other
// goroutines. LOCKGATE_BENCH_HOLD=spin busy-waits without yielding: it holds
// as exactly, but keeps one of the Go processors (BENCHMARKS.md reports what
// that changes).
func holdLock() {
	switch holdMode {
	case "sleep":
		time.Sleep(hold)
		return
	case "spin":
		for end := time.Now().Add(hold); time.Now().Before(end); {
		}
		return
	}
	for end := time.Now().Add(hold); time.Now().Before(end); {
		runtime.Gosched()
	}
}

func holdName() string {
	switch holdMode {
	case "sleep":
		return "time.Sleep(1ms)"
	case "spin":
		return "1 ms on the clock, never yielding (LOCKGATE_BENCH_HOLD=spin)"
	}
	return "1 ms on the clock (holdLock)"
}

// acquisition is one acquire attempt of one contender.
type acquisition struct {
	who      int
	start    time.Time // asked
	got      time.Time // acquire returned (success or failure)
	holdEnd  time.Time // hold over, release asked
	released time.Time // release returned
	ok       bool
	inWindow bool // started inside the window
}

// peer runs one contender's cycles.
type peer interface {
	// contender returns contender i's cycle: acquire (bounded by ctx), hold,
	// release. It fills a's times and ok.
	contender(tb testing.TB, i int) func(ctx context.Context, a *acquisition) error
	close()
}

// result is what one case measured.
type result struct {
	Peer        string
	Contenders  int
	Window      time.Duration
	Acquired    int // successful acquisitions started in the window
	Failed      int // failed acquisitions started in the window
	AcqP50      time.Duration
	AcqP99      time.Duration
	AcqMax      time.Duration
	AcqMean     time.Duration
	ChangePct   float64
	HandoffP50  time.Duration
	HoldP50     time.Duration // the 1 ms hold as measured
	ReleaseP50  time.Duration // release asked to release returned
	HandoffP99  time.Duration
	Handoffs    int
	IdleP50     time.Duration // previous hold ended to acquire returned
	IdleP99     time.Duration
	InWindowOK  int // successful acquisitions that returned inside the window
	CmdsSent    float64
	CmdsExec    float64
	Throughput  float64 // InWindowOK per second
	FailSamples []string

	// The samples behind the figures, for pooling several windows
	// (throughput_test.go): acquire latencies, idle times, and the changes
	// of hands over the acquisitions that had a predecessor.
	waits, idle      []time.Duration
	changes, counted int
}

// cluster is the three redis-server processes every case runs on.
type cluster struct {
	srvs    []*redistest.Server
	clients []*redis.Client // for INFO, FLUSHALL and redsync's pools
}

// startCluster starts the three servers, with the extra redis-server
// arguments of LOCKGATE_BENCH_REDIS_ARGS (space-separated, e.g.
// "--appendonly yes --appendfsync everysec" for the persistence that
// docs/operations.md recommends; default none: no persistence).
func startCluster(tb testing.TB) *cluster {
	tb.Helper()
	c := &cluster{srvs: redistest.StartN(tb, 3, &redistest.Options{Args: strings.Fields(os.Getenv("LOCKGATE_BENCH_REDIS_ARGS"))})}
	for _, s := range c.srvs {
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), DisableIdentity: true, PoolSize: 128})
		c.clients = append(c.clients, rdb)
		tb.Cleanup(func() { _ = rdb.Close() })
	}
	return c
}

// reset flushes every server and zeroes its statistics.
func (c *cluster) reset(tb testing.TB) {
	ctx := context.Background()
	for _, rdb := range c.clients {
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			tb.Fatalf("FLUSHALL: %v", err)
		}
		if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
			tb.Fatalf("CONFIG RESETSTAT: %v", err)
		}
	}
}

// commands returns the calls counted by INFO commandstats on all servers,
// by lower-case command name.
func (c *cluster) commands() (map[string]int64, error) {
	out := map[string]int64{}
	for _, rdb := range c.clients {
		s, err := rdb.Info(context.Background(), "commandstats").Result()
		if err != nil {
			return nil, fmt.Errorf("INFO commandstats: %w", err)
		}
		for line := range strings.SplitSeq(s, "\n") {
			line = strings.TrimSpace(line)
			name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
			if !ok || !strings.HasPrefix(line, "cmdstat_") {
				continue
			}
			n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
			out[name] += n
		}
	}
	return out, nil
}

// notCounted are the harness's own commands and connection set-up.
var notCounted = map[string]bool{
	"info": true, "config|resetstat": true, "config": true, "flushall": true,
	"hello": true, "client|setinfo": true, "client|setname": true, "client": true,
	"ping": true, "auth": true, "select": true,
}

// inScript are the commands each peer only runs inside its Lua scripts (see
// lockcore/redisnode/*.lua and redsync's scripts.go); everything else it
// counts is sent by a client.
var inScript = map[string]map[string]bool{
	"lockgate": {"hget": true, "hmget": true, "hset": true, "incr": true, "pexpire": true,
		"pttl": true, "del": true, "publish": true, "get": true, "set": true},
	"redsync": {"get": true, "del": true, "pexpire": true},
}

func countCommands(peerName string, before, after map[string]int64) (sent, exec int64) {
	for name, n := range after {
		if notCounted[name] {
			continue
		}
		d := n - before[name]
		exec += d
		if !inScript[peerName][name] {
			sent += d
		}
	}
	return sent, exec
}

// runCase runs contenders on p for the warm-up and then the window, and
// measures the window.
func runCase(tb testing.TB, c *cluster, peerName string, p peer, contenders int, warm, win time.Duration) result {
	tb.Helper()
	cycles := make([]func(context.Context, *acquisition) error, contenders)
	for i := range cycles {
		cycles[i] = p.contender(tb, i)
	}

	var (
		mu          sync.Mutex
		all         []acquisition
		outstanding atomic.Int64 // in-window acquisitions not finished
		failMu      sync.Mutex
		failSamples []string
	)
	// drained ends when every in-window acquisition has finished; it cancels
	// the contenders' post-window attempts. hard bounds the whole case.
	drainCtx, drained := context.WithCancel(context.Background())
	defer drained()
	hardCtx, hardCancel := context.WithTimeout(context.Background(), warm+win+2*time.Minute)
	defer hardCancel()

	// The command counters are read when the window opens and when it
	// closes: by timers, since the contenders are running by then (without
	// a warm-up, before any contender starts).
	type snap struct {
		m   map[string]int64
		err error
	}
	beforeCh, atEndCh := make(chan snap, 1), make(chan snap, 1)
	read := func(ch chan<- snap) func() {
		return func() {
			m, err := c.commands()
			ch <- snap{m, err}
		}
	}
	start := time.Now().Add(warm)
	if warm == 0 {
		read(beforeCh)()
		start = time.Now()
	} else {
		t := time.AfterFunc(warm, read(beforeCh))
		defer t.Stop()
	}
	end := start.Add(win)
	endTimer := time.AfterFunc(time.Until(end), read(atEndCh))
	defer endTimer.Stop()

	var wg sync.WaitGroup
	outstanding.Add(1) // held until the window closes
	time.AfterFunc(time.Until(end), func() {
		if outstanding.Add(-1) == 0 {
			drained()
		}
	})
	for i := range contenders {
		wg.Go(func() {
			for {
				a := acquisition{who: i, start: time.Now()}
				a.inWindow = !a.start.Before(start) && a.start.Before(end)
				after := !a.start.Before(end)
				ctx := hardCtx
				if a.inWindow {
					outstanding.Add(1)
				} else if after {
					select {
					case <-drainCtx.Done():
						return
					default:
					}
					ctx = drainCtx
				}
				err := cycles[i](ctx, &a)
				if a.inWindow && outstanding.Add(-1) == 0 {
					drained()
				}
				if err != nil && a.inWindow {
					failMu.Lock()
					if len(failSamples) < 5 {
						failSamples = append(failSamples, err.Error())
					}
					failMu.Unlock()
				}
				// Warm-up and post-window acquisitions are kept when they
				// succeeded: they are the predecessors and successors of
				// in-window ones for the change of hands.
				if a.inWindow || (a.ok && ctx.Err() == nil) {
					mu.Lock()
					all = append(all, a)
					mu.Unlock()
				}
				if hardCtx.Err() != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	if hardCtx.Err() != nil {
		tb.Fatalf("%s/contenders=%d: did not finish within %v", peerName, contenders, warm+win+2*time.Minute)
	}
	counters := func(ch <-chan snap) map[string]int64 {
		select { // the window's timers may still be reading
		case s := <-ch:
			if s.err != nil {
				tb.Fatal(s.err)
			}
			return s.m
		case <-time.After(time.Minute):
			tb.Fatalf("%s/contenders=%d: the command counters were not read", peerName, contenders)
			return nil
		}
	}
	before, atEnd := counters(beforeCh), counters(atEndCh)
	return analyse(peerName, contenders, win, start, end, all, before, atEnd, failSamples)
}

func analyse(peerName string, contenders int, win time.Duration, start, end time.Time, all []acquisition,
	before, atEnd map[string]int64, failSamples []string) result {
	r := result{Peer: peerName, Contenders: contenders, Window: win, FailSamples: failSamples}
	var ok []acquisition
	var waits, holds, releases []time.Duration
	for _, a := range all {
		if a.ok {
			ok = append(ok, a)
		}
		if !a.inWindow {
			continue
		}
		if a.ok {
			r.Acquired++
			waits = append(waits, a.got.Sub(a.start))
			holds = append(holds, a.holdEnd.Sub(a.got))
			releases = append(releases, a.released.Sub(a.holdEnd))
		} else {
			r.Failed++
		}
	}
	slices.SortFunc(ok, func(x, y acquisition) int { return x.got.Compare(y.got) })
	var handoffs, idle []time.Duration
	changes, counted := 0, 0
	for i, a := range ok {
		if !a.got.Before(start) && !a.got.After(end) {
			r.InWindowOK++
		}
		if i == 0 || !a.inWindow {
			continue
		}
		counted++
		prev := ok[i-1]
		idle = append(idle, a.got.Sub(prev.holdEnd))
		if prev.who != a.who {
			changes++
			handoffs = append(handoffs, a.got.Sub(prev.released))
		}
	}
	if counted > 0 {
		r.ChangePct = 100 * float64(changes) / float64(counted)
	}
	r.Handoffs = len(handoffs)
	r.waits, r.idle, r.changes, r.counted = waits, idle, changes, counted
	r.AcqP50, r.AcqP99, r.AcqMax = pct(waits, 50), pct(waits, 99), pct(waits, 100)
	if len(waits) > 0 {
		var sum time.Duration
		for _, w := range waits {
			sum += w
		}
		r.AcqMean = sum / time.Duration(len(waits))
	}
	r.HandoffP50, r.HandoffP99 = pct(handoffs, 50), pct(handoffs, 99)
	r.IdleP50, r.IdleP99 = pct(idle, 50), pct(idle, 99)
	r.HoldP50, r.ReleaseP50 = pct(holds, 50), pct(releases, 50)
	sent, exec := countCommands(peerName, before, atEnd)
	if r.InWindowOK > 0 {
		r.CmdsSent = float64(sent) / float64(r.InWindowOK)
		r.CmdsExec = float64(exec) / float64(r.InWindowOK)
	}
	r.Throughput = float64(r.InWindowOK) / win.Seconds()
	return r
}

// pct is the nearest-rank p-th percentile (p=100: the maximum).
func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// ---- lockgate over HTTP ----

type lockgatePeer struct {
	url    string
	srv    *httptest.Server
	locker *lockcore.Redlock
	nodes  []interface{ Close() error }
	stop   func() // if not nil, run by close after the gateway's
}

// newLockgate starts the gateway over the cluster's three servers, or over
// the embedded in-memory store when embedded is set, and waits until it is
// ready (newLockgateOn in throughput_test.go).
func newLockgate(tb testing.TB, c *cluster, embedded bool) *lockgatePeer {
	tb.Helper()
	if embedded {
		return newLockgateOn(tb, nil, true)
	}
	return newLockgateOn(tb, c.srvs, false)
}

func (p *lockgatePeer) close() {
	p.locker.Close()
	p.srv.Close()
	for _, n := range p.nodes {
		_ = n.Close()
	}
	if p.stop != nil {
		p.stop()
	}
}

const acquireBody = `{"ttl_ms":10000,"wait_ms":30000}`

func (p *lockgatePeer) contender(tb testing.TB, i int) func(context.Context, *acquisition) error {
	client := &http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Minute},
		Timeout:   time.Minute,
	}
	tb.Cleanup(client.CloseIdleConnections)
	do := func(req *http.Request) (int, http.Header, error) {
		resp, err := client.Do(req)
		if err != nil {
			return 0, nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode, resp.Header, nil
	}
	return func(ctx context.Context, a *acquisition) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, p.url, strings.NewReader(acquireBody))
		req.Header.Set("Content-Type", "application/json")
		code, hdr, err := do(req)
		a.got = time.Now()
		if err != nil {
			return err
		}
		if code != http.StatusCreated {
			return fmt.Errorf("PUT: %d", code)
		}
		a.ok = true
		holdLock()
		a.holdEnd = time.Now()
		// The release always runs to its end, even past the window.
		req, _ = http.NewRequestWithContext(context.Background(), http.MethodDelete, p.url, nil)
		req.Header.Set("Lease-Id", hdr.Get("Lease-Id"))
		code, _, err = do(req)
		a.released = time.Now()
		if err != nil {
			return err
		}
		if code != http.StatusNoContent {
			return fmt.Errorf("DELETE: %d", code)
		}
		return nil
	}
}

// ---- redsync ----

type redsyncPeer struct{ rs *redsync.Redsync }

func newRedsync(c *cluster) *redsyncPeer { return newRedsyncOn(c.clients) }

// newRedsyncOn is redsync over the given clients, one pool each.
func newRedsyncOn(clients []*redis.Client) *redsyncPeer {
	var pools []rsredis.Pool
	for _, rdb := range clients {
		pools = append(pools, rsgoredis.NewPool(rdb))
	}
	return &redsyncPeer{rs: redsync.New(pools...)}
}

func (p *redsyncPeer) close() {}

func (p *redsyncPeer) contender(_ testing.TB, _ int) func(context.Context, *acquisition) error {
	m := p.rs.NewMutex(resource) // default options; a Mutex is one contender's
	return func(ctx context.Context, a *acquisition) error {
		err := m.LockContext(ctx) // LockContext(context.Background()) is Lock()
		a.got = time.Now()
		if err != nil {
			return err
		}
		a.ok = true
		holdLock()
		a.holdEnd = time.Now()
		_, err = m.Unlock()
		a.released = time.Now()
		return err
	}
}

// ---- the cases ----

type benchCase struct {
	peer       string
	contenders int
}

var cases = []benchCase{
	{"lockgate", 1}, {"lockgate", 16}, {"lockgate", 64},
	{"redsync", 1}, {"redsync", 16}, {"redsync", 64},
	{"lockgate-embedded", 1}, {"lockgate-embedded", 16}, {"lockgate-embedded", 64},
}

func run(tb testing.TB, c *cluster, bc benchCase, warm, win time.Duration) result {
	tb.Helper()
	c.reset(tb)
	var p peer
	switch bc.peer {
	case "lockgate":
		p = newLockgate(tb, c, false)
	case "lockgate-embedded":
		p = newLockgate(tb, c, true)
	default:
		p = newRedsync(c)
	}
	defer p.close()
	return runCase(tb, c, bc.peer, p, bc.contenders, warm, win)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkHandoff runs each case for one warm-up and one window per invocation, whatever
// b.N is; run it with -benchtime 1x.
func BenchmarkHandoff(b *testing.B) {
	c := startCluster(b)
	warm, win := settings(b)
	for _, bc := range cases {
		b.Run(fmt.Sprintf("%s/contenders=%d", bc.peer, bc.contenders), func(b *testing.B) {
			r := run(b, c, bc, warm, win)
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(ms(r.AcqP50), "acq-p50-ms")
			b.ReportMetric(ms(r.AcqP99), "acq-p99-ms")
			b.ReportMetric(ms(r.AcqMean), "acq-mean-ms")
			b.ReportMetric(r.ChangePct, "change-%")
			b.ReportMetric(ms(r.HandoffP50), "handoff-p50-ms")
			b.ReportMetric(ms(r.HandoffP99), "handoff-p99-ms")
			b.ReportMetric(ms(r.IdleP50), "idle-p50-ms")
			b.ReportMetric(ms(r.IdleP99), "idle-p99-ms")
			b.ReportMetric(r.CmdsSent, "cmds-sent/acq")
			b.ReportMetric(r.CmdsExec, "cmds-exec/acq")
			b.ReportMetric(float64(r.Acquired), "acquisitions")
			b.ReportMetric(float64(r.Failed), "failed")
			if r.Acquired == 0 {
				b.Errorf("no acquisition; failures: %v", r.FailSamples)
			}
		})
	}
}

// TestReport runs every case in one run on the same three redis-server
// processes and prints BENCHMARKS.md's table (also written to the file named
// by LOCKGATE_BENCH_OUT, if set). It runs only with LOCKGATE_BENCH_REPORT=1.
func TestReport(t *testing.T) {
	if os.Getenv("LOCKGATE_BENCH_REPORT") != "1" {
		t.Skip("set LOCKGATE_BENCH_REPORT=1 to run the hand-off report (about 1 minute)")
	}
	c := startCluster(t)
	warm, win := settings(t)
	res := map[benchCase]result{}
	for _, bc := range cases {
		r := run(t, c, bc, warm, win)
		res[bc] = r
		t.Logf("%s/contenders=%d: %d acquired, %d failed, acquire p50 %.2f ms p99 %.2f ms max %.2f ms, change %.1f %%, "+
			"hand-off p50 %.3f ms p99 %.3f ms, %.2f cmds sent/acq (%.2f executed), %.0f acq/s; failures e.g. %v",
			bc.peer, bc.contenders, r.Acquired, r.Failed, ms(r.AcqP50), ms(r.AcqP99), ms(r.AcqMax), r.ChangePct,
			ms(r.HandoffP50), ms(r.HandoffP99), r.CmdsSent, r.CmdsExec, r.Throughput, r.FailSamples)
		if r.Acquired == 0 {
			t.Errorf("%s/contenders=%d: no acquisition; failures: %v", bc.peer, bc.contenders, r.FailSamples)
		}
	}
	out := report(res, warm, win)
	fmt.Println(out)
	if path := os.Getenv("LOCKGATE_BENCH_OUT"); path != "" {
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func report(res map[benchCase]result, warm, win time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Warm-up %v and window %v per case; hold %s; %s.\n\n", warm, win, holdName(), time.Now().UTC().Format(time.RFC3339))
	b.WriteString("| peer | contenders | acquired (failed) | acq/s | acquire p50 ms | acquire p99 ms | acquire mean ms | acquire max ms | mean ÷ floor | change of hands % | hand-off p50 ms | hand-off p99 ms | idle p50 ms | idle p99 ms | hold p50 ms | release p50 ms | cmds sent/acq | cmds executed/acq |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, bc := range cases {
		r := res[bc]
		fmt.Fprintf(&b, "| %s | %d | %d (%d) | %.0f | %.2f | %.2f | %.2f | %.2f | %s | %.1f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.2f | %.2f |\n",
			r.Peer, r.Contenders, r.Acquired, r.Failed, r.Throughput, ms(r.AcqP50), ms(r.AcqP99), ms(r.AcqMean), ms(r.AcqMax),
			overFloor(r), r.ChangePct, ms(r.HandoffP50), ms(r.HandoffP99), ms(r.IdleP50), ms(r.IdleP99),
			ms(r.HoldP50), ms(r.ReleaseP50), r.CmdsSent, r.CmdsExec)
	}
	b.WriteString("\nTargets (lockgate):\n\n")
	b.WriteString("| contenders | acquire p99 ÷ redsync's (≤ 0.05) | change of hands (≥ 90 %) | hand-off p50 (≤ 1 ms) | cmds sent/acq ÷ uncontended (≤ ~2) | acquire p50 ÷ redsync's | acq/s ÷ redsync's | embedded store: acquire p99 ÷ redsync's | floor ÷ redsync's p99 |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	base := res[benchCase{"lockgate", 1}]
	for _, n := range []int{16, 64} {
		lg, rs := res[benchCase{"lockgate", n}], res[benchCase{"redsync", n}]
		emb := res[benchCase{"lockgate-embedded", n}]
		p99 := ratio(ms(lg.AcqP99), ms(rs.AcqP99))
		cmd := ratio(lg.CmdsSent, base.CmdsSent)
		fmt.Fprintf(&b, "| %d | %.4f %s | %.1f %% %s | %.3f ms %s | %.2f %s | %.4f | %.2f | %.4f | %.4f |\n", n,
			p99, verdict(p99 <= 0.05), lg.ChangePct, verdict(lg.ChangePct >= 90),
			ms(lg.HandoffP50), verdict(lg.HandoffP50 <= time.Millisecond), cmd, verdict(cmd <= 2),
			ratio(ms(lg.AcqP50), ms(rs.AcqP50)), ratio(lg.Throughput, rs.Throughput),
			ratio(ms(emb.AcqP99), ms(rs.AcqP99)), ratio(ms(floor(n)), ms(rs.AcqP99)))
	}
	return b.String()
}

// floor is the least mean acquire any lock can have with c contenders that
// each ask again at once after holding for hold: (c−1) × hold (see the
// package comment; the time a contender spends releasing is left out).
func floor(c int) time.Duration { return time.Duration(c-1) * hold }

// overFloor formats r's mean acquire ÷ floor, or "–" for one contender.
func overFloor(r result) string {
	if r.Contenders < 2 {
		return "–"
	}
	return fmt.Sprintf("%.2f", ratio(ms(r.AcqMean), ms(floor(r.Contenders))))
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}
