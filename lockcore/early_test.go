package lockcore_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/internal/waitroom"
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

// lateHigherGrant acquires resource with a lease id the client chose while
// node 2, whose counter is 100 ahead, is held at a gate: the quorum answers
// a token below 100, and node 2 then grants a copy above 100. It returns
// the cluster, the request, the lease answered and node 2's grant.
func lateHigherGrant(t *testing.T, resource string) (*cluster, lockcore.AcquireRequest, *lockcore.Lease, lockcore.NodeReply) {
	t.Helper()
	c := newEarlyCluster(t, nil)
	mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "warm", TTL: earlyTTL})
	if err := c.raw[2].RaiseFence(context.Background(), resource, "someone-else-0123456789", 100); err != nil {
		t.Fatal(err)
	}
	req := lockcore.AcquireRequest{Resource: resource, LeaseID: resource + "-by-the-client-0123", TTL: earlyTTL}
	granted := c.granted(2)
	open := c.gate(2)
	var l *lockcore.Lease
	within(t, "acquire", func() { l = mustAcquire(t, c.rl, req) })
	open()
	rep := <-granted
	if rep.Token <= 100 || l.Token > 100 {
		t.Fatalf("node 2 granted %+v, the quorum %d; want node 2 above 100 and the quorum below", rep, l.Token)
	}
	return c, req, l, rep
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
			return c.nodes[2].Acquires() == 2 && !c.peek(t, "r")[2].Found
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
		if h := c.peek(t, "r"); h[0].Found || h[1].Found {
			t.Fatalf("holders %+v; want nodes 0 and 1 released", h)
		}
		open()
		eventually(t, "node 2 runs the extend and the release", func() bool { return !c.peek(t, "r")[2].Found })
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
		if h := c.peek(t, "held"); h[0].Lease != holder.ID || h[1].Lease != holder.ID {
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
		eventually(t, "node 2's copy is released", func() bool { return !c.peek(t, "ahead")[2].Found })
		e, err := c.rl.Extend(context.Background(), lockcore.ExtendRequest{Resource: "ahead", LeaseID: l.ID})
		if err != nil || e.Token != l.Token || l.Token > 100 {
			t.Fatalf("extend: %+v, %v; want the token acquired, %d", e, err, l.Token)
		}
	})

	t.Run("a late grant with a higher token to a lease id the client chose gives its copy back", func(t *testing.T) {
		// The client may be retrying the same lease id through another
		// replica meanwhile; the quorum this round was granted by holds
		// the same lease, so releasing the higher copy leaves the lease
		// held, and every copy then carries one token: what Inspect (and
		// every observer of an election) reports is the holder's token.
		c, req, l, _ := lateHigherGrant(t, "chosen")
		eventually(t, "node 2's copy is released", func() bool { return !c.peek(t, "chosen")[2].Found })
		info, err := c.rl.Inspect(context.Background(), "chosen")
		if err != nil || info.Token != l.Token {
			t.Fatalf("inspect: %+v, %v; want the token the holder was given, %d", info, err, l.Token)
		}
		if retry := mustAcquire(t, c.rl, req); !retry.Reentered {
			t.Fatalf("the retry got %+v; want a re-entry", retry)
		}
	})

	t.Run("a copy with a higher token does not change the token under If-Match", func(t *testing.T) {
		// A retry of the client's lease id through another replica can
		// leave node 2 with a copy of the lease carrying a token above the
		// one this request answered. Extends that name the client's token
		// (the client package renews so) go on answering that token: one
		// that answered node 2's token would make every later If-Match
		// fail while the lease holds the lock.
		c := newEarlyCluster(t, nil)
		req := lockcore.AcquireRequest{Resource: "kept", LeaseID: "kept-by-the-client-0123", TTL: earlyTTL}
		l := mustAcquire(t, c.rl, req)
		eventually(t, "node 2 holds its copy", func() bool { return c.peek(t, "kept")[2].Found })
		if err := c.raw[2].RaiseFence(context.Background(), "kept", req.LeaseID, l.Token+100); err != nil {
			t.Fatal(err)
		}
		if h := c.peek(t, "kept")[2]; h.Token != l.Token+100 {
			t.Fatalf("node 2 holds %+v; want its copy raised to %d", h, l.Token+100)
		}
		for i := range 3 {
			e, err := c.rl.Extend(context.Background(), lockcore.ExtendRequest{Resource: "kept", LeaseID: req.LeaseID, TTL: earlyTTL, IfToken: l.Token})
			if err != nil || e.Token != l.Token {
				t.Fatalf("extend %d with If-Match %d: %+v, %v; want the token the client was given", i, l.Token, e, err)
			}
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
			h := c.peek(t, "behind")[2]
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
			for _, h := range c.peek(t, "spent") {
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
		eventually(t, "node 2's late copy is released", func() bool { return !c.peek(t, "after")[2].Found })
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
			h := c.peek(t, "left")[2]
			return h.Found && h.Lease == l.ID && h.Token == l.Token
		})
	})
}

