package faultproxy

import (
	"bufio"
	"net"
	"sync"
	"testing"
	"time"
)

// namedServer answers every line with its name; kill closes its listener
// and every connection it accepted, as a server process that dies.
func namedServer(t *testing.T, name string) (addr string, kill func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				r := bufio.NewReader(c)
				for {
					if _, err := r.ReadString('\n'); err != nil {
						return
					}
					if _, err := c.Write([]byte(name + "\n")); err != nil {
						return
					}
				}
			}()
		}
	}()
	kill = func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}
	t.Cleanup(kill)
	return ln.Addr().String(), kill
}

// TestKeptClientsReachTheNewServer: with SetKeepClients on, a client's
// connection outlives its server: the proxy dials the new target behind
// it, and the next request on the same connection reaches the new server.
// Off, the client's connection ends with its server.
func TestKeptClientsReachTheNewServer(t *testing.T) {
	for _, keep := range []bool{true, false} {
		a, killA := namedServer(t, "a")
		b, _ := namedServer(t, "b")
		p, err := Start(a)
		if err != nil {
			t.Fatal(err)
		}
		p.SetKeepClients(keep)
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(c)
		ask := func() (string, error) {
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Write([]byte("who\n")); err != nil {
				return "", err
			}
			return r.ReadString('\n')
		}
		if got, err := ask(); err != nil || got != "a\n" {
			t.Fatalf("keep %v, first answer %q, %v; want a", keep, got, err)
		}
		p.Redirect(b)
		killA()
		if keep { // a request sent before the proxy saw its server die is lost
			for deadline := time.Now().Add(5 * time.Second); p.Stats().Redialed == 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the proxy did not dial the new server within 5 s")
				}
			}
		}
		got, err := ask()
		switch {
		case keep && (err != nil || got != "b\n"):
			t.Errorf("kept client after its server died: %q, %v; want b on the same connection", got, err)
		case keep && p.Stats().Redialed != 1:
			t.Errorf("Redialed %d, want 1", p.Stats().Redialed)
		case !keep && err == nil:
			t.Errorf("client not kept: answered %q after its server died; want the connection closed", got)
		}
		c.Close()
		p.Close()
	}
}
