package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/proc"
	"github.com/lockgate/lockgate/internal/redistest"
)

// The page's cost (TestUIOverhead).
//
// The gateway's web page (/ui/) polls GET /locks (a page of 100 locks) and
// GET /metrics every second while it is open. TestUIOverhead measures what
// that costs the gateway's lock traffic: the gateway binary (cmd/lockgate,
// built by the test from this work tree, default settings) runs on the three
// redis-server processes with LOCKGATE_BENCH_HELD locks held (default
// 10,000, TTL 1 h), and the uncontended scenario of TestThroughput
// (LOCKGATE_BENCH_UI_C workers, default 16, each acquiring and releasing
// its own resource over HTTP) runs in two arms:
//
//   - closed: no browser;
//   - open: a headless Chromium (Debian's chromium) showing /ui/, started
//     before the arm's warm-up; the arm starts once the gateway has counted
//     two of the page's listings, and the browser is killed after the
//     window.
//
// LOCKGATE_BENCH_ROUNDS rounds (default 3) alternate the order of the arms
// (closed then open, open then closed, ...), each arm with the warm-up and
// window of the other benches (LOCKGATE_BENCH_WARMUP, LOCKGATE_BENCH_WINDOW).
// It prints, per arm and round and pooled: pairs per second, the open/closed
// ratio, the gateway process's CPU time per 1,000 pairs (/proc/<pid>/stat),
// the browser's CPU time over the window (the chromium processes that are
// its descendants, summed) and the listings the gateway answered in the
// window. The browser runs on the same machine as the gateway and the load:
// on a machine with few cores its CPU competes with theirs, which the
// gateway's CPU per 1,000 pairs leaves out. Run it on a quiet machine:
//
//	cd bench && LOCKGATE_BENCH_UI=1 go test -run TestUIOverhead -v -count=1 -timeout 20m
func TestUIOverhead(t *testing.T) {
	if os.Getenv("LOCKGATE_BENCH_UI") != "1" {
		t.Skip("set LOCKGATE_BENCH_UI=1 to measure the web page's cost to throughput (bench/uioverhead_test.go)")
	}
	warm, win := settings(t)
	rounds := intEnv(t, "LOCKGATE_BENCH_ROUNDS", 3)
	held := intEnv(t, "LOCKGATE_BENCH_HELD", 10000)
	workers := intEnv(t, "LOCKGATE_BENCH_UI_C", 16)
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium not found in PATH (Debian/Ubuntu: apt-get install chromium)")
	}
	e := &thrEnv{c: startCluster(t)}
	gw := startGatewayProcess(t, e.c.srvs)
	holdLocks(t, gw.base, held)
	t.Logf("%d rounds × 2 arms of %v warm-up + %v window, %d workers, %d locks held", rounds, warm, win, workers, held)

	type arm struct {
		pairs              pairResult
		gatewayCPU, browse time.Duration
		listed             float64
		perRound           []float64 // pairs per second
	}
	arms := map[bool]*arm{false: {}, true: {}}
	for round := range rounds {
		order := []bool{false, true}
		if round%2 == 1 {
			order = []bool{true, false}
		}
		for _, open := range order {
			var b *browser
			if open {
				b = openPage(t, chromium, gw.base)
			}
			type snap struct {
				gateway, browser time.Duration
				listed           float64
				err              error
			}
			take := func() snap {
				s := snap{}
				s.gateway, s.err = procCPU(gw.proc.Pid())
				if b != nil {
					s.browser = treeCPU(b.proc.Pid())
				}
				if s.err == nil {
					s.listed, s.err = listed(gw.base)
				}
				return s
			}
			snaps := make(chan snap, 2)
			t1 := time.AfterFunc(warm, func() { snaps <- take() })
			t2 := time.AfterFunc(warm+win, func() { snaps <- take() })
			r := runPairs(t, e, "page "+armName(open), gw, workers, warm, win)
			t1.Stop()
			t2.Stop()
			before, after := <-snaps, <-snaps
			if before.err != nil || after.err != nil {
				t.Fatalf("reading the gateway's CPU time or metrics: %v %v", before.err, after.err)
			}
			if b != nil {
				b.proc.Kill()
			}
			if r.Pairs == 0 || r.Errors > 0 {
				t.Fatalf("page %s, round %d: %d pairs, %d errors: %s", armName(open), round+1, r.Pairs, r.Errors, r.kinds())
			}
			a := arms[open]
			a.pairs.add(r)
			a.gatewayCPU += after.gateway - before.gateway
			a.browse += after.browser - before.browser
			a.listed += after.listed - before.listed
			a.perRound = append(a.perRound, r.rate())
			t.Logf("round %d, page %s: %.0f pairs/s, gateway CPU %.3f s per 1,000 pairs, %.0f listings",
				round+1, armName(open), r.rate(), r.perK(after.gateway-before.gateway), after.listed-before.listed)
		}
	}

	closed, open := arms[false], arms[true]
	var out strings.Builder
	fmt.Fprintf(&out, "\nThe page's cost: %d workers uncontended, %d locks held, %d rounds of %v windows (%v warm-up)\n\n",
		workers, held, rounds, win, warm)
	fmt.Fprintf(&out, "| page | pairs/s | per round | gateway CPU s / 1,000 pairs | browser CPU s / s of window | listings / s |\n|---|---|---|---|---|---|\n")
	for _, o := range []bool{false, true} {
		a := arms[o]
		var per []string
		for _, v := range a.perRound {
			per = append(per, fmt.Sprintf("%.0f", v))
		}
		fmt.Fprintf(&out, "| %s | %.0f | %s | %.3f | %.3f | %.2f |\n", armName(o), a.pairs.rate(), strings.Join(per, ", "),
			a.pairs.perK(a.gatewayCPU), a.browse.Seconds()/a.pairs.Window.Seconds(), a.listed/a.pairs.Window.Seconds())
	}
	var ratios []string
	for i := range closed.perRound {
		ratios = append(ratios, fmt.Sprintf("%.3f", ratio(open.perRound[i], closed.perRound[i])))
	}
	fmt.Fprintf(&out, "\nopen/closed throughput: %.3f pooled (per round: %s); the goal is at least 0.95.\n",
		ratio(open.pairs.rate(), closed.pairs.rate()), strings.Join(ratios, ", "))
	// The page lists once a second: a window of two seconds in all sees it.
	if open.listed == 0 && open.pairs.Window >= 2*time.Second {
		t.Errorf("the gateway answered no listing while the page was open: the open arm measured nothing")
	}
	t.Log(out.String())
}

