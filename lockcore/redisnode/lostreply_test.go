package redisnode_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/faultproxy"
	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/nodetest"
	"github.com/lockgate/lockgate/lockcore/redisnode"
)

// proxied is a Redlock whose nodes are reached through fault proxies, and
// direct clients to the same servers for checking what they hold.
type proxied struct {
	rl      *lockcore.Redlock
	proxies []*faultproxy.Proxy
	nodes   []*nodetest.Faulty // the Redlock's nodes, for their hooks
	srvs    []*redistest.Server
	direct  []*redisnode.Node // to the servers, not through the proxies
}

func newProxied(t *testing.T) *proxied {
	t.Helper()
	p := &proxied{srvs: redistest.StartN(t, 3, nil)}
	nodes := make([]lockcore.Node, 3)
	for i, s := range p.srvs {
		px, err := faultproxy.Start(s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { px.Close() })
		p.proxies = append(p.proxies, px)
		p.direct = append(p.direct, connect(t, s))
		f := nodetest.NewFaulty(connectURL(t, "redis://"+px.Addr()))
		p.nodes = append(p.nodes, f)
		nodes[i] = f
	}
	// 250 ms: a dropped reply costs one node timeout, and a node whose
	// reply is not dropped must not time out on a busy machine. No checks
	// after the first (CheckInterval): a check's reply could be the one a
	// proxy drops.
	rl, err := lockcore.New(nodes, &lockcore.Options{NodeTimeout: 250 * time.Millisecond, MinTTL: time.Second, CheckInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rl.Close)
	if err := rl.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Load every script into each server's cache: a dropped reply to an
	// EVALSHA that found no script would be a script that never ran.
	l, err := rl.Acquire(context.Background(), lockcore.AcquireRequest{Resource: "warm-up", TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := rl.Release(context.Background(), lockcore.ReleaseRequest{Resource: "warm-up", LeaseID: l.ID}); err != nil {
		t.Fatal(err)
	}
	p.rl = rl
	return p
}

// drop turns on dropping replies (after forwarding the requests) on the
// proxies of nodes is.
func (p *proxied) drop(is ...int) {
	for _, i := range is {
		p.proxies[i].SetDropReplies(true)
	}
}

func (p *proxied) heal() {
	for _, px := range p.proxies {
		px.Heal()
	}
}

// holders returns, per node, the lease that holds resource there ("" for
// none), read directly.
func (p *proxied) holders(t *testing.T, resource string) []string {
	t.Helper()
	out := make([]string, len(p.direct))
	for i, n := range p.direct {
		lease, err := n.Client().HGet(context.Background(), "lockgate:{"+resource+"}:lock", "lease").Result()
		if err == nil {
			out[i] = lease
		}
	}
	return out
}

// Replies lost after the script ran (the proxy forwards the request and
// swallows the answer) must not turn into wrong answers or leftover locks.
// go-redis re-sent such scripts before (one retry): a first grant then
// answered "reentered" (200, not 201), a release that happened answered
// "not held", and a client that left mid-acquire left its lock held.
func TestLostReplies(t *testing.T) {
	ctx := context.Background()
	t.Run("a first grant whose answer one node lost is a first grant", func(t *testing.T) {
		p := newProxied(t)
		var replies atomic.Int32 // node 0's replies to an acquisition
		p.nodes[0].SetAfterAcquire(func(lockcore.NodeAcquire, lockcore.NodeReply) { replies.Add(1) })
		for k, lease := range []string{"", "client-chosen-lease-0123"} {
			p.proxies[0].DropNextReply() // a client that sent it again would be answered
			l, err := p.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "first" + lease, LeaseID: lease, TTL: 5 * time.Second})
			if err != nil || l.Reentered {
				p.heal()
				t.Fatalf("lease %q: got %+v, %v; want a first grant (201)", lease, l, err)
			}
			// The call was answered by nodes 1 and 2: node 0's request may
			// still be on its way through the proxy, which heals only once
			// it has dropped the reply.
			var h []string
			poll(3*time.Second, func() bool {
				h = p.holders(t, "first"+lease)
				return h[0] == l.ID && p.proxies[0].Stats().DroppedReplies == int64(k+1)
			})
			p.heal()
			if got := p.proxies[0].Stats().DroppedReplies; got != int64(k+1) {
				t.Fatalf("lease %q: node 0's proxy dropped %d replies in all, want %d", lease, got, k+1)
			}
			if h[0] != l.ID {
				t.Fatalf("node 0 holds %q: the dropped reply's script should have run", h[0])
			}
			// Node 0's call ends without a reply once its node timeout has
			// passed; a call that sent the script again would have been
			// answered ("reentered").
			time.Sleep(300 * time.Millisecond)
			if n := replies.Load(); n != 0 {
				t.Fatalf("lease %q: node 0 answered %d acquisitions after its reply was dropped: the script was sent again", lease, n)
			}
		}
	})
	t.Run("a release whose answers a majority lost is unknown, never not-held", func(t *testing.T) {
		p := newProxied(t)
		l, err := p.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "rel", TTL: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		p.drop(0, 1)
		err = p.rl.Release(ctx, lockcore.ReleaseRequest{Resource: "rel", LeaseID: l.ID})
		p.heal()
		if !errors.Is(err, lockcore.ErrNoQuorum) {
			t.Fatalf("release with two answers lost: %v, want ErrNoQuorum (503, retry is safe)", err)
		}
		if h := p.holders(t, "rel"); h[0] != "" || h[1] != "" || h[2] != "" {
			t.Fatalf("holders after the release ran everywhere: %q", h)
		}
		if err := p.rl.Release(ctx, lockcore.ReleaseRequest{Resource: "rel", LeaseID: l.ID}); !errors.Is(err, lockcore.ErrNotHeld) {
			t.Fatalf("the client's retry: %v, want ErrNotHeld", err)
		}
	})
	t.Run("a release whose answer one node lost answers released", func(t *testing.T) {
		p := newProxied(t)
		l, err := p.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "rel1", TTL: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		// Answered at the first quorum: on a loaded machine node 0's or
		// 1's grant may still be on its way, and would answer the release
		// "not held" beside node 2's lost answer.
		holdEverywhere(t, []lockcore.Node{p.nodes[0], p.nodes[1], p.nodes[2]}, "rel1", l.ID)
		p.drop(2)
		err = p.rl.Release(ctx, lockcore.ReleaseRequest{Resource: "rel1", LeaseID: l.ID})
		p.heal()
		if err != nil {
			t.Fatalf("release: %v, want nil (204)", err)
		}
	})
	t.Run("a failed attempt whose answers were lost leaves nothing held", func(t *testing.T) {
		p := newProxied(t)
		p.drop(0, 1)
		_, err := p.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "failed", TTL: 5 * time.Second})
		if !errors.Is(err, lockcore.ErrNoQuorum) {
			t.Fatalf("acquire with two answers lost: %v, want ErrNoQuorum", err)
		}
		// The undo's releases to nodes 0 and 1 are lost as well (their
		// connections are cut); they are tried again until they land.
		time.Sleep(100 * time.Millisecond)
		p.heal()
		p.eventuallyFree(t, "failed")
	})
	t.Run("a client that leaves mid-acquire leaves nothing held", func(t *testing.T) {
		// Nodes 0 and 1 are slow, so no quorum answers before the client
		// leaves (a slow minority alone would not hold the answer up).
		p := newProxied(t)
		p.proxies[0].SetDelay(100 * time.Millisecond)
		p.proxies[1].SetDelay(100 * time.Millisecond)
		cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		_, err := p.rl.Acquire(cctx, lockcore.AcquireRequest{Resource: "left", TTL: 5 * time.Second})
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("acquire whose client left after 20 ms, nodes 0 and 1 answering after 100: %v", err)
		}
		// The lease was granted and released on node 2 at once, and may
		// have been granted unheard on nodes 0 and 1; the releases to them
		// (new connections, three round trips of 100 ms against the node
		// timeout of 250 ms) run out of time, and are tried again once the
		// links are fast again.
		time.Sleep(400 * time.Millisecond)
		p.heal()
		p.eventuallyFree(t, "left")
	})
}

// eventuallyFree waits up to 3 s for no node to hold resource.
func (p *proxied) eventuallyFree(t *testing.T, resource string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		h := p.holders(t, resource)
		if h[0] == "" && h[1] == "" && h[2] == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("holders of %s 3 s later: %q", resource, h)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
