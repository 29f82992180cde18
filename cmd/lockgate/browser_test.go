package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/lockgate/lockgate/api"
	"github.com/lockgate/lockgate/internal/redistest"
)

// chromiumBinary returns the path of Debian's chromium. Under -short it
// skips t; otherwise a missing browser fails t, naming the package.
func chromiumBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("browser test: needs chromium; skipped under -short")
	}
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium not found in PATH: the browser test needs a headless Chromium " +
			"(Debian/Ubuntu: apt-get install chromium; .ci/run installs it)")
	}
	return bin
}

// browserLog is what a tab did: console errors and exceptions, and the
// response of every request (headers and body).
type browserLog struct {
	mu        sync.Mutex
	problems  []string
	responses map[network.RequestID]*seen
	sent      map[network.RequestID]time.Time
	finished  chan network.RequestID
}

type seen struct {
	url, headers, body string
	status             int64
	done               bool
	// sent is when the browser sent the request (its wall clock, this
	// machine's).
	sent time.Time
}

func (b *browserLog) listen(ev any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeWarning || ev.Type == runtime.ConsoleAPICalledTypeAssert {
			var args []string
			for _, a := range ev.Args {
				args = append(args, string(a.Value)+a.Description)
			}
			b.problems = append(b.problems, fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(args, " ")))
		}
	case *runtime.EventExceptionThrown:
		b.problems = append(b.problems, "exception: "+(&chromedp.ExceptionError{ExceptionDetails: ev.ExceptionDetails}).Error())
	case *log.EventEntryAdded:
		if ev.Entry.Level == log.EntryLevelError || ev.Entry.Level == log.EntryLevelWarning {
			b.problems = append(b.problems, fmt.Sprintf("log %s (%s): %s %s", ev.Entry.Level, ev.Entry.Source, ev.Entry.Text, ev.Entry.URL))
		}
	case *network.EventRequestWillBeSent:
		sec := float64(ev.WallTime)
		b.sent[ev.RequestID] = time.Unix(0, int64(sec*1e9))
	case *network.EventResponseReceived:
		var h strings.Builder
		for k, v := range ev.Response.Headers {
			fmt.Fprintf(&h, "%s: %v\n", k, v)
		}
		b.responses[ev.RequestID] = &seen{url: ev.Response.URL, status: ev.Response.Status, headers: h.String(), sent: b.sent[ev.RequestID]}
	case *network.EventLoadingFinished:
		select {
		case b.finished <- ev.RequestID:
		default:
			b.problems = append(b.problems, "the test could not keep up with the responses")
		}
	}
}

// bodies fetches the body of each finished response until ctx ends.
func (b *browserLog) bodies(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case id := <-b.finished:
			res, err := chromedp.Call(ctx, network.GetResponseBody, network.GetResponseBodyParams{RequestID: id})
			body := string(res.Body)
			if err == nil && res.Base64encoded {
				raw, _ := base64.StdEncoding.DecodeString(body)
				body = string(raw)
			}
			b.mu.Lock()
			if s := b.responses[id]; s != nil && err == nil {
				s.body, s.done = body, true
			}
			b.mu.Unlock()
		}
	}
}

// snapshot copies the responses seen so far.
func (b *browserLog) snapshot() []seen {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]seen, 0, len(b.responses))
	for _, s := range b.responses {
		out = append(out, *s)
	}
	return out
}

// locksAnswers counts the answers to GET /locks whose bodies were read.
func (b *browserLog) locksAnswers() int { return b.answers("/locks?") }

// locksAnswersSince counts the answers to GET /locks requests sent after
// t whose bodies were read.
func (b *browserLog) locksAnswersSince(t time.Time) int {
	n := 0
	for _, s := range b.snapshot() {
		if strings.Contains(s.url, "/locks?") && s.done && s.sent.After(t) {
			n++
		}
	}
	return n
}

// answers counts the answers whose bodies were read to requests whose URL
// contains part.
func (b *browserLog) answers(part string) int {
	n := 0
	for _, s := range b.snapshot() {
		if strings.Contains(s.url, part) && s.done {
			n++
		}
	}
	return n
}

// waitAnswers waits until n more answers to requests whose URL contains
// part have been read, for at most 15 s.
func (b *browserLog) waitAnswers(t *testing.T, part string, n int) {
	t.Helper()
	for want, deadline := b.answers(part)+n, time.Now().Add(15*time.Second); b.answers(part) < want; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the page stopped fetching %s", part)
		}
	}
}

