package nodetest

import (
	"context"
	"testing"

	"github.com/lockgate/lockgate/lockcore"
)

// runIfToken checks the expected token (If-Match) of Extend, Release and
// HandOff: checked in the same step, against the lock whoever holds it;
// StatusMismatch with the lock's token changes nothing.
func runIfToken(t *testing.T, newNode func(t *testing.T) lockcore.Node, res func(t *testing.T) string) {
	ctx := context.Background()
	extend := func(n lockcore.Node, r, lease string, ifToken int64) (lockcore.NodeReply, error) {
		return n.Extend(ctx, r, lease, 3*ttl, ifToken)
	}
	release := func(n lockcore.Node, r, lease string, ifToken int64) (lockcore.NodeReply, error) {
		return n.Release(ctx, r, lease, ifToken)
	}
	handOff := func(n lockcore.Node, r, lease string, ifToken int64) (lockcore.NodeReply, error) {
		h, ok := n.(lockcore.HandOffer)
		if !ok {
			t.Skip("node does not implement lockcore.HandOffer")
		}
		rel, got, err := h.HandOff(ctx, lease, ifToken, lockcore.NodeAcquire{Resource: r, Lease: "lease-next-0123456789", TTL: ttl, Replica: "rep"})
		if rel.Status != lockcore.StatusOK && got.Status != lockcore.StatusAbsent {
			t.Fatalf("a refused hand-off granted: %+v", got)
		}
		return rel, err
	}
	for _, o := range []struct {
		name string
		do   ifTokenOp
	}{{"extend", extend}, {"release", release}, {"hand-off", handOff}} {
		t.Run(o.name, func(t *testing.T) {
			for _, c := range ifTokenCases {
				c.check(t, newNode(t), res(t), o.do)
			}
			if got, err := o.do(newNode(t), res(t), holder, 7); err != nil || got.Status != lockcore.StatusAbsent {
				t.Fatalf("a free lock: got %+v, %v; want absent whatever the token", got, err)
			}
		})
	}
}

// ifTokenOp is an extend, release or hand-off of r by lease with ifToken.
type ifTokenOp func(n lockcore.Node, r, lease string, ifToken int64) (lockcore.NodeReply, error)

// ifTokenCase is one If-Match check on a lock held by the lease holder.
type ifTokenCase struct {
	name    string
	lease   string
	offset  int64 // ifToken = the lock's token + offset
	want    lockcore.NodeStatus
	changed bool
}

var ifTokenCases = []ifTokenCase{
	{"the holder with another token: mismatch", holder, 1, lockcore.StatusMismatch, false},
	{"the holder with a lower token: mismatch", holder, -1, lockcore.StatusMismatch, false},
	{"another lease with another token: mismatch", other, 1, lockcore.StatusMismatch, false},
	{"another lease with the lock's token: taken", other, 0, lockcore.StatusTaken, false},
	{"the holder with its token: done", holder, 0, lockcore.StatusOK, true},
}

// check has holder take r on n, runs do, and checks its answer and the lock.
func (c ifTokenCase) check(t *testing.T, n lockcore.Node, r string, do ifTokenOp) {
	t.Helper()
	ctx := context.Background()
	// A token above 1, so that a lower one is not 0 (no check).
	if err := n.RaiseFence(ctx, r, holder, 10); err != nil {
		t.Fatal(err)
	}
	g := mustGrant(t, n, lockcore.NodeAcquire{Resource: r, Lease: holder, TTL: ttl, Replica: "rep"})
	got, err := do(n, r, c.lease, g.Token+c.offset)
	if err != nil || got.Status != c.want {
		t.Fatalf("%s: got %+v, %v; want %v", c.name, got, err, c.want)
	}
	if c.want == lockcore.StatusMismatch && got.Token != g.Token {
		t.Fatalf("%s: mismatch reports token %d, want the lock's %d", c.name, got.Token, g.Token)
	}
	l, err := n.Inspect(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	unchanged := l.Found && l.Lease == holder && l.Token == g.Token && l.TTL == ttl
	if unchanged == c.changed {
		t.Fatalf("%s: lock now %+v; changed = %v, want %v", c.name, l, !unchanged, c.changed)
	}
}
