package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/api"
)

// rawRequest opens a connection to g and writes head (request line and
// headers, "\r\n"-separated, without the blank line) and then body.
func rawRequest(t *testing.T, g *gateway, head, body string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(g.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, head+"\r\n\r\n"+body); err != nil {
		t.Fatal(err)
	}
	return c
}

// putHead is the head of a PUT whose Content-Length promises n bytes.
func putHead(resource string, n int) string {
	return "PUT /locks/" + resource + " HTTP/1.1\r\nHost: lockgate\r\nContent-Type: application/json\r\nContent-Length: " + fmt.Sprint(n)
}

// readAnswer reads one response from c, waiting at most within. It returns
// the response with its body read, or an error.
func readAnswer(c net.Conn, within time.Duration) (*http.Response, []byte, error) {
	_ = c.SetReadDeadline(time.Now().Add(within))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, err
	}
	// Whatever follows the answer on the connection must be its end.
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		return resp, b, fmt.Errorf("after the answer the connection is not closed: %v", err)
	}
	return resp, b, nil
}

// wantBodyProblem fails t unless resp is a 400 problem naming the body.
func wantBodyProblem(t *testing.T, resp *http.Response, b []byte) {
	t.Helper()
	var p api.Problem
	if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != api.MediaProblem {
		t.Fatalf("got %d %s %s, want a 400 problem", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	if err := json.Unmarshal(b, &p); err != nil || p.Type != api.ProblemInvalid || p.Field != "body" || p.Status != 400 {
		t.Fatalf("problem %s (%v), want type %s, field body", b, err, api.ProblemInvalid)
	}
}

// goroutinesSettleTo waits up to 10s for the goroutine count to fall to at
// most want, and returns the last count.
func goroutinesSettleTo(want int) int {
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// baseline is the goroutine count once g is idle.
func baseline(g *gateway, t *testing.T) int {
	g.do(t, http.MethodGet, "/healthz", "")
	http.DefaultClient.CloseIdleConnections()
	time.Sleep(100 * time.Millisecond)
	return runtime.NumGoroutine()
}

func TestSilentBodiesAreCutAndTheirConnectionsClosed(t *testing.T) {
	const bound = 500 * time.Millisecond
	g := startGateway(t, []string{"-read-body-timeout", bound.String()}, nil)
	before := baseline(g, t)

	const n = 300
	conns := make([]net.Conn, n)
	start := time.Now()
	for i := range conns {
		conns[i] = rawRequest(t, g, putHead(fmt.Sprintf("silent-%d", i), 100), "")
	}
	opened := time.Since(start)
	if during := runtime.NumGoroutine(); during < before+n/2 {
		t.Logf("only %d goroutines while %d connections are open (baseline %d)", during, n, before)
	}
	for i, c := range conns {
		resp, b, err := readAnswer(c, bound+5*time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		wantBodyProblem(t, resp, b)
		c.Close()
	}
	// Every connection was answered and closed within the bound of its own
	// request, plus the time it took to open them all, plus slack.
	if took, limit := time.Since(start), opened+bound+3*time.Second; took > limit {
		t.Errorf("the %d silent connections were closed after %v, want within %v", n, took, limit)
	}
	if after := goroutinesSettleTo(before + 5); after > before+5 {
		t.Errorf("%d goroutines after the connections closed, %d before", after, before)
	}
	// The gateway still serves.
	if a := g.do(t, http.MethodPut, "/locks/after", `{"ttl_ms":1000}`); a.status != http.StatusCreated {
		t.Errorf("after the silent bodies a PUT answers %d %s", a.status, a.body)
	}
}

// The check above can fail: with a body bound longer than the test, the
// silent connections stay open and keep their goroutines.
func TestSilentBodiesStayOpenWithoutTheBound(t *testing.T) {
	g := startGateway(t, []string{"-read-body-timeout", "1h"}, nil)
	before := baseline(g, t)
	const n = 50
	conns := make([]net.Conn, n)
	for i := range conns {
		conns[i] = rawRequest(t, g, putHead(fmt.Sprintf("silent-%d", i), 100), "")
	}
	time.Sleep(time.Second)
	for i, c := range conns {
		if _, _, err := readAnswer(c, 10*time.Millisecond); !isTimeout(err) {
			t.Fatalf("connection %d answered or closed without a bound: %v", i, err)
		}
	}
	if during := runtime.NumGoroutine(); during < before+n {
		t.Errorf("%d goroutines with %d silent connections open, %d before: the count does not show them", during, n, before)
	}
	for _, c := range conns {
		c.Close()
	}
	if after := goroutinesSettleTo(before + 5); after > before+5 {
		t.Errorf("%d goroutines after the clients closed, %d before", after, before)
	}
}

// isTimeout reports whether err is a read that timed out: the connection
// is open and silent.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestABodyShorterThanItsContentLengthEndsWithinTheBound(t *testing.T) {
	const bound = 500 * time.Millisecond
	g := startGateway(t, []string{"-read-body-timeout", bound.String()}, nil)

	t.Run("PUT and PATCH: a 400 problem naming the body, then the connection is closed", func(t *testing.T) {
		for _, head := range []string{
			putHead("short", 100),
			"PATCH /locks/short HTTP/1.1\r\nHost: lockgate\r\nContent-Type: application/json\r\nLease-Id: lease-A-0123456789abcdef\r\nContent-Length: 100",
		} {
			start := time.Now()
			c := rawRequest(t, g, head, `{"ttl_ms":1000}`)
			resp, b, err := readAnswer(c, bound+5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			wantBodyProblem(t, resp, b)
			if took := time.Since(start); took < bound || took > bound+2*time.Second {
				t.Errorf("answered after %v, want just after the %v bound", took, bound)
			}
		}
		if a := g.do(t, http.MethodGet, "/locks/short", ""); a.status != http.StatusNotFound {
			t.Errorf("the cut PUT took the lock: GET answers %d %s", a.status, a.body)
		}
	})

	t.Run("a body that trickles in is cut at the bound", func(t *testing.T) {
		start := time.Now()
		c := rawRequest(t, g, putHead("trickle", 200), "{")
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
					if _, err := io.WriteString(c, " "); err != nil {
						return
					}
				}
			}
		}()
		resp, b, err := readAnswer(c, bound+5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		wantBodyProblem(t, resp, b)
		if took := time.Since(start); took > bound+2*time.Second {
			t.Errorf("answered after %v, want near the %v bound", took, bound)
		}
	})

	t.Run("GET ignores its body and answers; the connection is closed within the bound", func(t *testing.T) {
		start := time.Now()
		c := rawRequest(t, g, "GET /locks/nothing HTTP/1.1\r\nHost: lockgate\r\nContent-Length: 100", "0123456789")
		resp, _, err := readAnswer(c, bound+5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET answered %d, want 404", resp.StatusCode)
		}
		if took := time.Since(start); took > bound+2*time.Second {
			t.Errorf("closed after %v, want within the %v bound", took, bound)
		}
	})
}

func TestOversizedHeadersAre431(t *testing.T) {
	g := startGateway(t, []string{"-max-header-bytes", "1024"}, nil)
	// net/http allows 4 KiB of slack above MaxHeaderBytes.
	c := rawRequest(t, g, "GET /locks/x HTTP/1.1\r\nHost: lockgate\r\nX-Padding: "+strings.Repeat("p", 8<<10), "")
	resp, _, err := readAnswer(c, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("8 KiB of headers: %d, want 431", resp.StatusCode)
	}
	// Headers under the bound are served.
	if a := g.do(t, http.MethodGet, "/locks/x", "", "X-Padding", strings.Repeat("p", 700)); a.status != http.StatusNotFound {
		t.Errorf("700 bytes of headers: %d %s, want 404", a.status, a.body)
	}
}

func TestAWaitLongerThanTheBodyBoundGetsItsAnswer(t *testing.T) {
	const bound = 300 * time.Millisecond
	g := startGateway(t, []string{"-read-body-timeout", bound.String(), "-max-wait", "5s"}, nil)
	holder := g.do(t, http.MethodPut, "/locks/w", `{"ttl_ms":10000}`)
	if holder.status != http.StatusCreated {
		t.Fatalf("holder: %d %s", holder.status, holder.body)
	}

	// 409 once wait_ms runs out, 4 bounds later.
	start := time.Now()
	a := g.do(t, http.MethodPut, "/locks/w", `{"wait_ms":1200}`)
	if a.status != http.StatusConflict || time.Since(start) < 1200*time.Millisecond {
		t.Errorf("wait of 1200ms: %d after %v, want 409 after the wait", a.status, time.Since(start))
	}

	// 201 when the holder releases during the wait, 3 bounds in.
	type result struct {
		a     answer
		after time.Duration
	}
	done := make(chan result, 1)
	start = time.Now()
	go func() {
		req, _ := http.NewRequest(http.MethodPut, g.base+"/locks/w", strings.NewReader(`{"wait_ms":4000}`))
		req.Header.Set("Content-Type", api.MediaJSON)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- result{answer{body: err.Error()}, time.Since(start)}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		done <- result{answer{resp.StatusCode, resp.Header, string(b)}, time.Since(start)}
	}()
	time.Sleep(3 * bound)
	if rel := g.do(t, http.MethodDelete, "/locks/w", "", api.HeaderLeaseID, holder.header.Get(api.HeaderLeaseID)); rel.status != http.StatusNoContent {
		t.Fatalf("release: %d %s", rel.status, rel.body)
	}
	select {
	case r := <-done:
		if r.a.status != http.StatusCreated || r.after < 3*bound {
			t.Errorf("waiter: %d %s after %v, want 201 after the release", r.a.status, r.a.body, r.after)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter got no answer")
	}
}
