package freeport_test

import (
	"net"
	"strconv"
	"testing"

	"github.com/lockgate/lockgate/internal/freeport"
)

// canBind reports whether 127.0.0.1:port can be bound now.
func canBind(t *testing.T, port int) bool {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

func TestPortsAreDistinctAndFree(t *testing.T) {
	ports := freeport.Ports(t, 8)
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d twice in %v", p, ports)
		}
		seen[p] = true
		if !canBind(t, p) {
			t.Errorf("port %d is not free", p)
		}
	}
}

// AlsoFree: every port's offset port is free too, and no port of the set
// is another's offset port (a Redis Cluster node's bus port must not be a
// second node's port).
func TestAlsoFreeFreesTheOffsetPortToo(t *testing.T) {
	const bus = 10000
	ports := freeport.Ports(t, 6, freeport.AlsoFree(bus))
	used := map[int]bool{}
	for _, p := range ports {
		if p+bus > 65535 {
			t.Fatalf("port %d: its bus port %d is out of range", p, p+bus)
		}
		for _, q := range []int{p, p + bus} {
			if used[q] {
				t.Fatalf("port %d used twice in %v (with bus ports)", q, ports)
			}
			used[q] = true
			if !canBind(t, q) {
				t.Errorf("port %d is not free", q)
			}
		}
	}
}

// A port whose offset port is taken is not chosen: with the offset port of
// every kernel-chosen port held, Port fails rather than answer one.
func TestAlsoFreeSkipsATakenOffsetPort(t *testing.T) {
	// Offset 0: the offset port is the port itself, still bound by pick
	// when it checks, so it is never free.
	if p, err := freeport.Port(freeport.AlsoFree(0)); err == nil {
		t.Fatalf("Port with its own port as the offset port = %d, want an error", p)
	}
	// An offset that puts every port out of range.
	if p, err := freeport.Port(freeport.AlsoFree(70000)); err == nil {
		t.Fatalf("Port with an offset out of range = %d, want an error", p)
	}
}

func TestAddrIsLoopback(t *testing.T) {
	addr := freeport.Addr(t)
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host != "127.0.0.1" || port == "0" {
		t.Fatalf("Addr = %q (%v), want 127.0.0.1:port", addr, err)
	}
}
