package faultproxy

import (
	"bufio"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// echoServer answers every line with the same line and counts the lines it
// received, so a test can tell a forwarded request from a lost one.
func echoServer(t *testing.T) (addr string, received *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	received = new(atomic.Int64)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					received.Add(1)
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), received
}

func startProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// roundTrip sends one line and reads the answer within a second.
func roundTrip(c net.Conn, r *bufio.Reader, line string) (string, error) {
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	got, err := r.ReadString('\n')
	if len(got) > 0 {
		got = got[:len(got)-1]
	}
	return got, err
}

func TestProxyFaults(t *testing.T) {
	tests := []struct {
		name  string
		fault func(p *Proxy, c net.Conn)
		// wantReply: the reply arrives; wantForwarded: the server got the request.
		wantReply, wantForwarded bool
		minElapsed               time.Duration
		check                    func(t *testing.T, s Stats)
	}{
		{name: "no fault passes through", fault: func(*Proxy, net.Conn) {}, wantReply: true, wantForwarded: true},
		{name: "delay holds the reply back", fault: func(p *Proxy, _ net.Conn) { p.SetDelay(150 * time.Millisecond) },
			wantReply: true, wantForwarded: true, minElapsed: 150 * time.Millisecond},
		{name: "a rate limit holds a reply back for its size", fault: func(p *Proxy, _ net.Conn) { p.SetRate(30) },
			wantReply: true, wantForwarded: true, minElapsed: 150 * time.Millisecond}, // "hello\n": 6 bytes at 30/s
		{name: "dropped request: the server never sees it, the client sees a closed connection",
			fault: func(p *Proxy, _ net.Conn) { p.SetDropRequests(true) }, wantReply: false, wantForwarded: false},
		{name: "dropped reply: the request ran, the client sees a closed connection",
			fault: func(p *Proxy, _ net.Conn) { p.SetDropReplies(true) }, wantReply: false, wantForwarded: true,
			check: func(t *testing.T, s Stats) {
				if s.DroppedReplies != 1 {
					t.Errorf("DroppedReplies = %d, want 1", s.DroppedReplies)
				}
			}},
		{name: "cut closes open connections before the request",
			fault: func(p *Proxy, _ net.Conn) {
				deadline := time.Now().Add(time.Second)
				for p.Cut() == 0 && time.Now().Before(deadline) { // the accept may lag the dial
					time.Sleep(5 * time.Millisecond)
				}
			}, wantReply: false, wantForwarded: false,
			check: func(t *testing.T, s Stats) {
				if s.CutConns != 1 {
					t.Errorf("CutConns = %d, want 1", s.CutConns)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addr, received := echoServer(t)
			p := startProxy(t, addr)
			c, err := net.Dial("tcp", p.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			r := bufio.NewReader(c)
			if got, err := roundTrip(c, r, "warm"); err != nil || got != "warm" {
				t.Fatalf("before the fault: got %q, %v", got, err)
			}
			tc.fault(p, c)
			start := time.Now()
			got, err := roundTrip(c, r, "hello")
			elapsed := time.Since(start)
			if tc.wantReply {
				if err != nil || got != "hello" {
					t.Fatalf("got %q, %v; want the echo", got, err)
				}
				if elapsed < tc.minElapsed {
					t.Errorf("reply after %v, want at least %v", elapsed, tc.minElapsed)
				}
			} else if err == nil || got != "" {
				t.Fatalf("got %q, %v; want no reply", got, err)
			} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("client hung until its deadline instead of seeing the connection close")
			} else if err != io.EOF && tc.wantForwarded {
				t.Logf("client error: %v", err)
			}
			time.Sleep(20 * time.Millisecond) // let the server count a request in flight
			if want := int64(1); tc.wantForwarded {
				if n := received.Load(); n != want+1 {
					t.Errorf("server received %d lines, want %d (warm-up and request)", n, want+1)
				}
			} else if n := received.Load(); n != 1 {
				t.Errorf("server received %d lines, want only the warm-up", n)
			}
			if tc.check != nil {
				tc.check(t, p.Stats())
			}
		})
	}
}

func TestHealRestoresPassThrough(t *testing.T) {
	addr, _ := echoServer(t)
	p := startProxy(t, addr)
	p.SetDropReplies(true)
	p.SetDelay(5 * time.Second)
	p.Heal()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if got, err := roundTrip(c, bufio.NewReader(c), "x"); err != nil || got != "x" {
		t.Fatalf("after Heal: got %q, %v", got, err)
	}
	if d := time.Since(start); d > 2*time.Second { // well below the 5 s delay, with room for a busy machine
		t.Errorf("after Heal the reply took %v", d)
	}
}

func TestCloseEndsEverything(t *testing.T) {
	addr, _ := echoServer(t)
	p, err := Start(addr)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := roundTrip(c, bufio.NewReader(c), "x"); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not return with a connection open")
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), 200*time.Millisecond); err == nil {
		t.Error("the proxy still accepts after Close")
	}
}
