package redistest

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestClusterFormsMovesASlotAndFailsOver(t *testing.T) {
	c := StartCluster(t, 3, 1)
	if got := len(c.Primaries()); got != 3 {
		t.Fatalf("%d primaries, want 3", got)
	}
	for _, s := range c.Servers {
		_, p, _ := net.SplitHostPort(s.Addr())
		port, _ := strconv.Atoi(p)
		if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000))); err == nil {
			l.Close()
			t.Fatalf("%s: its bus port %d is not in use", s.Addr(), port+10000)
		}
	}
	// A key in slot 0 ("{3560}" hashes to 0) moves with its slot.
	src := c.OwnerOf(0)
	if _, err := src.Do("SET", "{3560}k", "v"); err != nil {
		t.Fatalf("SET: %v", err)
	}
	var dst *Server
	for _, p := range c.Primaries() {
		if p != src {
			dst = p
			break
		}
	}
	if err := c.MoveSlot(0, src, dst, 0); err != nil {
		t.Fatalf("MoveSlot: %v", err)
	}
	c.WaitStable()
	if got := c.OwnerOf(0); got != dst {
		t.Fatalf("slot 0 is on %s after the move, want %s", got.Addr(), dst.Addr())
	}
	if v, err := dst.Do("GET", "{3560}k"); err != nil || strings.TrimSpace(v) != "v" {
		t.Fatalf("GET on the new owner: %q, %v", v, err)
	}
	if _, err := src.Do("GET", "{3560}k"); err == nil || !strings.HasPrefix(err.Error(), "MOVED") {
		t.Fatalf("GET on the old owner: %v, want MOVED", err)
	}
	r := c.ReplicaOf(dst)
	if r == nil {
		t.Fatal("the new owner has no replica")
	}
	start := time.Now()
	c.KillAndPromote(dst, r)
	t.Logf("failover took %v", time.Since(start))
	if got := c.OwnerOf(0); got != r {
		t.Fatalf("slot 0 is on %s after the failover, want the promoted %s", got.Addr(), r.Addr())
	}
}