// openTab starts a headless Chromium with a new empty profile, opens a tab
// that records what it does, and stops the browser when the test ends.
func openTab(t *testing.T) (context.Context, *browserLog) {
	t.Helper()
	bin := chromiumBinary(t)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(bin),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1200, 760),
	)
	ctx, cancel := chromedp.NewContext(actx)
	b := &browserLog{responses: map[network.RequestID]*seen{}, sent: map[network.RequestID]time.Time{}, finished: make(chan network.RequestID, 4096)}
	if err := chromedp.Listen(ctx, b.listen); err != nil {
		cancel()
		cancelAlloc()
		t.Fatalf("starting chromium: %v", err)
	}
	done := make(chan struct{})
	go func() { defer close(done); b.bodies(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		cancelAlloc()
	})
	return ctx, b
}

// eval runs a JavaScript expression in the tab, for at most 10 s.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(c, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// waitPage polls the page until expr is true, for at most 15 s (a limit
// for a page that never gets there, not a timing goal).
func waitPage(t *testing.T, ctx context.Context, expr, what string) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !eval[bool](t, ctx, expr); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the page never showed %s", what)
		}
	}
}

// patient are the gateway settings of the browser tests: the browser and
// the test share a loaded machine, where a node call (even to the
// embedded store under -race) can take longer than the default 50ms node
// timeout and answer 503. These tests are about the page.
var patient = []string{"-node-timeout", "500ms", "-min-ttl", "1s"}

// The page in a real headless Chromium: it loads without a console error,
// shows a lock acquired through the API at its next polls and drops it
// after its release, and no lease id ever reaches it (neither its DOM nor
// any response it received). The gateway runs on three redis-server nodes.
func TestPageInABrowser(t *testing.T) {
	ctx, b := openTab(t)
	nodes := redistest.StartN(t, 3, nil)
	g := startGateway(t, append([]string{"-redis", redisURLs(nodes)}, patient...), nil)
	g.eventually(t, "/readyz", http.StatusOK)

	leases := map[string]string{} // resource -> lease id, never printed
	acquire := func(resource, owner string, ttl time.Duration) string {
		t.Helper()
		a := g.do(t, http.MethodPut, "/locks/"+resource, fmt.Sprintf(`{"ttl_ms":%d,"owner":%q}`, ttl.Milliseconds(), owner))
		if a.status != http.StatusCreated {
			t.Fatalf("PUT /locks/%s: %d %s", resource, a.status, a.body)
		}
		id := a.header.Get(api.HeaderLeaseID)
		leases[resource] = id
		return id
	}
	for i, owner := range []string{"billing-worker-1", "report-cron@host-7", "invoice-sync"} {
		acquire(fmt.Sprintf("orders:%d", 41+i), owner, time.Duration(30+60*i)*time.Second)
	}

	if err := chromedp.Do(ctx, chromedp.Navigate(g.base+"/ui/")); err != nil {
		t.Fatalf("navigating to /ui/: %v", err)
	}
	waitPage(t, ctx, `document.querySelectorAll("#locks tbody tr").length === 3`, "the three held locks")
	waitPage(t, ctx, `document.querySelectorAll("#nodes tbody tr .state-serving").length === 3`, "three serving nodes")
	if v := eval[string](t, ctx, `document.getElementById("version").textContent`); !strings.HasPrefix(v, "version ") || strings.Contains(v, "…") {
		t.Errorf("the version reads %q", v)
	}
	row := eval[[]string](t, ctx, `[...document.querySelector('#locks tr[data-resource="orders:42"]').cells].map(c => c.textContent)`)
	if len(row) != 6 || row[1] != "report-cron@host-7" || row[3] != "90s" {
		t.Errorf("the row of orders:42 reads %q, want its owner and TTL", row)
	}

	// A lock taken through the API shows on the page's answer to the first
	// GET /locks it sends after the PUT (by the second at the latest,
	// should the check below lag a poll), and is gone likewise after its
	// release: with polls at most a second apart, within 2 s.
	m := regexp.MustCompile(`const POLL_MS = (\d+);`).FindStringSubmatch(g.do(t, http.MethodGet, "/ui/app.js", "").body)
	if m == nil {
		t.Fatal("app.js has no const POLL_MS")
	}
	if period, _ := strconv.Atoi(m[1]); period > 1000 {
		t.Errorf("the page polls every %d ms, want at most every second", period)
	}
	lease := acquire("ui-demo", "browser-test", time.Minute)
	start := time.Now()
	waitPage(t, ctx, `document.querySelector('#locks tr[data-resource="ui-demo"]') !== null`, "the lock just taken")
	if n := b.locksAnswersSince(start); n > 2 {
		t.Errorf("the lock showed only after %d answers to GET /locks sent after the PUT (%v), want at most 2", n, time.Since(start))
	}
	t.Logf("shown %v after the PUT", time.Since(start).Round(time.Millisecond))
	if dom := eval[string](t, ctx, `document.documentElement.outerHTML`); !strings.Contains(dom, "browser-test") {
		t.Errorf("the page does not show the owner")
	}
	if a := g.do(t, http.MethodDelete, "/locks/ui-demo", "", api.HeaderLeaseID, lease); a.status != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", a.status, a.body)
	}
	start = time.Now()
	waitPage(t, ctx, `document.querySelector('#locks tr[data-resource="ui-demo"]') === null`, "the lock released")
	if n := b.locksAnswersSince(start); n > 2 {
		t.Errorf("the lock went only after %d answers to GET /locks sent after the DELETE (%v), want at most 2", n, time.Since(start))
	}

	// The prefix filter asks the listing for that prefix only.
	if err := chromedp.Do(ctx, chromedp.SendKeys("#prefix", "orders:4")); err != nil {
		t.Fatal(err)
	}
	waitPage(t, ctx, `document.querySelectorAll("#locks tbody tr").length === 3 && document.getElementById("prefix").value === "orders:4"`, "the filtered locks")

	noLeaseIDs(t, ctx, b, "ui-demo", leases)
	for _, s := range b.snapshot() {
		if !strings.HasPrefix(s.url, g.base+"/") && !strings.HasPrefix(s.url, "data:") {
			t.Errorf("the page fetched %s, not from the gateway", s.url)
		}
		if s.sent.IsZero() || time.Since(s.sent) > time.Minute {
			t.Errorf("no sending time for %s (%v): the counts of answers after the PUT prove nothing", s.url, s.sent)
		}
	}

	b.mu.Lock()
	problems := b.problems
	b.mu.Unlock()
	for _, p := range problems {
		t.Errorf("the browser reported %s", p)
	}
}

