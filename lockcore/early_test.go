package lockcore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/nodetest"
)

// Calls are answered at the first quorum: a node still to answer does not
// hold them up, and its answer is acted on when it comes (lockcore's round
// and Redlock.lateAcquire). Node 2 is held at a gate in these tests; the
// node timeout is far longer than any test, so a call that waited for
// node 2 would not return until the gate opens.

// earlyTimeout is the node timeout of these tests: a call that waits for
// a gated node does not return before the test gives up on it.
const earlyTimeout = 10 * time.Minute

func newEarlyCluster(t *testing.T, clock lockcore.Clock) *cluster {
	t.Helper()
	return newCluster(t, 3, &lockcore.Options{NodeTimeout: earlyTimeout, MinTTL: 2 * earlyTimeout, MaxTTL: time.Hour, Clock: clock}, nil)
}

const earlyTTL = 30 * time.Minute

// gate holds node i's calls until the returned function is called.
func (c *cluster) gate(i int) (open func()) {
	g := make(chan struct{})
	c.nodes[i].SetGate(g)
	var once sync.Once
	return func() { once.Do(func() { c.nodes[i].SetGate(nil); close(g) }) }
}

// granted returns the replies of node i's next acquisitions, sent once each
// has run on the node.
func (c *cluster) granted(i int) <-chan lockcore.NodeReply {
	ch := make(chan lockcore.NodeReply, 8)
	c.nodes[i].SetAfterAcquire(func(_ lockcore.NodeAcquire, rep lockcore.NodeReply) { ch <- rep })
	return ch
}

// within runs fn and fails the test if it has not returned after 10s: it
// waited for the gated node.
func within(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s waited for the node still to answer", what)
	}
}

// eventually polls cond for up to 5s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s: not after 5s", what)
		}
	}
}