// TestALateReleaseIsActedOn shows what Redlock.Release does with a node's
// release that comes after the release was answered at the first quorum:
// the node is announced to this Redlock's waiting room, and when it says
// that a waiter through another replica was refused there
// (NodeReply.Wanted), this Redlock's waiters let that one try first. Each
// case fails when its step of Release's late callback is removed.
//
// A node that is a Watcher announces its releases to every replica's
// waiters by itself, so these cases run the releasing Redlock over nodes
// that are not (bare): all its waiters hear of a release is what its own
// calls tell them. That is the case of nodes that are no Watchers, and of
// a queue whose subscription to the late node failed (which otherwise
// polls once a second). Nor are bare nodes HandOffers, so a release is a
// release, never a hand-off.
//
// The late node's release matters only to a waiter that needs it and has
// heard of no quorum without it: one whose last attempt began after the
// quorum's release was announced and was granted by no node (after a
// split vote a waiter ignores news of a free lock until its pause ends,
// and then retries anyway). lateScene builds that.
func TestALateReleaseIsActedOn(t *testing.T) {
	t.Run("announced: it wakes a waiter that needs that node", func(t *testing.T) {
		// W needs B and C (A is down). B was announced free after W's last
		// attempt began; C's late release makes a quorum, and W gets the
		// lock at once. Without the announcement W sleeps on, until its
		// wait runs out, though the lock is free.
		s := newLateScene(t, lateOthers{})
		s.openC()
		select {
		case r := <-s.w:
			if r.err != nil {
				t.Fatalf("waiter: %v", r.err)
			}
			if h := s.wc.peek(t, s.resource); h[1].Lease != r.lease.ID || h[2].Lease != r.lease.ID {
				t.Fatalf("holders %+v; want the waiter's lease on B and C", h)
			}
		case <-time.After(wakeBound):
			t.Fatalf("the waiter still waits %v (real time) after node C's late release freed the lock on B and C: "+
				"nothing told it of C's release (it sleeps until %v, the clock stands at %v)",
				wakeBound, s.wc.clock.Sleepers(), s.wc.clock.Now())
		}
	})

	t.Run("wanted: the releasing replica yields to the other replica's waiter", func(t *testing.T) {
		// Y waits through another Redlock over the same nodes, Watchers:
		// it hears of B's and C's releases from the nodes. It began to
		// wait after the quorum's release, so only C, still held, refused
		// it there, and only C's late release says the lock is wanted
		// elsewhere. When it comes, Y tries and gets the lock, while W,
		// due to try as well, first sleeps for waitroom.YieldFor. Without
		// the yield W tries at once, racing Y for a lock Y was refused.
		y := make(chan acquired, 1)
		s := newLateScene(t, lateOthers{waiters: 1, refusals: 2, start: func(s *lateScene) {
			// Y's first try and its first attempt in its queue: B refuses
			// both (X's copy).
			startWaiter(context.Background(), s.wc.rl, 1, lockcore.AcquireRequest{Resource: s.resource, TTL: earlyTTL, Wait: longWait}, y)
		}})
		before := s.acquires()
		s.openC()
		yields := s.wc.clock.Now().Add(waitroom.YieldFor)
		for end := time.Now().Add(wakeBound); ; time.Sleep(time.Millisecond) {
			if n := s.acquires(); n != before {
				t.Fatalf("the waiter on the releasing replica tried at once (%d node calls) after node C's late release "+
					"said that a waiter through another replica was refused there; it must let that one try first", n-before)
			}
			if slices.ContainsFunc(s.wc.clock.Sleepers(), yields.Equal) {
				break // W is due, and sleeps until the yield ends
			}
			if time.Now().After(end) {
				t.Fatalf("the waiter on the releasing replica neither tried nor yielded after node C's late release "+
					"(asleep until %v, the clock stands at %v; want one until %v)", s.wc.clock.Sleepers(), s.wc.clock.Now(), yields)
			}
		}
		if r := next(t, y, wakeBound); r.err != nil {
			t.Fatalf("the waiter through the other replica: %v", r.err)
		}
		if n := s.acquires(); n != before {
			t.Fatalf("the waiter on the releasing replica tried (%d node calls) before its yield ended", n-before)
		}
		// The yield ends; W tries, and Y holds the lock.
		s.wc.clock.Advance(waitroom.YieldFor)
		eventually(t, "the waiter on the releasing replica tries once the yield ends", func() bool { return s.acquires() > before })
		s.wc.parked(t, 1)
		none(t, s.w)
	})
}