func armName(open bool) string {
	if open {
		return "open"
	}
	return "closed"
}

// gatewayProcess is the gateway binary running on a free loopback port.
type gatewayProcess struct {
	base string
	proc proc.Process
}

// pairer is worker i's uncontended cycle on /locks/u-<i>.
func (g *gatewayProcess) pairer(tb testing.TB, i int) func(context.Context, *pair) error {
	return pairerAt(tb, g.base+"/locks/u-"+strconv.Itoa(i))
}

// contender is not used: TestUIOverhead runs uncontended pairs only.
func (g *gatewayProcess) contender(tb testing.TB, _ int) func(context.Context, *acquisition) error {
	tb.Fatal("TestUIOverhead runs no contended case")
	return nil
}

func (g *gatewayProcess) close() {}

// pairerAt acquires and releases url, one pair per call, timing both
// answers (lockgatePeer.pairer and TestUIOverhead use it).
func pairerAt(tb testing.TB, url string) func(context.Context, *pair) error {
	do := lgClient(tb)
	return func(ctx context.Context, pr *pair) error {
		lease, err := lgAcquire(ctx, do, url, `{"ttl_ms":10000}`)
		pr.got = time.Now()
		if err != nil {
			return err
		}
		pr.ok = true
		err = lgRelease(do, url, lease)
		pr.released = time.Now()
		return err
	}
}