// noLeaseIDs fails t if a lease id of leases (resource -> lease id) is in
// the tab's DOM or storage, or in any response the tab received. An answer
// to GET /locks that lists resource must have been recorded: without one the
// check would prove nothing.
func noLeaseIDs(t *testing.T, ctx context.Context, b *browserLog, resource string, leases map[string]string) {
	t.Helper()
	dom := eval[string](t, ctx, `document.documentElement.outerHTML + JSON.stringify(sessionStorage) + JSON.stringify(localStorage) + document.cookie`)
	responses := b.snapshot()
	var locksBodies int
	for _, s := range responses {
		if strings.Contains(s.url, "/locks?") && strings.Contains(s.body, strconv.Quote(resource)) {
			locksBodies++
		}
	}
	if locksBodies == 0 {
		t.Fatalf("no body of GET /locks with %s was recorded among %d responses: the lease id check would prove nothing", resource, len(responses))
	}
	for r, id := range leases {
		if strings.Contains(dom, id) {
			t.Errorf("the page contains the lease id of %s", r)
		}
		for _, s := range responses {
			if strings.Contains(s.body, id) || strings.Contains(s.headers, id) {
				t.Errorf("the response to %s contains the lease id of %s", s.url, r)
			}
		}
	}
}

// A node that lost its data shows on the page as quarantined, with why and
// until when, within a few polls. Three redis-server nodes; node 2 is
// killed, then node 0 restarts: with node 2 down it has too few other nodes
// to recover from, so it stays quarantined for the largest TTL (-max-ttl
// 30s) and the gateway is not ready. The page takes the state from /metrics
// and why and until when from the 503 of /readyz (whose entries
// lockgate_node_index ties to the node names), and warns that the listing
// cannot list locks now. No lease id reaches the page.
//
// Restarted empty, node 0 lost the locks it held. Restarted from its AOF it
// still has them, but the gateway quarantines it all the same (a new
// server process may have lost acknowledged writes, and with node 2 down
// not every node's witnesses can be read: rule 8) and, without a quorum
// in service, answers the listing 503: the page keeps the list it had,
// under its warning; with
// LOCKGATE_UI_SCREENSHOT=FILE that case writes a screenshot of the page, a
// few locks and one quarantined node, to FILE (docs/ui.png).
func TestPageShowsAQuarantinedNode(t *testing.T) {
	for _, tc := range []struct {
		name    string
		restart func(*redistest.Server)
		kept    bool   // node 0 keeps its locks: they stay listed
		why     string // part of the reason the page shows
	}{
		{"restarted empty", (*redistest.Server).RestartEmpty, false, "too few other nodes"},
		// Back from a restart on appendfsync always, it would recover with
		// node 1 (rule 8 of lockcore's doc), but node 2 is down.
		{"restarted from its AOF", (*redistest.Server).Restart, true, "only 2 of the 3 nodes answer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, b := openTab(t)
			nodes := redistest.StartN(t, 3, &redistest.Options{AOF: true})
			// Configured against the order of their names, which is not
			// the order the page must keep.
			slices.SortFunc(nodes, func(a, b *redistest.Server) int { return strings.Compare(b.Addr(), a.Addr()) })
			g := startGateway(t, append([]string{"-redis", redisURLs(nodes), "-max-ttl", "30s", "-default-ttl", "10s"}, patient...), nil)
			g.eventually(t, "/readyz", http.StatusOK)
			leases := map[string]string{} // resource -> lease id, never printed
			for i, owner := range []string{"billing-worker-1", "report-cron@host-7", "invoice-sync"} {
				resource := fmt.Sprintf("orders:%d", 41+i)
				a := g.do(t, http.MethodPut, "/locks/"+resource, fmt.Sprintf(`{"ttl_ms":%d,"owner":%q}`, 30000-5000*i, owner))
				if a.status != http.StatusCreated {
					t.Fatalf("PUT /locks/%s: %d %s", resource, a.status, a.body)
				}
				leases[resource] = a.header.Get(api.HeaderLeaseID)
			}
			if err := chromedp.Do(ctx, chromedp.Navigate(g.base+"/ui/")); err != nil {
				t.Fatalf("navigating to /ui/: %v", err)
			}
			waitPage(t, ctx, `document.querySelectorAll("#locks tbody tr").length === 3`, "the three held locks")
			waitPage(t, ctx, `document.querySelectorAll("#nodes tbody tr .state-serving").length === 3`, "three serving nodes")
			order := eval[string](t, ctx, `[...document.querySelectorAll("#nodes tbody tr")].map(r => r.dataset.node).join(",")`)
			if want := nodes[0].Addr() + "," + nodes[1].Addr() + "," + nodes[2].Addr(); order != want {
				t.Errorf("the nodes are in the order %s, want the configured %s", order, want)
			}
			if !eval[bool](t, ctx, `document.getElementById("not-ready").hidden`) {
				t.Error("the page warns of a gateway not ready while every node serves")
			}

			row := func(n *redistest.Server) string {
				return `document.querySelector('#nodes tr[data-node="` + n.Addr() + `"]')`
			}
			nodes[2].Kill()
			waitPage(t, ctx, row(nodes[2])+`?.querySelector(".state-unreachable") != null`, "node 2 unreachable")
			tc.restart(nodes[0])
			start := time.Now()
			waitPage(t, ctx, row(nodes[0])+`?.querySelector(".state-quarantined") != null && `+
				row(nodes[0])+`?.querySelector("td.why").textContent.includes("`+tc.why+`") && `+
				row(nodes[0])+`?.querySelector("td.until").dataset.until !== undefined`, "node 0 quarantined, why and until when")
			t.Logf("node 0 shown quarantined %v after its restart", time.Since(start).Round(time.Millisecond))

			// The page's "serves again" is the gateway's: compare with
			// /readyz (the guard works it out again at every pass, so
			// allow a little).
			a := g.do(t, http.MethodGet, "/readyz", "")
			var p api.Problem
			if err := json.Unmarshal([]byte(a.body), &p); a.status != http.StatusServiceUnavailable || err != nil || len(p.Nodes) != 3 || p.Nodes[0].Until == nil {
				t.Fatalf("GET /readyz: %d %s (%v), want a 503 with node 0's end of quarantine", a.status, a.body, err)
			}
			shown := time.UnixMilli(int64(eval[float64](t, ctx, `Number(`+row(nodes[0])+`?.querySelector("td.until").dataset.until)`)))
			if d := shown.Sub(*p.Nodes[0].Until); d < -2*time.Second || d > 2*time.Second {
				t.Errorf("the page says node 0 serves again at %v, /readyz at %v", shown, *p.Nodes[0].Until)
			}
			if text := eval[string](t, ctx, row(nodes[0])+`?.querySelector("td.until").textContent`); !regexp.MustCompile(`\(in \d+s\)$`).MatchString(text) {
				t.Errorf("node 0's serves-again cell reads %q, want a time and (in Ns)", text)
			}
			if text := eval[string](t, ctx, row(nodes[2])+`?.querySelector("td.why").textContent`); !strings.Contains(text, "connection refused") {
				t.Errorf("node 2's why reads %q", text)
			}
			if text := eval[string](t, ctx, row(nodes[1])+`?.querySelector(".state").textContent`); text != "serving" {
				t.Errorf("node 1 reads %q, want serving", text)
			}
			waitPage(t, ctx, `document.getElementById("summary").textContent.includes("Not ready") && !document.getElementById("not-ready").hidden`,
				"that the gateway is not ready")
			if tc.kept {
				b.waitAnswers(t, "/locks?", 2)
				if n := eval[int](t, ctx, `document.querySelectorAll("#locks tbody tr").length`); n != 3 {
					t.Errorf("the page lists %d locks, want the 3 that node 0 kept", n)
				}
				if file := os.Getenv("LOCKGATE_UI_SCREENSHOT"); file != "" {
					shot, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
					if err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(file, shot, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			noLeaseIDs(t, ctx, b, "orders:41", leases)

			onlyReadyzFailures(t, b)
		})
	}
}

// With access control on, the page's files load without a token, the page
// says that the listing needs one, and with a token allowed GET on some
// prefixes it shows those locks only. The token is sent to the gateway
// and kept in the tab's sessionStorage, never put into the page.
func TestPageWithAccessControl(t *testing.T) {
	ctx, b := openTab(t)
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte(writerToken+" * *\n"+readerToken+" GET orders:\n"+wrongToken+" PUT *\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, patient, map[string]string{"LOCKGATE_AUTH_FILE": file})
	bearer := []string{"Authorization", "Bearer " + writerToken}
	for _, r := range []string{"orders:1", "payroll:1"} {
		if a := g.do(t, http.MethodPut, "/locks/"+r, `{"ttl_ms":60000}`, bearer...); a.status != http.StatusCreated {
			t.Fatalf("PUT /locks/%s: %d %s", r, a.status, a.body)
		}
	}

	if err := chromedp.Do(ctx, chromedp.Navigate(g.base+"/ui/")); err != nil {
		t.Fatal(err)
	}
	waitPage(t, ctx, `!document.getElementById("auth").hidden && document.getElementById("status").textContent.includes("access control")`, "that a token is needed")
	if err := chromedp.Do(ctx, chromedp.SendKeys("#token", readerToken), chromedp.Click(`#auth-form button[type="submit"]`)); err != nil {
		t.Fatal(err)
	}
	waitPage(t, ctx, `document.querySelector('#locks tr[data-resource="orders:1"]') !== null`, "the lock the token may see")
	// One input event, as a paste makes: at most one poll is then in
	// flight, and the two after it see the bad prefix.
	eval[chromedp.Void](t, ctx, `(p => { p.value = "orders:1/"; p.dispatchEvent(new Event("input")); })(document.getElementById("prefix"))`)
	waitPage(t, ctx, `document.getElementById("status").textContent.startsWith("A prefix is")`, "that the prefix is not one")
	b.waitAnswers(t, "/metrics", 3)
	if !eval[bool](t, ctx, `document.getElementById("status").textContent.startsWith("A prefix is")`) {
		t.Error("the page dropped the word about the bad prefix at its next polls")
	}
	eval[chromedp.Void](t, ctx, `(p => { p.value = ""; p.dispatchEvent(new Event("input")); })(document.getElementById("prefix"))`)
	waitPage(t, ctx, `document.getElementById("status").hidden && document.querySelector('#locks tr[data-resource="orders:1"]') !== null`, "the listing again after the prefix is cleared")
	// Drawn from the same answer as orders:1, which the listing filtered.
	if eval[bool](t, ctx, `document.querySelector('#locks tr[data-resource="payroll:1"]') !== null`) {
		t.Error("the page shows payroll:1, outside the token's prefixes")
	}
	if dom := eval[string](t, ctx, `document.documentElement.outerHTML`); strings.Contains(dom, readerToken) {
		t.Error("the page's DOM contains the token")
	}
	if got := eval[string](t, ctx, `sessionStorage.getItem("lockgate-token")`); got != readerToken {
		t.Error("the token is not kept in sessionStorage")
	}
	if err := chromedp.Do(ctx, chromedp.Click("#forget")); err != nil {
		t.Fatal(err)
	}
	waitPage(t, ctx, `document.getElementById("status").textContent.includes("access control") && document.querySelectorAll("#locks tbody tr").length === 0`, "the locks hidden again without the token")
	// A token that may not list (no GET): 403, and the page stops asking
	// for the listing (each ask would count as a forbidden request) while
	// it goes on reading /metrics. (A 401 takes the same path.)
	if err := chromedp.Do(ctx, chromedp.SendKeys("#token", wrongToken), chromedp.Click(`#auth-form button[type="submit"]`)); err != nil {
		t.Fatal(err)
	}
	waitPage(t, ctx, `document.getElementById("status").textContent.includes("may not list locks")`, "that the token may not list")
	locks := b.locksAnswers()
	b.waitAnswers(t, "/metrics", 2)
	if extra := b.locksAnswers() - locks; extra > 1 {
		t.Errorf("the page asked GET /locks %d more times after a 403", extra)
	}

	// The browser logs each 401 and 403 as a failed load; nothing else may
	// show.
	b.mu.Lock()
	problems := b.problems
	b.mu.Unlock()
	for _, p := range problems {
		if strings.HasPrefix(p, "log error (network): Failed to load resource: the server responded with a status of 401") ||
			strings.HasPrefix(p, "log error (network): Failed to load resource: the server responded with a status of 403") {
			continue
		}
		t.Errorf("the browser reported %s", p)
	}
}

// With 10,000 held locks the page stays usable: it fetches and draws one
// page of the listing (100 by default, 1000 at most), pages forward and
// back with the listing's cursor, and the prefix filter narrows it.
func TestPageWithTenThousandLocks(t *testing.T) {
	ctx, b := openTab(t)
	g := startGateway(t, patient, nil)
	const held, workers = 10000, 2
	errc := make(chan error, workers)
	for w := range workers {
		go func() {
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			defer client.CloseIdleConnections()
			for i := w; i < held; i += workers {
				req, _ := http.NewRequest(http.MethodPut, fmt.Sprintf("%s/locks/bulk:%05d", g.base, i), strings.NewReader(`{"ttl_ms":300000,"owner":"bulk"}`))
				req.Header.Set("Content-Type", api.MediaJSON)
				resp, err := client.Do(req)
				if err != nil {
					errc <- err
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					errc <- fmt.Errorf("PUT bulk:%05d: %d", i, resp.StatusCode)
					return
				}
			}
			errc <- nil
		}()
	}
	for range workers {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}

	start := time.Now()
	if err := chromedp.Do(ctx, chromedp.Navigate(g.base+"/ui/")); err != nil {
		t.Fatal(err)
	}
	waitPage(t, ctx, `document.querySelectorAll("#locks tbody tr").length === 100`, "a page of 100 locks")
	t.Logf("first page of 100 of %d locks drawn %v after navigating", held, time.Since(start).Round(time.Millisecond))
	rows := `[...document.querySelectorAll("#locks tbody tr")].map(r => r.dataset.resource).join(",")`
	first := eval[string](t, ctx, rows)
	if err := chromedp.Do(ctx, chromedp.Click("#next")); err != nil {
		t.Fatal(err)
	}
	waitPage(t, ctx, `document.getElementById("page").textContent.startsWith("page 2") && !document.getElementById("prev").disabled`, "page 2")
	waitPage(t, ctx, `document.querySelectorAll("#locks tbody tr").length > 0`, "the locks of page 2")
	second := eval[string](t, ctx, rows)
	for _, r := range strings.Split(second, ",") {
		if strings.Contains(","+first+",", ","+r+",") {
			t.Errorf("%s is on pages 1 and 2", r)
			break
		}
	}
	if err := chromedp.Do(ctx, chromedp.Click("#prev")); err != nil {
		t.Fatal(err)
	}
	waitPage(t, ctx, `document.getElementById("page").textContent.startsWith("page 1") && document.getElementById("prev").disabled`, "page 1 again")

	if err := chromedp.Do(ctx, chromedp.SetValue("#limit", "1000"), chromedp.Evaluate[chromedp.Void](`document.getElementById("limit").dispatchEvent(new Event("change"))`)); err != nil {
		t.Fatal(err)
	}
	waitPage(t, ctx, `document.querySelectorAll("#locks tbody tr").length === 1000`, "a page of 1000 locks")
	if err := chromedp.Do(ctx, chromedp.SendKeys("#prefix", "bulk:0123")); err != nil {
		t.Fatal(err)
	}
	waitPage(t, ctx, `document.querySelectorAll("#locks tbody tr").length === 10 && document.querySelector('#locks tr[data-resource="bulk:01239"]') !== null`, "the 10 locks under bulk:0123")

	b.mu.Lock()
	problems := b.problems
	b.mu.Unlock()
	for _, p := range problems {
		t.Errorf("the browser reported %s", p)
	}
}

// The page while nodes fail, on three redis-server nodes, with five locks
// (a page of 100) and a semaphore of three permits:
//   - before its first answer it says it is loading (the page served has
//     a loading row in each table, and the header says loading);
//   - five locks on a page of 100 are the last page: "Next" is disabled
//     (a listing call may answer a short page with a cursor; the page asks
//     on until it knows);
//   - the semaphore named in its box shows its permits in use and holder;
//   - node 2 killed, the gateway still ready: node 2 shows unreachable,
//     since when, and why ("connection refused", as the gateway found);
//   - node 1 stopped too (SIGSTOP: it delays every answer past the node
//     timeout), the listing fails: the five locks stay, marked with their
//     age and why the refresh failed, and no error banner is put above
//     them; node 1 continued, the mark goes at the next good listing.
func TestPageWhileNodesFail(t *testing.T) {
	ctx, b := openTab(t)
	nodes := redistest.StartN(t, 3, nil)
	g := startGateway(t, append([]string{"-redis", redisURLs(nodes)}, patient...), nil)
	g.eventually(t, "/readyz", http.StatusOK)
	for i := range 5 {
		if a := g.do(t, http.MethodPut, fmt.Sprintf("/locks/jobs:%d", i), `{"ttl_ms":120000,"owner":"worker"}`); a.status != http.StatusCreated {
			t.Fatalf("PUT /locks/jobs:%d: %d %s", i, a.status, a.body)
		}
	}
	if a := g.do(t, http.MethodPut, "/semaphores/exports/permits", `{"permits":3,"ttl_ms":120000,"owner":"export-7"}`); a.status != http.StatusCreated {
		t.Fatalf("PUT /semaphores/exports/permits: %d %s", a.status, a.body)
	}

	served := g.do(t, http.MethodGet, "/ui/", "").body
	for _, want := range []string{`<span id="updated" class="muted">loading…</span>`, "Loading the held locks…", "Loading the nodes' states…"} {
		if !strings.Contains(served, want) {
			t.Errorf("before its first answer the page does not show %q", want)
		}
	}

	if err := chromedp.Do(ctx, chromedp.Navigate(g.base+"/ui/")); err != nil {
		t.Fatalf("navigating to /ui/: %v", err)
	}
	waitPage(t, ctx, `document.querySelectorAll("#locks tbody tr[data-resource]").length === 5`, "the five held locks")
	if text := eval[string](t, ctx, `document.getElementById("updated").textContent`); !strings.HasPrefix(text, "updated ") {
		t.Errorf("the header reads %q after the first listing", text)
	}
	if !eval[bool](t, ctx, `document.getElementById("next").disabled`) {
		t.Errorf("Next is enabled with 5 locks on a page of 100 (page reads %q)", eval[string](t, ctx, `document.getElementById("page").textContent`))
	}
	if text := eval[string](t, ctx, `document.getElementById("page").textContent`); text != "page 1 (last)" {
		t.Errorf("the page number reads %q, want page 1 (last)", text)
	}

	if err := chromedp.Do(ctx, chromedp.SendKeys("#sem-names", "exports"), chromedp.Click(`#sem-form button[type="submit"]`)); err != nil {
		t.Fatal(err)
	}
	waitPage(t, ctx, `document.querySelector('#semaphores tr[data-semaphore="exports"] td.permits')?.textContent === "1 of 3 in use"`, "the semaphore's permits")
	if row := eval[[]string](t, ctx, `[...document.querySelector('#semaphores tr[data-semaphore="exports"]').cells].map(c => c.textContent)`); len(row) != 6 || row[3] != "export-7" {
		t.Errorf("the semaphore's row reads %q, want its holder export-7", row)
	}

	row := func(n *redistest.Server) string {
		return `document.querySelector('#nodes tr[data-node="` + n.Addr() + `"]')`
	}
	nodes[2].Kill()
	waitPage(t, ctx, row(nodes[2])+`?.querySelector(".state-unreachable") != null && `+
		row(nodes[2])+`.querySelector("td.since").textContent.includes("ago")`, "node 2 unreachable, and since when")
	if why := eval[string](t, ctx, row(nodes[2])+`.querySelector("td.why").textContent`); !strings.Contains(why, "connection refused") {
		t.Errorf("node 2's why reads %q, want the gateway's reason, connection refused", why)
	}
	if a := g.do(t, http.MethodGet, "/readyz", ""); a.status != http.StatusOK {
		t.Fatalf("GET /readyz with one node of three down: %d %s, want 200: the Since above must show while ready", a.status, a.body)
	}
	if !eval[bool](t, ctx, `document.getElementById("not-ready").hidden`) {
		t.Error("the page says the gateway is not ready while two nodes of three serve")
	}

	nodes[1].Pause()
	t.Cleanup(nodes[1].Resume)
	waitPage(t, ctx, `!document.getElementById("stale").hidden`, "that its locks are from before a failed refresh")
	stale := eval[string](t, ctx, `document.getElementById("stale").textContent`)
	if !regexp.MustCompile(`^As of \S.*, \d+ s ago; the last refresh failed: GET /locks: .+\.$`).MatchString(stale) {
		t.Errorf("the stale mark reads %q, want as of when, how long ago, and why the refresh failed", stale)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("#locks tbody tr[data-resource]").length`); n != 5 {
		t.Errorf("after a failed refresh the page shows %d locks, want the 5 it had, marked", n)
	}
	if !eval[bool](t, ctx, `document.getElementById("locks").classList.contains("stale")`) {
		t.Error("the table of locks is not marked stale")
	}
	if eval[bool](t, ctx, `!document.getElementById("status").hidden`) {
		t.Errorf("an error is shown above the locks: %q", eval[string](t, ctx, `document.getElementById("status").textContent`))
	}
	nodes[1].Resume()
	waitPage(t, ctx, `document.getElementById("stale").hidden && !document.getElementById("locks").classList.contains("stale")`,
		"its locks fresh again after node 1 continued")

	onlyReadyzFailures(t, b)
}

// onlyReadyzFailures fails t if the browser reported anything but the
// failed loads it logs for each 503 of /readyz.
func onlyReadyzFailures(t *testing.T, b *browserLog) {
	t.Helper()
	b.mu.Lock()
	problems := b.problems
	b.mu.Unlock()
	for _, p := range problems {
		if !strings.HasPrefix(p, "log error (network): Failed to load resource: the server responded with a status of 503") {
			t.Errorf("the browser reported %s", p)
		}
	}
}

// The page's header names the build of a gateway built with go build from
// a git work tree by its commit (12 hex digits, "+dirty" with changes),
// never "(devel)": this package's files are copied to a new git repository,
// committed, changed (so the tree is dirty), and built with go build
// -buildvcs=true (the flag outranks a GOFLAGS of -buildvcs=false).
func TestPageShowsTheVersionOfAGoBuild(t *testing.T) {
	ctx, _ := openTab(t)
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse --show-toplevel: %v", err)
	}
	files, err := exec.Command("git", "-C", strings.TrimSpace(string(root)), "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	src := t.TempDir()
	for _, f := range strings.Split(strings.TrimRight(string(files), "\x00"), "\x00") {
		b, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(root)), f))
		if os.IsNotExist(err) {
			continue // deleted in the work tree
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(src, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", src, "-c", "user.name=test", "-c", "user.email=test@example.invalid", "-c", "commit.gpgsign=false"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	git("add", "-A")
	git("commit", "-q", "-m", "the tree under test")
	rev := git("rev-parse", "HEAD")
	if err := os.WriteFile(filepath.Join(src, "README.md"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "lockgate")
	build := exec.Command("go", "build", "-buildvcs=true", "-o", bin, "./cmd/lockgate")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	cmd := exec.Command(bin, "-addr", "127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := regexp.MustCompile(`"addr":"([^"]+)".*lockgate listening`).FindStringSubmatch(sc.Text()); m != nil {
				addrc <- m[1]
			}
		}
	}()
	var base string
	select {
	case a := <-addrc:
		base = "http://" + a
	case <-time.After(30 * time.Second):
		t.Fatal("the gateway built did not say where it listens within 30s")
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/ui/")); err != nil {
		t.Fatal(err)
	}
	waitPage(t, ctx, `!document.getElementById("version").textContent.includes("…")`, "a version")
	if got, want := eval[string](t, ctx, `document.getElementById("version").textContent`), "version "+rev[:12]+"+dirty"; got != want {
		t.Errorf("the header reads %q, want %q", got, want)
	}
}