// lateScene is the scene of TestALateReleaseIsActedOn, on three nodes A, B
// and C (0, 1 and 2) and a fake clock that stands still:
//   - H holds the lock through rl, a Redlock over bare nodes; W waits
//     through rl, refused by every node, and sleeps until its wait runs
//     out;
//   - H releases through rl. C's release is held at a gate, so the
//     release is answered at A and B, and rl's announcement of them wakes
//     W to try;
//   - A goes down at once, and X, a request through rl that does not
//     wait, takes B: W's attempt is refused by B (X) and C (H) and granted
//     by none, so it is no split vote;
//   - X, refused by C and short of a quorum, gives B back, which rl
//     announces to W. One node is no quorum: W sleeps on.
//
// B and C are then all W needs, and C's release is held: openC lets it
// through.
type lateScene struct {
	wc       *waitCluster
	rl       *lockcore.Redlock // over bare, on wc's clock
	bare     []*bare
	resource string
	w        chan acquired // W's answer
	openC    func()
}

// lateOthers are waiters through another Redlock (wc.rl) that join a
// lateScene between the quorum's release and X's attempt: start starts
// them, waiters is how many go to sleep, and refusals how many of their
// acquisitions B refuses (X holds it) before X gives B back.
type lateOthers struct {
	waiters  int
	refusals int32
	start    func(s *lateScene)
}

// bare is a node that is no Watcher and no HandOffer: it has only the
// methods of lockcore.Node. It counts its acquisitions, and its releases
// of lease hold wait for gate.
type bare struct {
	lockcore.Node
	hold     string
	gate     chan struct{}
	acquired atomic.Int64
}

func (b *bare) Acquire(ctx context.Context, req lockcore.NodeAcquire) (lockcore.NodeReply, error) {
	b.acquired.Add(1)
	return b.Node.Acquire(ctx, req)
}

func (b *bare) Release(ctx context.Context, resource, lease string, ifToken int64) (lockcore.NodeReply, error) {
	if lease == b.hold {
		select {
		case <-b.gate:
		case <-ctx.Done():
			return lockcore.NodeReply{}, ctx.Err()
		}
	}
	return b.Node.Release(ctx, resource, lease, ifToken)
}

// acquires returns how many acquisitions rl has sent to the nodes.
func (s *lateScene) acquires() int64 {
	var n int64
	for _, b := range s.bare {
		n += b.acquired.Load()
	}
	return n
}

