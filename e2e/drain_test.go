package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/internal/redistest"
)

// readyProxy is a round-robin HTTP proxy over gateway replicas that, like
// a Kubernetes Service, sends requests only to the replicas whose /readyz
// answers 200: one is taken out after readyMisses polls in a row (every
// 50ms) that did not get 200, and back in at the next 200. It never
// retries a request.
type readyProxy struct {
	backends []*url.URL
	ready    []atomic.Bool
	next     atomic.Uint64
	// shuttingDown counts the 503 shutting-down answers it passed on,
	// per backend.
	shuttingDown []atomic.Int64
	// failed counts, per backend, requests whose connection to it failed;
	// noBackend those that found no backend ready. Each is answered 502.
	failed    []atomic.Int64
	noBackend atomic.Int64
	errs      chan error // the first errors of failed
	stop      chan struct{}
	polled    sync.WaitGroup
}

// newReadyProxy serves on a free port until the test ends, polling every
// backend's /readyz every 50ms.
func newReadyProxy(t *testing.T, backends ...string) (*readyProxy, string) {
	t.Helper()
	p := &readyProxy{ready: make([]atomic.Bool, len(backends)), shuttingDown: make([]atomic.Int64, len(backends)),
		failed: make([]atomic.Int64, len(backends)), errs: make(chan error, 100), stop: make(chan struct{})}
	for _, b := range backends {
		u, err := url.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		p.backends = append(p.backends, u)
	}
	for i := range p.backends {
		p.polled.Add(1)
		go p.poll(i)
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			i := r.In.Context().Value(backendKey{}).(int)
			r.SetURL(p.backends[i])
		},
		ModifyResponse: func(resp *http.Response) error {
			if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "" {
				i := resp.Request.Context().Value(backendKey{}).(int)
				p.shuttingDown[i].Add(1)
			}
			return nil
		},
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() == nil { // not a client that left
				i := r.Context().Value(backendKey{}).(int)
				p.failed[i].Add(1)
				select {
				case p.errs <- fmt.Errorf("%s %s to backend %d: %w", r.Method, r.URL.Path, i, err):
				default:
				}
			}
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, ok := p.pick()
		if !ok {
			p.noBackend.Add(1)
			http.Error(w, "no ready backend", http.StatusBadGateway)
			return
		}
		rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), backendKey{}, i)))
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		close(p.stop)
		p.polled.Wait()
		_ = srv.Close()
	})
	return p, "http://" + ln.Addr().String()
}

type backendKey struct{}

// readyMisses is how many polls in a row must fail before a backend is
// taken out, as a kubelet's readinessProbe failureThreshold: a slow
// answer or two on a loaded machine (a node check past its timeout under
// -race) does not take a replica out. Ten polls are 0.5 s, well within
// the drain's delay (the manifests' probe takes a replica out after 2 s).
const readyMisses = 10

func (p *readyProxy) poll(i int) {
	defer p.polled.Done()
	hc := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	misses := 0
	for {
		resp, err := hc.Get(p.backends[i].String() + "/readyz")
		if err == nil && resp.StatusCode == http.StatusOK {
			misses = 0
			p.ready[i].Store(true)
		} else if misses++; misses == readyMisses {
			p.ready[i].Store(false)
		}
		if err == nil {
			resp.Body.Close()
		}
		select {
		case <-p.stop:
			return
		case <-tick.C:
		}
	}
}

// pick returns the next ready backend in turn. It takes one number from
// the shared counter and tries the backends from there: drawing a number
// per try lets concurrent requests interleave their draws, so that one
// request may draw only the backends that are out (0 and 2 of two) and
// find none ready while another is.
func (p *readyProxy) pick() (int, bool) {
	start := p.next.Add(1)
	for k := range uint64(len(p.backends)) {
		i := int((start + k) % uint64(len(p.backends)))
		if p.ready[i].Load() {
			return i, true
		}
	}
	return 0, false
}

