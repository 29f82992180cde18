package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/api"
	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/internal/testlog"
	"github.com/lockgate/lockgate/lockcore"
)

// gateway is run() serving on a free loopback port.
type gateway struct {
	base string
	log  *testlog.Buffer
}

// startGateway runs the gateway with args and env until the test ends.
func startGateway(t *testing.T, args []string, env map[string]string) *gateway {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	g := &gateway{log: &testlog.Buffer{}}
	addrc := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		// No drain at the test's end unless args ask for one.
		done <- run(ctx, append([]string{"-addr", "127.0.0.1:0", "-shutdown-delay", "0s"}, args...), envOf(env), g.log, func(a string) { addrc <- a })
	}()
	select {
	case a := <-addrc:
		g.base = "http://" + a
	case err := <-done:
		cancel()
		t.Fatalf("the gateway did not start: %v\n%s", err, g.log)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatalf("the gateway did not start within 10s:\n%s", g.log)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
		if t.Failed() {
			t.Logf("gateway log:\n%s", g.log)
		}
	})
	return g
}

type answer struct {
	status int
	header http.Header
	body   string
}

// do sends one request. hdr is name, value pairs.
func (g *gateway) do(t *testing.T, method, path, body string, hdr ...string) answer {
	t.Helper()
	req, err := http.NewRequest(method, g.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", api.MediaJSON)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}
}

// eventually polls path until it answers status, for at most 15s.
func (g *gateway) eventually(t *testing.T, path string, status int) answer {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		a := g.do(t, http.MethodGet, path, "")
		if a.status == status {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s still answers %d %s, want %d", path, a.status, a.body, status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waiters reports whether the gateway's lockgate_waiters reaches n within d:
// a waiting request is in the gateway's queue once it counts there.
func (g *gateway) waiters(t *testing.T, n float64, d time.Duration) bool {
	t.Helper()
	for deadline := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		if g.scrape(t)["lockgate_waiters"] == n {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// scrape reads /metrics into series → value, for lockgate_* series.
func (g *gateway) scrape(t *testing.T) map[string]float64 {
	t.Helper()
	a := g.do(t, http.MethodGet, "/metrics", "")
	if a.status != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", a.status, a.body)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(a.body))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "lockgate_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

func redisURLs(servers []*redistest.Server) string {
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = s.URL()
	}
	return strings.Join(urls, ",")
}

// /readyz follows the quorum: 200 while a majority of the three nodes
// answers, 503 as soon as a majority is gone, 200 again when they return
// (restarted, they have too few nodes to recover from: they serve once
// their quarantine of the largest TTL, 2 s here, is over). /healthz stays
// 200 throughout: it asks no node.
func TestReadinessFollowsTheQuorum(t *testing.T) {
	nodes := redistest.StartN(t, 3, &redistest.Options{AOF: true})
	g := startGateway(t, []string{"-redis", redisURLs(nodes), "-max-ttl", "2s", "-default-ttl", "1s"}, nil)
	g.eventually(t, "/readyz", http.StatusOK)

	nodes[2].Kill()
	g.eventually(t, "/readyz", http.StatusOK) // a minority down: still ready
	if a := g.do(t, http.MethodGet, "/readyz", ""); a.status != http.StatusOK {
		t.Fatalf("one node of three down: /readyz %d %s", a.status, a.body)
	}

	nodes[0].Kill()
	a := g.eventually(t, "/readyz", http.StatusServiceUnavailable)
	var p api.Problem
	if err := json.Unmarshal([]byte(a.body), &p); err != nil || p.Type != api.ProblemNoQuorum || a.header.Get(api.HeaderRetryAfter) == "" {
		t.Errorf("503 body %s (err %v), Retry-After %q: want a no-quorum problem", a.body, err, a.header.Get(api.HeaderRetryAfter))
	}
	if a := g.do(t, http.MethodGet, "/healthz", ""); a.status != http.StatusOK {
		t.Errorf("/healthz %d with two nodes down; liveness must not depend on Redis", a.status)
	}

	nodes[0].Restart()
	// Node 0 cannot recover (node 2 is down): /readyz says so, and when
	// it expects it back.
	var q api.Problem
	deadline := time.Now().Add(5 * time.Second)
	for {
		a := g.do(t, http.MethodGet, "/readyz", "")
		q = api.Problem{}
		_ = json.Unmarshal([]byte(a.body), &q)
		if len(q.Nodes) == 3 && q.Nodes[0].State == "quarantined" && q.Nodes[0].Until != nil && q.Nodes[0].Reason != "" &&
			q.Nodes[2].State == "unreachable" && strings.Contains(q.Nodes[2].Reason, "connection refused") && a.header.Get(api.HeaderRetryAfter) != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz with node 0 quarantined and node 2 down: %d %s %v", a.status, a.body, a.header)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if strings.Contains(fmt.Sprint(q), "127.0.0.1") {
		t.Errorf("/readyz names a node's address: %+v", q)
	}
	// The metric says when too.
	series := fmt.Sprintf(`lockgate_node_serves_again_timestamp_seconds{node=%q}`, nodes[0].Addr())
	if v := g.scrape(t)[series]; v < float64(time.Now().Unix()) {
		t.Errorf("%s = %v, want a time ahead", series, v)
	}
	if v := g.scrape(t)[fmt.Sprintf(`lockgate_node_serves_again_timestamp_seconds{node=%q}`, nodes[1].Addr())]; v != 0 {
		t.Errorf("serving node 1: serves again at %v, want 0", v)
	}
	g.eventually(t, "/readyz", http.StatusOK)
	nodes[2].Restart()
	g.eventually(t, "/readyz", http.StatusOK)
}

// TestLivenessWithEveryNodeDown: with all three redis-server processes
// killed /readyz turns 503 while /livez stays 200, so that a liveness
// probe never restarts a gateway for what a restart cannot mend.
func TestLivenessWithEveryNodeDown(t *testing.T) {
	nodes := redistest.StartN(t, 3, nil)
	g := startGateway(t, []string{"-redis", redisURLs(nodes)}, nil)
	g.eventually(t, "/readyz", http.StatusOK)
	for _, n := range nodes {
		n.Kill()
	}
	g.eventually(t, "/readyz", http.StatusServiceUnavailable)
	if a := g.do(t, http.MethodGet, "/livez", ""); a.status != http.StatusOK || a.body != "{\"status\":\"ok\"}\n" {
		t.Errorf("/livez with every node down: %d %q, want 200 {\"status\":\"ok\"}", a.status, a.body)
	}
}

// Nodes that hang (SIGSTOP) never make /readyz hang: it answers from the
// guard's last pass, whose checks are bounded by the check timeout, and
// says 503 once a pass found them frozen.
func TestReadinessIsBoundedByTheNodeTimeout(t *testing.T) {
	nodes := redistest.StartN(t, 3, nil)
	g := startGateway(t, []string{"-redis", redisURLs(nodes)}, nil)
	g.eventually(t, "/readyz", http.StatusOK)
	nodes[0].Pause()
	nodes[1].Pause()
	defer nodes[0].Resume()
	defer nodes[1].Resume()
	deadline := time.Now().Add(10 * time.Second)
	for {
		start := time.Now()
		a := g.do(t, http.MethodGet, "/readyz", "")
		// The bound leaves room for a loaded machine.
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("/readyz took %v with frozen nodes", d)
		}
		if a.status == http.StatusServiceUnavailable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("two of three nodes frozen for 10 s: /readyz %d %s", a.status, a.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	start := time.Now()
	if a := g.do(t, http.MethodGet, "/healthz", ""); a.status != http.StatusOK || time.Since(start) > time.Second {
		t.Errorf("/healthz %d in %v", a.status, time.Since(start))
	}
}

// The metrics change as a scripted sequence of requests says they must.
func TestMetricsFollowAScriptedSequence(t *testing.T) {
	nodes := redistest.StartN(t, 3, nil)
	g := startGateway(t, []string{"-redis", redisURLs(nodes)}, nil)
	g.eventually(t, "/readyz", http.StatusOK)
	before := g.scrape(t)
	leaseA := []string{api.HeaderLeaseID, "metrics-lease-A-0123456789"}

	steps := []struct {
		method, path, body string
		hdr                []string
		status             int
	}{
		{"PUT", "/locks/m1", "", leaseA, 201},
		{"PUT", "/locks/m1", "", nil, 409},
		{"PUT", "/locks/m1", `{"wait_ms":100}`, nil, 409},
		{"PUT", "/locks/m1", `{"ttl_ms":"soon"}`, nil, 400},
		{"PATCH", "/locks/m1", "", leaseA, 200},
		{"DELETE", "/locks/m1", "", leaseA, 204},
		{"DELETE", "/locks/m1", "", leaseA, 404},
	}
	for _, s := range steps {
		if a := g.do(t, s.method, s.path, s.body, s.hdr...); a.status != s.status {
			t.Fatalf("%s %s %s: %d %s, want %d", s.method, s.path, s.body, a.status, a.body, s.status)
		}
	}

	// A waiter shows in lockgate_waiters while it waits.
	if a := g.do(t, "PUT", "/locks/m2", "", leaseA...); a.status != 201 {
		t.Fatalf("PUT m2: %d %s", a.status, a.body)
	}
	waited := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("PUT", g.base+"/locks/m2", strings.NewReader(`{"wait_ms":10000}`))
		req.Header.Set("Content-Type", api.MediaJSON)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			waited <- 0
			return
		}
		resp.Body.Close()
		waited <- resp.StatusCode
	}()
	if !g.waiters(t, 1, 10*time.Second) {
		t.Fatal("lockgate_waiters never reached 1")
	}
	if a := g.do(t, "DELETE", "/locks/m2", "", leaseA...); a.status != 204 {
		t.Fatalf("DELETE m2: %d %s", a.status, a.body)
	}
	if st := <-waited; st != 201 {
		t.Fatalf("the waiter got %d, want 201", st)
	}

	// Counters that disagree: node 0's counter for m3's slot is 10 ahead of
	// the others; the acquisition raises them (a fencing write-back). Node
	// 2 is gone first, so that the quorum needs node 0's answer: with three
	// nodes up, a busy machine could decide with nodes 1 and 2 while node
	// 0's answer is late, and answer their token.
	nodes[2].Kill()
	rdb := redis.NewClient(&redis.Options{Addr: nodes[0].Addr()})
	defer rdb.Close()
	slotKey := "lockgate:{" + lockcore.SlotTag(lockcore.FenceSlot("m3")) + "}:tokens"
	ahead, err := rdb.HIncrBy(context.Background(), slotKey, "n", 10).Result()
	if err != nil {
		t.Fatal(err)
	}
	if a := g.do(t, "PUT", "/locks/m3", ""); a.status != 201 || a.header.Get(api.HeaderFencingToken) != strconv.FormatInt(ahead+1, 10) {
		t.Fatalf("PUT m3: %d token %q, want 201 with token %d", a.status, a.header.Get(api.HeaderFencingToken), ahead+1)
	}

	// Two of three nodes gone: no quorum.
	nodes[1].Kill()
	if a := g.do(t, "PUT", "/locks/m4", ""); a.status != 503 {
		t.Fatalf("PUT m4 without a quorum: %d %s", a.status, a.body)
	}

	after := g.scrape(t)
	delta := func(series string) float64 { return after[series] - before[series] }
	for series, want := range map[string]float64{
		`lockgate_requests_total{op="acquire",outcome="acquired"}`:    4, // m1, m2, the waiter on m2, m3
		`lockgate_requests_total{op="acquire",outcome="taken"}`:       1,
		`lockgate_requests_total{op="acquire",outcome="timed_out"}`:   1,
		`lockgate_requests_total{op="acquire",outcome="bad_request"}`: 1,
		`lockgate_requests_total{op="acquire",outcome="no_quorum"}`:   1,
		`lockgate_requests_total{op="extend",outcome="extended"}`:     1,
		`lockgate_requests_total{op="release",outcome="released"}`:    2,
		`lockgate_requests_total{op="release",outcome="not_held"}`:    1,
		`lockgate_request_duration_seconds_count{op="acquire"}`:       8,
		`lockgate_request_duration_seconds_count{op="release"}`:       3,
		`lockgate_quorum_failures_total{op="acquire"}`:                1,
		`lockgate_fence_writebacks_total`:                             1,
	} {
		if got := delta(series); got != want {
			t.Errorf("%s went up by %v, want %v", series, got, want)
		}
	}
	if v := after["lockgate_waiters"]; v != 0 {
		t.Errorf("lockgate_waiters %v after the waiter left", v)
	}
	for i, n := range nodes {
		if v, ok := before[`lockgate_node_behind{node="`+n.Addr()+`"}`]; !ok || v != 0 {
			t.Errorf("node %d: lockgate_node_behind %v (exported %v) before the test, want 0", i, v, ok)
		}
	}
	for i, n := range nodes {
		calls := delta(`lockgate_node_call_duration_seconds_count{node="` + n.Addr() + `",op="acquire"}`)
		if calls < 5 {
			t.Errorf("node %d: %v acquire calls measured, want at least 5", i, calls)
		}
	}
	for _, n := range nodes[1:] {
		errs := delta(`lockgate_node_call_errors_total{kind="error",node="`+n.Addr()+`",op="acquire"}`) +
			delta(`lockgate_node_call_errors_total{kind="timeout",node="`+n.Addr()+`",op="acquire"}`)
		if errs < 1 {
			t.Errorf("killed node %s: no acquire error counted", n.Addr())
		}
	}
	if errs := delta(`lockgate_node_call_errors_total{kind="error",node="` + nodes[0].Addr() + `",op="acquire"}`); errs != 0 {
		t.Errorf("the live node counted %v errors", errs)
	}
	for series := range after {
		if strings.Contains(series, "m1") || strings.Contains(series, "resource") {
			t.Errorf("a series names a resource: %s", series)
		}
	}
}

const (
	writerToken = "writer-Hc6Jd8Kf0Lg2Mh4Nj6Pk8Q"
	readerToken = "reader-7Q2vX9kLmN4pR8sT1uW3yZ5a"
	wrongToken  = "wrong-Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2"
)

// With -auth-file the gateway lets a token do what its line allows, answers
// 401 and 403 otherwise, and never shows a token in its log or its answers.
func TestAccessControl(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte("# test tokens\n"+writerToken+" * orders:,billing:\n"+readerToken+" GET *\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, nil, map[string]string{"LOCKGATE_AUTH_FILE": file, "LOCKGATE_LOG_LEVEL": "debug"})
	bearer := func(tok string) []string { return []string{"Authorization", "Bearer " + tok} }
	lease := []string{api.HeaderLeaseID, "auth-lease-0123456789abcdef"}
	var answers []answer
	steps := []struct {
		name, method, path string
		hdr                []string
		status             int
	}{
		{"no token", "PUT", "/locks/orders:1", nil, 401},
		{"an unknown token", "PUT", "/locks/orders:1", bearer(wrongToken), 401},
		{"a token sent as Basic", "PUT", "/locks/orders:1", []string{"Authorization", "Basic " + writerToken}, 401},
		{"outside the prefixes", "PUT", "/locks/payroll:1", bearer(writerToken), 403},
		{"a method the token lacks", "PUT", "/locks/orders:1", bearer(readerToken), 403},
		{"allowed", "PUT", "/locks/orders:1", append(bearer(writerToken), lease...), 201},
		{"read-only inspects", "GET", "/locks/orders:1", bearer(readerToken), 200},
		{"read-only may not release", "DELETE", "/locks/orders:1", append(bearer(readerToken), lease...), 403},
		{"the writer releases", "DELETE", "/locks/orders:1", append(bearer(writerToken), lease...), 204},
		{"health needs no token", "GET", "/healthz", nil, 200},
		{"readiness needs no token", "GET", "/readyz", nil, 200},
		{"metrics need no token", "GET", "/metrics", nil, 200},
		{"the page's files need no token", "GET", "/ui/", nil, 200},
		{"its script neither", "GET", "/ui/app.js", nil, 200},
		{"but the listing it shows does", "GET", "/locks", nil, 401},
		{"and a token with GET sees it", "GET", "/locks", bearer(readerToken), 200},
	}
	for _, s := range steps {
		a := g.do(t, s.method, s.path, "", s.hdr...)
		if a.status != s.status {
			t.Errorf("%s: %s %s answered %d %s, want %d", s.name, s.method, s.path, a.status, a.body, s.status)
		}
		if s.status == 401 && !strings.HasPrefix(a.header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s: 401 without a Bearer challenge", s.name)
		}
		answers = append(answers, a)
	}
	m := g.scrape(t)
	if m[`lockgate_requests_total{op="acquire",outcome="unauthorized"}`] != 3 ||
		m[`lockgate_requests_total{op="acquire",outcome="forbidden"}`] != 2 ||
		m[`lockgate_requests_total{op="release",outcome="forbidden"}`] != 1 {
		t.Errorf("401/403 counts wrong in /metrics")
	}
	logs := g.log.String()
	if !strings.Contains(logs, `"tokens":2`) || !strings.Contains(logs, "access control on") {
		t.Errorf("the start-up log does not say access control is on with 2 tokens:\n%s", logs)
	}
	for _, tok := range []string{writerToken, readerToken, wrongToken} {
		if strings.Contains(logs, tok) {
			t.Errorf("the log shows token %s", tok)
		}
		for i, a := range answers {
			if strings.Contains(a.body, tok) || strings.Contains(a.header.Get("WWW-Authenticate"), tok) {
				t.Errorf("answer %d (%s) shows token %s: %s", i, steps[i].name, tok, a.body)
			}
		}
	}
}

func TestStartupLogsTheConfigurationOnce(t *testing.T) {
	tests := []struct {
		name     string
		nodes    int
		wantEven bool
	}{
		{"three nodes", 3, false},
		{"two nodes get the even-number warning", 2, true},
		{"four nodes get the even-number warning", 4, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var urls []string
			for i := range tt.nodes {
				// Nothing listens there: the gateway does not connect at start.
				urls = append(urls, "redis://:s3cret-pw@127.0.0.1:"+strconv.Itoa(i+1))
			}
			g := startGateway(t, []string{"-redis", strings.Join(urls, ","), "-max-waiters", "7"},
				map[string]string{"LOCKGATE_LOG_LEVEL": "info"})
			logs := g.log.String()
			if strings.Contains(logs, "s3cret-pw") {
				t.Errorf("the log shows a Redis password:\n%s", logs)
			}
			var configs []map[string]any
			for line := range strings.Lines(logs) {
				var m map[string]any
				if json.Unmarshal([]byte(line), &m) == nil && strings.HasPrefix(m["message"].(string), "configuration") {
					configs = append(configs, m)
				}
			}
			if len(configs) != 1 {
				t.Fatalf("%d configuration lines, want 1:\n%s", len(configs), logs)
			}
			settingsShown, _ := configs[0]["settings"].(map[string]any)
			if len(settingsShown) != len(settings) || settingsShown["max-waiters"] != "7" ||
				!strings.Contains(settingsShown["redis"].(string), "redis://:xxxxx@127.0.0.1:1") {
				t.Errorf("configuration line %v", configs[0])
			}
			if even := strings.Contains(logs, "use an odd number"); even != tt.wantEven {
				t.Errorf("even-number warning shown: %v, want %v:\n%s", even, tt.wantEven, logs)
			}
		})
	}
}

func TestABadSettingStopsTheStart(t *testing.T) {
	err := run(context.Background(), []string{"-auth-file", filepath.Join(t.TempDir(), "absent")}, envOf(nil), io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "bad setting -auth-file ") {
		t.Errorf("err %v, want one naming -auth-file, as it was given", err)
	}
}

// TestReadinessCostsTheNodesNothing: /readyz answers from the node guard's
// last pass (one a second), so 2,000 calls write nothing to the nodes: the
// node sees only the guard's own checks (check.lua is its only EVAL).
func TestReadinessCostsTheNodesNothing(t *testing.T) {
	nodes := redistest.StartN(t, 1, nil)
	g := startGateway(t, []string{"-redis", redisURLs(nodes)}, nil)
	g.eventually(t, "/readyz", http.StatusOK)
	rdb := redis.NewClient(&redis.Options{Addr: nodes[0].Addr()})
	defer rdb.Close()
	evals := func() int64 {
		for line := range strings.Lines(rdb.Info(context.Background(), "commandstats").Val()) {
			if v, ok := strings.CutPrefix(line, "cmdstat_eval:calls="); ok {
				n, _ := strconv.ParseInt(v[:strings.IndexByte(v, ',')], 10, 64)
				return n
			}
		}
		return 0
	}
	before, began := evals(), time.Now()
	for range 2000 {
		if a := g.do(t, http.MethodGet, "/readyz", ""); a.status != http.StatusOK {
			t.Fatalf("/readyz %d %s", a.status, a.body)
		}
	}
	passes := int64(time.Since(began)/time.Second) + 2
	if n := evals() - before; n > passes {
		t.Fatalf("2,000 /readyz calls in %v ran %d scripts on the node; the guard's passes account for at most %d",
			time.Since(began).Round(time.Millisecond), n, passes)
	}
}