// newLateScene builds a lateScene, with others joining it.
func newLateScene(t *testing.T, others lateOthers) *lateScene {
	t.Helper()
	opts := &lockcore.Options{NodeTimeout: earlyTimeout, MinTTL: 2 * earlyTimeout, MaxTTL: time.Hour}
	wc := newWaitCluster(t, memNodes, 3, opts, false)
	gate := make(chan struct{})
	s := &lateScene{wc: wc, resource: "late", w: make(chan acquired, 1)}
	var once sync.Once
	s.openC = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(s.openC)
	nodes := make([]lockcore.Node, len(wc.nodes))
	for i, n := range wc.nodes {
		b := &bare{Node: n}
		if i == 2 {
			b.hold, b.gate = leaseA, gate
		}
		s.bare = append(s.bare, b)
		nodes[i] = b
	}
	rl, err := lockcore.New(nodes, wc.options(opts))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rl.Close)
	s.rl = rl

	holder := mustAcquire(t, rl, lockcore.AcquireRequest{Resource: s.resource, LeaseID: leaseA, TTL: earlyTTL})
	startWaiter(context.Background(), rl, 0, lockcore.AcquireRequest{Resource: s.resource, TTL: earlyTTL, Wait: longWait}, s.w)
	wc.parked(t, 1)

	// From the release on: A fails at the first acquisition it gets; a
	// waiter's acquisition reaches B only once X holds it; X's reaches C
	// only once B has refused W and the others.
	a, b, c := wc.nodes[0], wc.nodes[1], wc.nodes[2]
	a.SetBeforeAcquire(func(lockcore.NodeAcquire) { a.SetDown(errDown) })
	xOnB, refused := make(chan struct{}), make(chan struct{})
	var xOnce, refusedOnce sync.Once
	t.Cleanup(func() { // unblock what a failed test left waiting
		xOnce.Do(func() { close(xOnB) })
		refusedOnce.Do(func() { close(refused) })
	})
	var refusals atomic.Int32
	b.SetBeforeAcquire(func(req lockcore.NodeAcquire) {
		if req.Waits {
			<-xOnB
		}
	})
	b.SetAfterAcquire(func(req lockcore.NodeAcquire, rep lockcore.NodeReply) {
		switch {
		case !req.Waits:
			xOnce.Do(func() { close(xOnB) })
		case rep.Status == lockcore.StatusTaken && refusals.Add(1) == 1+others.refusals:
			refusedOnce.Do(func() { close(refused) })
		}
	})
	c.SetBeforeAcquire(func(req lockcore.NodeAcquire) {
		if !req.Waits {
			<-refused
		}
	})

	var rerr error
	within(t, "the holder's release", func() {
		rerr = rl.Release(context.Background(), lockcore.ReleaseRequest{Resource: s.resource, LeaseID: holder.ID})
	})
	if rerr != nil {
		t.Fatalf("the holder's release: %v", rerr)
	}
	if others.start != nil {
		others.start(s)
	}
	xerr := make(chan error, 1)
	go func() {
		_, err := rl.Acquire(context.Background(), lockcore.AcquireRequest{Resource: s.resource, TTL: earlyTTL})
		xerr <- err
	}()
	select {
	case err := <-xerr:
		if !errors.Is(err, lockcore.ErrTaken) {
			t.Fatalf("X's attempt: %v; want ErrTaken (A down, C held)", err)
		}
	case <-time.After(wakeBound):
		t.Fatalf("X's attempt still under way after %v: B did not refuse %d waiters' acquisitions (%d so far)",
			wakeBound, 1+others.refusals, refusals.Load())
	}
	wc.parked(t, 1+others.waiters)
	if h := wc.peek(t, s.resource); h[0].Found || h[1].Found || h[2].Lease != leaseA {
		t.Fatalf("holders %+v; want only the holder's copy, on C", h)
	}
	none(t, s.w)
	return s
}

// TestASplitRoundLeavesTheCountersLevel: an acquisition that a minority
// granted fails, and the nodes that did not grant are raised to the token
// the minority spent. Without that, counters drift apart with every split
// round (waiters of two replicas racing for a freed lock), and the next
// holder's token, the highest of its quorum, is not what the other copies
// carry until they are fenced: an observer reading in between reports a
// token the holder is never given.
func TestASplitRoundLeavesTheCountersLevel(t *testing.T) {
	c := newCluster(t, 3, nil, nil)
	ctx := context.Background()
	held := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "split", TTL: time.Minute})
	if _, err := c.raw[0].Release(ctx, "split", held.ID, 0); err != nil {
		t.Fatal(err)
	}
	for range 3 { // each split round spends a token on node 0 alone
		if _, err := c.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "split", TTL: time.Minute}); !errors.Is(err, lockcore.ErrTaken) {
			t.Fatalf("acquire while nodes 1 and 2 hold the lock: %v; want ErrTaken", err)
		}
	}
	slot := lockcore.FenceSlot("split")
	counter := func(i int) int64 {
		cs, err := c.raw[i].Counters(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return cs[slot]
	}
	ahead := counter(0)
	if ahead <= held.Token {
		t.Fatalf("node 0's counter %d; want it above the holder's token %d (its grants were undone)", ahead, held.Token)
	}
	eventually(t, "nodes 1 and 2 raised to node 0's counter", func() bool { return counter(1) >= ahead && counter(2) >= ahead })
	mustRelease(t, c.rl, held)
	next := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "split", TTL: time.Minute})
	info, err := c.rl.Inspect(ctx, "split")
	if err != nil || info.Token != next.Token {
		t.Fatalf("inspect: %+v, %v; want the next holder's token %d", info, err, next.Token)
	}
	for i := range 3 {
		if h := c.peek(t, "split")[i]; h.Token != next.Token {
			t.Fatalf("node %d's copy carries %d; want every copy at the holder's token %d", i, h.Token, next.Token)
		}
	}
}