func TestCallsAreAnsweredAtTheFirstQuorum(t *testing.T) {
	t.Run("acquire and inspect", func(t *testing.T) {
		c := newEarlyCluster(t, nil)
		mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "warm", TTL: earlyTTL}) // the guard's first pass
		open := c.gate(2)
		defer open()
		var l *lockcore.Lease
		within(t, "acquire", func() { l = mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "r", TTL: earlyTTL}) })
		within(t, "inspect", func() {
			if info, err := c.rl.Inspect(context.Background(), "r"); err != nil || info.Token != l.Token {
				t.Errorf("inspect: %+v, %v; want token %d", info, err, l.Token)
			}
		})
		open()
		mustRelease(t, c.rl, l)
		eventually(t, "node 2 runs the acquisition and the release", func() bool {
			return c.nodes[2].Acquires() == 2 && !c.holders(t, "r")[2].Found
		})
	})

	t.Run("extend and release", func(t *testing.T) {
		c := newEarlyCluster(t, nil)
		l := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "r", TTL: earlyTTL})
		open := c.gate(2)
		defer open()
		within(t, "extend", func() {
			e, err := c.rl.Extend(context.Background(), lockcore.ExtendRequest{Resource: "r", LeaseID: l.ID, TTL: earlyTTL})
			if err != nil || e.Token != l.Token {
				t.Errorf("extend: %+v, %v; want token %d", e, err, l.Token)
			}
		})
		within(t, "release", func() { mustRelease(t, c.rl, l) })
		if h := c.holders(t, "r"); h[0].Found || h[1].Found {
			t.Fatalf("holders %+v; want nodes 0 and 1 released", h)
		}
		open()
		eventually(t, "node 2 runs the extend and the release", func() bool { return !c.holders(t, "r")[2].Found })
	})

	t.Run("a refusal by a quorum", func(t *testing.T) {
		c := newEarlyCluster(t, nil)
		holder := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "held", TTL: earlyTTL})
		open := c.gate(2)
		defer open()
		within(t, "acquire", func() {
			_, err := c.rl.Acquire(context.Background(), lockcore.AcquireRequest{Resource: "held", TTL: earlyTTL})
			if te, ok := errors.AsType[*lockcore.TakenError](err); !ok || te.RetryAfter <= 0 {
				t.Errorf("acquire of a held lock: %v; want *TakenError with a retry hint", err)
			}
		})
		if h := c.holders(t, "held"); h[0].Lease != holder.ID || h[1].Lease != holder.ID {
			t.Fatalf("holders %+v; want the holder's lock untouched", h)
		}
	})

	t.Run("a late grant with a higher token gives its copy back", func(t *testing.T) {
		// Node 2's counter is ahead: its grant, heard after a quorum had
		// decided, carries a token nobody was given. Every copy of a lease
		// must carry the token its holder was given (Extend and Inspect
		// answer it), so that copy is released.
		c := newEarlyCluster(t, nil)
		mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "warm", TTL: earlyTTL})
		if err := c.raw[2].RaiseFence(context.Background(), "ahead", "someone-else-0123456789", 100); err != nil {
			t.Fatal(err)
		}
		granted := c.granted(2)
		open := c.gate(2)
		var l *lockcore.Lease
		within(t, "acquire", func() { l = mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "ahead", TTL: earlyTTL}) })
		open()
		if rep := <-granted; rep.Token <= 100 {
			t.Fatalf("node 2 granted %+v; want a token above 100", rep)
		}
		eventually(t, "node 2's copy is released", func() bool { return !c.holders(t, "ahead")[2].Found })
		e, err := c.rl.Extend(context.Background(), lockcore.ExtendRequest{Resource: "ahead", LeaseID: l.ID})
		if err != nil || e.Token != l.Token || l.Token > 100 {
			t.Fatalf("extend: %+v, %v; want the token acquired, %d", e, err, l.Token)
		}
	})

	t.Run("a late grant to a lease id the client chose is left alone", func(t *testing.T) {
		// The client may be retrying the same lease id through another
		// replica meanwhile, and a copy found late cannot be told from that
		// retry's: it is left alone (see Redlock.lateAcquire). Here the
		// retry comes through this replica, after the late answer was
		// acted on, and finds the copy: it re-enters there with the token
		// node 2 granted.
		c := newEarlyCluster(t, nil)
		mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "warm", TTL: earlyTTL})
		if err := c.raw[2].RaiseFence(context.Background(), "chosen", "someone-else-0123456789", 100); err != nil {
			t.Fatal(err)
		}
		req := lockcore.AcquireRequest{Resource: "chosen", LeaseID: "chosen-by-the-client-0123", TTL: earlyTTL}
		granted := c.granted(2)
		open := c.gate(2)
		var l *lockcore.Lease
		within(t, "acquire", func() { l = mustAcquire(t, c.rl, req) })
		open()
		rep := <-granted
		if rep.Token <= 100 || l.Token > 100 {
			t.Fatalf("node 2 granted %+v, the quorum %d; want node 2 above 100 and the quorum below", rep, l.Token)
		}
		retry := mustAcquire(t, c.rl, req) // waits for the late answers to be acted on
		if h := c.holders(t, "chosen")[2]; !h.Found || h.Lease != req.LeaseID || h.Token != rep.Token || !retry.Reentered {
			t.Fatalf("node 2 holds %+v, the retry got %+v; want node 2's copy with token %d kept and re-entered", h, retry, rep.Token)
		}
	})

	t.Run("a late grant with a lower token is raised to the token given", func(t *testing.T) {
		c := newEarlyCluster(t, nil)
		mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "warm", TTL: earlyTTL})
		for _, i := range []int{0, 1} {
			if err := c.raw[i].RaiseFence(context.Background(), "behind", "someone-else-0123456789", 100); err != nil {
				t.Fatal(err)
			}
		}
		open := c.gate(2)
		var l *lockcore.Lease
		within(t, "acquire", func() { l = mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "behind", TTL: earlyTTL}) })
		open()
		eventually(t, "node 2's copy carries the token given", func() bool {
			h := c.holders(t, "behind")[2]
			return h.Found && h.Lease == l.ID && h.Token == l.Token
		})
	})

	t.Run("a round that fails after a quorum granted undoes the late grant", func(t *testing.T) {
		// Node 1's grant takes the whole TTL on the Redlock's clock: the
		// validity is gone, the attempt fails and is undone, node 2's
		// grant included once it comes. The nodes' locks run on real time.
		clock := nodetest.NewClock(time.Now())
		c := newEarlyCluster(t, clock)
		mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "warm", TTL: earlyTTL})
		c.nodes[1].SetAfterAcquire(func(lockcore.NodeAcquire, lockcore.NodeReply) { clock.Advance(earlyTTL) })
		granted := c.granted(2)
		open := c.gate(2)
		within(t, "acquire", func() {
			if l, err := c.rl.Acquire(context.Background(), lockcore.AcquireRequest{Resource: "spent", TTL: earlyTTL}); err == nil {
				t.Errorf("acquire: %+v; want the validity exhausted", l)
			}
		})
		open()
		<-granted
		eventually(t, "no node holds the lock", func() bool {
			for _, h := range c.holders(t, "spent") {
				if h.Found {
					return false
				}
			}
			return true
		})
	})

	t.Run("a late grant that comes after the release is released", func(t *testing.T) {
		// Node 2 runs the release before the acquisition it was sent
		// first (two connections, no order between them).
		c := newEarlyCluster(t, nil)
		mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "warm", TTL: earlyTTL})
		gate := make(chan struct{})
		c.nodes[2].SetBeforeAcquire(func(lockcore.NodeAcquire) { <-gate })
		granted := c.granted(2)
		var l *lockcore.Lease
		within(t, "acquire", func() { l = mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "after", TTL: earlyTTL}) })
		within(t, "release", func() { mustRelease(t, c.rl, l) })
		close(gate)
		if rep := <-granted; rep.Status != lockcore.StatusGranted {
			t.Fatalf("node 2 answered %+v; want a grant", rep)
		}
		eventually(t, "node 2's late copy is released", func() bool { return !c.holders(t, "after")[2].Found })
	})

	t.Run("a caller that leaves after its answer does not cancel the late call", func(t *testing.T) {
		c := newEarlyCluster(t, nil)
		mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "warm", TTL: earlyTTL})
		open := c.gate(2)
		ctx, cancel := context.WithCancel(context.Background())
		var l *lockcore.Lease
		within(t, "acquire", func() {
			var err error
			if l, err = c.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "left", TTL: earlyTTL}); err != nil {
				t.Fatal(err)
			}
		})
		cancel() // as net/http does once the handler has answered
		open()
		eventually(t, "node 2 holds the lease", func() bool {
			h := c.holders(t, "left")[2]
			return h.Found && h.Lease == l.ID && h.Token == l.Token
		})
	})
}