// startGatewayProcess builds cmd/lockgate and runs it on srvs until the test
// ends, its log in a file of the test's temporary directory.
func startGatewayProcess(tb testing.TB, srvs []*redistest.Server) *gatewayProcess {
	tb.Helper()
	dir := tb.TempDir()
	bin := filepath.Join(dir, "lockgate")
	build := exec.Command("go", "build", "-o", bin, "./cmd/lockgate")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		tb.Fatalf("go build ./cmd/lockgate: %v\n%s", err, out)
	}
	var urls []string
	for _, s := range srvs {
		urls = append(urls, s.URL())
	}
	logf, err := os.Create(filepath.Join(dir, "lockgate.log"))
	if err != nil {
		tb.Fatal(err)
	}
	defer logf.Close() // the child has its own descriptor
	g := &gatewayProcess{}
	var lastErr error
	for range 3 { // a free port may be taken before the gateway binds it
		port, err := freePort()
		if err != nil {
			tb.Fatal(err)
		}
		g.base = "http://127.0.0.1:" + strconv.Itoa(port)
		cmd := exec.Command(bin, "-addr", "127.0.0.1:"+strconv.Itoa(port), "-redis", strings.Join(urls, ","))
		cmd.Stdout, cmd.Stderr = logf, logf
		if lastErr = g.proc.Launch(cmd, func() error { return status(g.base+"/readyz", http.StatusOK) }, 20*time.Millisecond, 30*time.Second); lastErr == nil {
			tb.Cleanup(func() { g.proc.Terminate(5 * time.Second) })
			return g
		}
	}
	tb.Fatalf("lockgate did not start: %v: %s", lastErr, tail(filepath.Join(dir, "lockgate.log")))
	return nil
}

// status fails unless GET url answers want.
func status(url string, want int) error {
	c := &http.Client{Timeout: time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != want {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// holdLocks takes n locks held for an hour (the default largest TTL) on
// resources held:<i>, with 16 workers.
func holdLocks(tb testing.TB, base string, n int) {
	tb.Helper()
	const holders = 16
	errc := make(chan error, holders)
	for w := range holders {
		go func() {
			do := lgClient(tb)
			for i := w; i < n; i += holders {
				url := fmt.Sprintf("%s/locks/held:%06d", base, i)
				if _, err := lgAcquire(context.Background(), do, url, `{"ttl_ms":3600000,"owner":"bench"}`); err != nil {
					errc <- fmt.Errorf("%s: %w", url, err)
					return
				}
			}
			errc <- nil
		}()
	}
	for range holders {
		if err := <-errc; err != nil {
			tb.Fatal(err)
		}
	}
}

// listed is the number of GET /locks the gateway has answered with a page.
func listed(base string) (float64, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(base + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), `lockgate_requests_total{op="list",outcome="listed"} `); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, nil // no listing yet: the series starts at the first
}

// browser is a headless Chromium showing the page.
type browser struct{ proc proc.Process }

// openPage starts a headless Chromium (fresh profile) on base+"/ui/" and
// waits until the gateway has answered two more listings, the page's polls.
func openPage(tb testing.TB, bin, base string) *browser {
	tb.Helper()
	dir := tb.TempDir()
	before, err := listed(base)
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--window-size=1200,760", base+"/ui/")
	logf, err := os.Create(filepath.Join(dir, "chromium.log"))
	if err != nil {
		tb.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	b := &browser{}
	polling := func() error {
		n, err := listed(base)
		if err != nil {
			return err
		}
		if n < before+2 {
			return errors.New("the page has not listed the locks twice yet")
		}
		return nil
	}
	if err := b.proc.Launch(cmd, polling, 50*time.Millisecond, 30*time.Second); err != nil {
		tb.Fatalf("chromium on %s/ui/: %v: %s", base, err, tail(filepath.Join(dir, "chromium.log")))
	}
	tb.Cleanup(b.proc.Kill)
	return b
}

// treeCPU is the user+system CPU time of process pid and its descendants
// that are running now (a process that has exited no longer counts).
func treeCPU(pid int) time.Duration {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	parent := map[int]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 2 {
			continue
		}
		if pp, err := strconv.Atoi(f[1]); err == nil { // field 4, ppid
			parent[p] = pp
		}
	}
	var total time.Duration
	for p := range parent {
		for q := p; q > 1; q = parent[q] {
			if q == pid {
				if d, err := procCPU(p); err == nil {
					total += d
				}
				break
			}
		}
	}
	return total
}
