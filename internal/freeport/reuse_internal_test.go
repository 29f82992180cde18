package freeport

import (
	"net"
	"strconv"
	"testing"
)

// A kernel may hand out a port again as soon as it is freed. Ports holds
// each port it chose until all are chosen, so it never answers one twice:
// here listenAny offers the last port it handed out first, and only when
// that is still bound asks the kernel for another.
func TestPortsHoldsEachPortUntilAllAreChosen(t *testing.T) {
	last := 0
	orig := listenAny
	t.Cleanup(func() { listenAny = orig })
	listenAny = func() (net.Listener, error) {
		if last != 0 {
			if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(last)); err == nil {
				return l, nil
			}
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err == nil {
			last = l.Addr().(*net.TCPAddr).Port
		}
		return l, err
	}
	ports := Ports(t, 4)
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d twice in %v", p, ports)
		}
		seen[p] = true
	}
}