// TestASIGTERMedReplicaDrains: two gateway replicas over three Redis nodes
// behind a round-robin proxy that follows /readyz; clients take and release
// locks through it, and one holds a lock all along, while replica A gets
// SIGTERM. A answers /readyz 503 at once and still serves for
// -shutdown-delay; then a waiter parked on it gets 503 shutting-down with
// Retry-After, an event stream on it gets a shutdown event, and it exits
// cleanly within 30 s. No client request fails (the client retries a 503
// with the same lease id, which B serves), the proxy never fails to pass
// one on (A left it before it stopped listening), and the held lock is
// neither released nor lost.
func TestASIGTERMedReplicaDrains(t *testing.T) {
	bin := binary(t, "lockgate")
	nodes := redistest.StartN(t, 3, nil)
	urls := make([]string, len(nodes))
	for i, n := range nodes {
		urls[i] = n.URL()
	}
	const delay = 4 * time.Second
	// Node calls bounded generously: on a loaded machine under -race the
	// default 50ms makes quorums fail, which no drain can help.
	args := []string{"-redis", strings.Join(urls, ","), "-shutdown-delay", delay.String(),
		"-node-timeout", "250ms", "-min-ttl", "1s"}
	a, b := start(t, bin, args...), start(t, bin, args...)
	proxy, front := newReadyProxy(t, a.URL, b.URL)
	eventually(t, "both replicas in the proxy", func() bool { return proxy.ready[0].Load() && proxy.ready[1].Load() })

	cl, err := client.New(front, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	held, err := cl.Lock(ctx, "drain-held", &client.LockOptions{TTL: 3 * time.Second, Owner: "holder"})
	if err != nil {
		t.Fatal(err)
	}

	// Workers through the proxy: three names for four workers, so some
	// acquisitions wait.
	var taken, noQuorum atomic.Int64
	failures := make(chan error, 100)
	var workers sync.WaitGroup
	for w := range 4 {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for i := 0; ctx.Err() == nil; i++ {
				name := fmt.Sprintf("drain-%d", (w+i)%3)
				l, err := cl.Lock(ctx, name, &client.LockOptions{TTL: 2 * time.Second, Wait: 10 * time.Second, Owner: fmt.Sprint("worker-", w)})
				switch {
				case err != nil && ctx.Err() != nil:
					return
				case errors.Is(err, client.ErrNoQuorum):
					// Slow nodes on a loaded machine (CI's race pass runs
					// other packages beside this one) for the whole wait:
					// no replica's fault, and B would answer the same. A
					// drain's own refusal is ErrUnavailable and still fails.
					noQuorum.Add(1)
					continue
				case err != nil:
					failures <- fmt.Errorf("worker %d: lock %s: %w", w, name, err)
					return
				}
				taken.Add(1)
				time.Sleep(5 * time.Millisecond) // the critical section
				// Release does not retry: a no-quorum answer (slow nodes
				// on a loaded machine) is no replica's fault, and the
				// lock expires by its TTL.
				if err := l.Release(context.WithoutCancel(ctx)); errors.Is(err, client.ErrNoQuorum) {
					noQuorum.Add(1)
				} else if err != nil {
					failures <- fmt.Errorf("worker %d: release %s: %w", w, name, err)
					return
				}
			}
		}()
	}
	eventually(t, "the workers take locks", func() bool { return taken.Load() >= 20 })

	// On A directly: a waiter on a lock held for a minute, and a stream.
	expect(t, "hold the waiters' lock on A", call(t, "PUT", a.URL+"/locks/drain-wait", `{"ttl_ms": 60000}`), 201)
	waited := make(chan reply, 1)
	go func() {
		req, _ := http.NewRequest("PUT", a.URL+"/locks/drain-wait", strings.NewReader(`{"wait_ms": 60000}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			waited <- reply{status: -1, body: []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		var body strings.Builder
		_, _ = bufio.NewReader(resp.Body).WriteTo(&body)
		waited <- reply{status: resp.StatusCode, header: resp.Header, body: []byte(body.String())}
	}()
	streamed := openEvents(t, a.URL+"/locks/drain-stream")
	if ev := <-streamed; ev != "state" {
		t.Fatalf("first event on A: %q, want state", ev)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(string(call(t, "GET", a.URL+"/metrics", "").body), "\nlockgate_waiters 1\n") {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never parked on A")
		}
		time.Sleep(20 * time.Millisecond)
	}

	before := taken.Load()
	sigterm := time.Now()
	if err := a.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// A's /readyz turns 503 while A still listens.
	notReady := false
	eventually(t, "A's /readyz answers 503 or A stops listening", func() bool {
		resp, err := http.Get(a.URL + "/readyz")
		if err != nil {
			return true
		}
		defer resp.Body.Close()
		notReady = resp.StatusCode == 503
		return notReady
	})
	if !notReady {
		t.Error("A stopped listening before its /readyz answered 503")
	}
	eventually(t, "the proxy takes A out", func() bool { return !proxy.ready[0].Load() })
	if notReady && time.Since(sigterm) < delay {
		// Still within the delay: A serves every route.
		expect(t, "/livez on A while draining", call(t, "GET", a.URL+"/livez", ""), 200)
		expect(t, "a PUT on A while draining", call(t, "PUT", a.URL+"/locks/drain-direct", `{"ttl_ms": 60000}`), 201)
	}

	select {
	case r := <-waited:
		if r.status != 503 || r.header.Get("Retry-After") == "" || !strings.Contains(string(r.body), "shutting-down") {
			t.Errorf("the waiter on A: %d %v %s, want 503 shutting-down with Retry-After", r.status, r.header, r.body)
		}
		if d := time.Since(sigterm); d < delay {
			t.Errorf("the waiter on A was answered %v after SIGTERM, before -shutdown-delay %v", d, delay)
		}
	case <-time.After(delay + 20*time.Second):
		t.Fatal("the waiter on A not answered")
	}
	select {
	case ev, ok := <-streamed:
		if !ok || ev != "shutdown" {
			t.Errorf("the stream on A ended with %q (open %v), want a shutdown event", ev, ok)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the stream on A did not end")
	}
	select {
	case <-a.Done:
		if code := a.Cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("A exited with %d:\n%s", code, a.Log.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("A did not exit within 30s of SIGTERM")
	}
	exited := time.Since(sigterm)

	// B alone: the workers go on, the held lock stays held.
	after := taken.Load()
	eventually(t, "the workers take locks through B alone", func() bool { return taken.Load() >= after+20 })
	cancel()
	workers.Wait()
	close(failures)
	for err := range failures {
		t.Error(err)
	}
	for len(proxy.errs) > 0 {
		t.Log(<-proxy.errs)
	}
	if n := proxy.failed[0].Load(); n > 0 {
		t.Errorf("the proxy could not pass on %d requests to A (502): it sent them after A stopped listening", n)
	}
	if n := proxy.noBackend.Load() + proxy.failed[1].Load(); n > 0 {
		t.Errorf("the proxy found B not ready or not answering for %d requests", n)
	}
	select {
	case <-held.Done():
		t.Errorf("the held lock was lost: %v", held.Err())
	default:
	}
	r := call(t, "GET", b.URL+"/locks/drain-held", "")
	if r.status != 200 || r.token(t) != held.FencingToken() {
		t.Errorf("the held lock on B: %d %s, want held with token %d", r.status, r.body, held.FencingToken())
	}
	if err := held.Release(context.Background()); err != nil {
		t.Errorf("release of the held lock: %v", err)
	}
	t.Logf("A exited %v after SIGTERM (delay %v); locks taken: %d before SIGTERM, %d by A's exit, %d in all; "+
		"503s with Retry-After passed on from A: %d, from B: %d; locks and releases refused for no quorum: %d",
		exited.Round(10*time.Millisecond), delay, before, after, taken.Load(), proxy.shuttingDown[0].Load(), proxy.shuttingDown[1].Load(),
		noQuorum.Load())
}

// openEvents opens an event stream at url and sends each event's name,
// closing the channel when the stream ends.
func openEvents(t *testing.T, url string) <-chan string {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("stream %s: %d", url, resp.StatusCode)
	}
	out := make(chan string, 16)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if name, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
				out <- name
			}
		}
	}()
	t.Cleanup(func() { resp.Body.Close() })
	return out
}
