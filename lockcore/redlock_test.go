package lockcore_test

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
	"github.com/lockgate/lockgate/lockcore/nodetest"
)

// Leases used across the tests: valid lease ids (16+ characters).
const (
	leaseA = "lease-A-0123456789abcdef"
	leaseB = "lease-B-0123456789abcdef"
	leaseC = "lease-C-0123456789abcdef"
)

// errDown is the error of a node the tests switch off.
var errDown = errors.New("test: node is down")

// fakeStart is where the tests' fake clocks start.
var fakeStart = time.Unix(1_700_000_000, 0)

// cluster is a Redlock over fault-injecting wrappers of in-memory nodes.
type cluster struct {
	rl       *lockcore.Redlock
	replicas []*lockcore.Redlock // every Redlock over the nodes, rl first
	raw      []lockcore.Node
	nodes    []*nodetest.Faulty
}

// newCluster builds n in-memory nodes (memNodes) and a Redlock over them.
// nodeNow, when not nil, is the clock that expires the nodes' locks. The
// waiting suite, which also runs on redis-server, builds its clusters with
// newWaitCluster from a backend instead.
//
// Unless opts say otherwise, node calls get 400ms rather than the default
// 50ms: in-memory nodes answer in microseconds, but a loaded machine running
// the race detector can leave a goroutine unscheduled for a while, and a
// spurious timeout would make a test flaky. TTLs then start at 1s.
func newCluster(t testing.TB, n int, opts *lockcore.Options, nodeNow func() time.Time) *cluster {
	t.Helper()
	c := &cluster{}
	for i := range n {
		raw := memNodes.node(t, i, nodeNow)
		c.raw = append(c.raw, raw)
		c.nodes = append(c.nodes, nodetest.NewFaulty(raw))
	}
	c.rl = c.replica(t, opts)
	return c
}

// replica returns another Redlock over the same nodes: a second gateway
// replica.
func (c *cluster) replica(t testing.TB, opts *lockcore.Options) *lockcore.Redlock {
	t.Helper()
	nodes := make([]lockcore.Node, len(c.nodes))
	for i, n := range c.nodes {
		nodes[i] = n
	}
	o := lockcore.Options{}
	if opts != nil {
		o = *opts
	}
	if o.NodeTimeout == 0 && o.MinTTL == 0 {
		o.NodeTimeout, o.MinTTL = 400*time.Millisecond, time.Second
	}
	rl, err := lockcore.New(nodes, &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rl.Close)
	c.replicas = append(c.replicas, rl)
	if obs, ok := o.Observer.(*opsObserver); ok {
		obs.settle = c.settle
	}
	return rl
}

// settle waits until every replica has acted on the late answers of its
// calls (lockcore.Settle).
func (c *cluster) settle() {
	for _, rl := range c.replicas {
		lockcore.Settle(rl)
	}
}

// down marks the nodes at the given indexes down (or up again), once the
// replicas have settled (see settle): the change is for later calls only.
func (c *cluster) down(down bool, idx ...int) {
	c.settle()
	for _, i := range idx {
		if down {
			c.nodes[i].SetDown(errDown)
		} else {
			c.nodes[i].SetDown(nil)
		}
	}
}

// holders reads, from the raw nodes, which lease holds resource on each node
// ("" for none), bypassing every injected fault, once the replicas have
// settled (see settle).
func (c *cluster) holders(t testing.TB, resource string) []lockcore.NodeLock {
	t.Helper()
	c.settle()
	return c.peek(t, resource)
}

// peek is holders without settling: what the nodes hold while calls may
// still be under way.
func (c *cluster) peek(t testing.TB, resource string) []lockcore.NodeLock {
	t.Helper()
	out := make([]lockcore.NodeLock, len(c.raw))
	for i, n := range c.raw {
		l, err := n.Inspect(context.Background(), resource)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = l
	}
	return out
}

// assertNotHolding fails unless no raw node holds resource for lease.
func (c *cluster) assertNotHolding(t testing.TB, resource, lease string) {
	t.Helper()
	for i, l := range c.holders(t, resource) {
		if l.Found && l.Lease == lease {
			t.Fatalf("node %d still holds %q for the failed attempt's lease (token %d)", i, resource, l.Token)
		}
	}
}

// assertFree fails t unless no node holds resource for any lease.
func (c *cluster) assertFree(t testing.TB, resource string) {
	t.Helper()
	for i, l := range c.holders(t, resource) {
		if l.Found {
			t.Fatalf("node %d still holds %q (token %d)", i, resource, l.Token)
		}
	}
}

func maskString(mask, n int) string { return fmt.Sprintf("%0*b", n, mask) }

func inMask(mask, i int) bool { return mask&(1<<i) != 0 }

func TestAcquireQuorumMasks(t *testing.T) {
	ctx := context.Background()
	const ttl = 10 * time.Second
	const res = "quorum"
	for _, n := range []int{3, 5} {
		quorum := n/2 + 1
		for mask := range 1 << n {
			blocked := bits.OnesCount(uint(mask))
			wantOK := n-blocked >= quorum

			t.Run(fmt.Sprintf("%d nodes, down %s", n, maskString(mask, n)), func(t *testing.T) {
				c := newCluster(t, n, nil, nil)
				for i := range n {
					if inMask(mask, i) {
						c.down(true, i)
					}
				}
				lease, err := c.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: res, LeaseID: leaseA, TTL: ttl})
				if !wantOK {
					if err == nil {
						t.Fatalf("acquired with only %d of %d nodes up (quorum %d): %+v", n-blocked, n, quorum, lease)
					}
					var qe *lockcore.QuorumError
					if !errors.Is(err, lockcore.ErrNoQuorum) || !errors.As(err, &qe) {
						t.Fatalf("err = %v, want a *QuorumError matching ErrNoQuorum", err)
					}
					if errors.Is(err, lockcore.ErrTaken) {
						t.Fatalf("err = %v also matches ErrTaken; nothing was taken", err)
					}
					if qe.Op != "acquire" || qe.Needed != quorum || qe.Answered != n-blocked || len(qe.Causes) != blocked {
						t.Fatalf("QuorumError = {Op:%q Needed:%d Answered:%d Causes:%d}, want {acquire %d %d %d}",
							qe.Op, qe.Needed, qe.Answered, len(qe.Causes), quorum, n-blocked, blocked)
					}
					if !errors.Is(err, errDown) {
						t.Fatalf("err = %v does not unwrap to the nodes' error", err)
					}
					var ne *lockcore.NodeError
					if !errors.As(qe.Causes[0], &ne) || !strings.HasPrefix(ne.Node, "node-") {
						t.Fatalf("cause %v is not a *NodeError naming the node", qe.Causes[0])
					}
					c.assertNotHolding(t, res, leaseA)
					return
				}
				if err != nil {
					t.Fatalf("with %d of %d nodes up: %v", n-blocked, n, err)
				}
				if lease.Token < 1 || lease.Reentered || lease.Validity <= 0 {
					t.Fatalf("lease = %+v", lease)
				}
				for i, l := range c.holders(t, res) {
					if held := l.Found && l.Lease == leaseA; held == inMask(mask, i) {
						t.Fatalf("node %d (down=%v) holds=%v", i, inMask(mask, i), held)
					}
				}
				if err := c.rl.Release(ctx, lockcore.ReleaseRequest{Resource: res, LeaseID: leaseA}); err != nil {
					t.Fatalf("release with a quorum up: %v", err)
				}
				c.assertNotHolding(t, res, leaseA)
			})

			t.Run(fmt.Sprintf("%d nodes, taken on %s", n, maskString(mask, n)), func(t *testing.T) {
				c := newCluster(t, n, nil, nil)
				other := map[int]lockcore.NodeReply{}
				for i := range n {
					if inMask(mask, i) {
						r, err := c.raw[i].Acquire(ctx, lockcore.NodeAcquire{Resource: res, Lease: leaseB, TTL: ttl, Owner: "other"})
						if err != nil || r.Status != lockcore.StatusGranted {
							t.Fatalf("pre-taking node %d: %+v %v", i, r, err)
						}
						other[i] = r
					}
				}
				lease, err := c.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: res, LeaseID: leaseA, TTL: ttl})
				if wantOK {
					if err != nil {
						t.Fatalf("with %d of %d nodes free: %v", n-blocked, n, err)
					}
					if lease.Token < 1 {
						t.Fatalf("lease = %+v", lease)
					}
				} else {
					if err == nil {
						t.Fatalf("acquired with only %d of %d nodes free: %+v", n-blocked, n, lease)
					}
					var te *lockcore.TakenError
					if !errors.Is(err, lockcore.ErrTaken) || !errors.As(err, &te) {
						t.Fatalf("err = %v, want a *TakenError matching ErrTaken", err)
					}
					if errors.Is(err, lockcore.ErrNoQuorum) {
						t.Fatalf("err = %v also matches ErrNoQuorum; every node answered", err)
					}
					if te.Resource != res || te.RetryAfter <= 0 || te.RetryAfter > ttl {
						t.Fatalf("TakenError = %+v, want the holder's remaining TTL in (0, %v]", te, ttl)
					}
					c.assertNotHolding(t, res, leaseA)
				}
				for i, l := range c.holders(t, res) {
					switch {
					case inMask(mask, i):
						if !l.Found || l.Lease != leaseB || l.Token != other[i].Token || l.Owner != "other" {
							t.Fatalf("node %d: the other holder's lock was touched: %+v", i, l)
						}
					case wantOK:
						if !l.Found || l.Lease != leaseA {
							t.Fatalf("node %d: free node does not hold the new lease: %+v", i, l)
						}
					default:
						if l.Found {
							t.Fatalf("node %d: failed attempt left %+v", i, l)
						}
					}
				}
			})
		}
	}
}

// TestMoreNodesThanARoundHoldsInline runs acquire and release on seven
// nodes, more than a round keeps its answers inline for (see round.inline):
// with three down it holds, with four it fails naming the four.
func TestMoreNodesThanARoundHoldsInline(t *testing.T) {
	ctx := context.Background()
	for _, down := range []int{3, 4} {
		t.Run(fmt.Sprintf("%d of 7 down", down), func(t *testing.T) {
			c := newCluster(t, 7, nil, nil)
			for i := range down {
				c.down(true, i)
			}
			lease, err := c.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "seven", LeaseID: leaseA, TTL: 10 * time.Second})
			if down == 4 {
				var qe *lockcore.QuorumError
				if !errors.As(err, &qe) || qe.Needed != 4 || qe.Answered != 3 || len(qe.Causes) != 4 || !errors.Is(err, errDown) {
					t.Fatalf("err = %v, want a *QuorumError needing 4 with 3 answers and the 4 nodes down as causes", err)
				}
				c.assertNotHolding(t, "seven", leaseA)
				return
			}
			if err != nil || lease.Token < 1 {
				t.Fatalf("with 4 of 7 nodes up: %+v, %v", lease, err)
			}
			for i, l := range c.holders(t, "seven") {
				if held := l.Found && l.Lease == leaseA; held != (i >= down) {
					t.Fatalf("node %d (down=%v) holds=%v", i, i < down, held)
				}
			}
			if err := c.rl.Release(ctx, lockcore.ReleaseRequest{Resource: "seven", LeaseID: leaseA}); err != nil {
				t.Fatalf("release with 4 of 7 up: %v", err)
			}
			c.assertNotHolding(t, "seven", leaseA)
		})
	}
}

func TestAcquireReleasesGrantsWhoseReplyWasLost(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 3, &lockcore.Options{NodeTimeout: 200 * time.Millisecond, MinTTL: time.Second}, nil)
	c.nodes[1].SetLateGrant(true)
	c.nodes[2].SetLateGrant(true)

	// A lease id minted for this attempt holds nothing else, so nodes that
	// did not answer are released too.
	_, err := c.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "late", TTL: 10 * time.Second})
	if !errors.Is(err, lockcore.ErrNoQuorum) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ErrNoQuorum caused by node timeouts", err)
	}
	// The late nodes did grant: the undo must have released them too.
	c.assertFree(t, "late")

	// One late node of three: acquired by the other two.
	c.nodes[2].SetLateGrant(false)
	lease, err := c.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "late", LeaseID: leaseA, TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if info, err := c.rl.Inspect(ctx, "late"); err != nil || info.Token != lease.Token {
		t.Fatalf("Inspect = %+v, %v; want token %d", info, err, lease.Token)
	}
}

func TestValidity(t *testing.T) {
	ctx := context.Background()
	const ttl = time.Second
	// The documented values (Options.DriftFactor): validity = TTL − time
	// spent − (TTL × DriftFactor + 2ms); a 1s TTL granted at once is valid
	// for 988ms with the default factor 0.01. wantExt is an extension to
	// 2s taking no time: 2s − 22ms with 0.01, 2s − 202ms with 0.1.
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	cases := []struct {
		name    string
		drift   float64
		spent   time.Duration
		want    time.Duration // 0: acquisition must fail
		wantExt time.Duration
	}{
		{"nothing spent leaves TTL minus drift", 0, 0, ms(988), ms(1978)},
		{"time spent acquiring is subtracted", 0, ms(300), ms(688), ms(1978)},
		{"the last millisecond of validity is still granted", 0, ms(987), ms(1), ms(1978)},
		{"less than a millisecond left fails", 0, ms(987) + 1, 0, 0},
		{"a custom drift factor is honoured", 0.1, ms(100), ms(798), ms(1798)},
		{"no validity left fails", 0, ms(988), 0, 0},
		{"acquiring longer than the TTL fails", 0, 2 * ttl, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := nodetest.NewClock(fakeStart)
			c := newCluster(t, 3, &lockcore.Options{Clock: clk, DriftFactor: tc.drift}, nil)
			// Node 1 moves the Redlock's clock on by tc.spent before it
			// answers, and the other nodes answer only after that, so
			// whichever quorum decides the round sees the time spent.
			var once sync.Once
			advanced := make(chan struct{})
			c.nodes[1].SetBeforeAcquire(func(lockcore.NodeAcquire) {
				once.Do(func() { clk.Advance(tc.spent); close(advanced) })
			})
			for _, i := range []int{0, 2} {
				c.nodes[i].SetBeforeAcquire(func(lockcore.NodeAcquire) { <-advanced })
			}
			start := clk.Now()

			// The lease id is minted: a grant heard after the round was
			// decided (a node that missed the grace on a busy machine)
			// is then released too, where one to a lease id the client
			// chose would be kept until its TTL (see lateAcquire).
			lease, err := c.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "v", TTL: ttl})
			if tc.want == 0 {
				if !errors.Is(err, lockcore.ErrNoQuorum) || !errors.Is(err, lockcore.ErrValidityExhausted) {
					t.Fatalf("err = %v, lease = %+v; want ErrNoQuorum with ErrValidityExhausted", err, lease)
				}
				c.assertFree(t, "v")
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if lease.Validity != tc.want {
				t.Fatalf("validity = %v, want %v", lease.Validity, tc.want)
			}
			if want := start.Add(tc.spent).Add(tc.want); !lease.Expires.Equal(want) {
				t.Fatalf("expires = %v, want %v", lease.Expires, want)
			}
			// Extend takes no time on the fake clock: TTL − drift.
			ext, err := c.rl.Extend(ctx, lockcore.ExtendRequest{Resource: "v", LeaseID: lease.ID, TTL: 2 * ttl})
			if err != nil {
				t.Fatal(err)
			}
			if ext.Validity != tc.wantExt {
				t.Fatalf("extend validity = %v, want %v", ext.Validity, tc.wantExt)
			}
		})
	}
}

func TestValidityOnTheRealClock(t *testing.T) {
	// Slow but answering nodes: the validity is at most TTL − delay − drift.
	ctx := context.Background()
	const ttl, delay = 5 * time.Second, 100 * time.Millisecond
	c := newCluster(t, 3, &lockcore.Options{NodeTimeout: 2 * time.Second, MinTTL: ttl}, nil)
	for _, n := range c.nodes {
		n.SetDelay(delay)
	}
	lease, err := c.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "slow", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	// 5s − 100ms − (50ms + 2ms) of drift allowance.
	if limit := 4848 * time.Millisecond; lease.Validity <= 0 || lease.Validity > limit {
		t.Fatalf("validity = %v, want in (0, %v]", lease.Validity, limit)
	}
}

func TestNodeSlowerThanNodeTimeoutCountsAsDown(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 3, &lockcore.Options{NodeTimeout: 200 * time.Millisecond, MinTTL: time.Second}, nil)
	c.nodes[0].SetHang(true)
	if _, err := c.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "hang", TTL: time.Second}); err != nil {
		t.Fatalf("one hanging node of three: %v", err)
	}
	c.nodes[1].SetHang(true)
	_, err := c.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "hang2", TTL: time.Second})
	var qe *lockcore.QuorumError
	if !errors.As(err, &qe) || !errors.Is(err, context.DeadlineExceeded) || qe.Answered != 1 {
		t.Fatalf("two hanging nodes of three: err = %v, want a QuorumError from node timeouts", err)
	}
}

// seedCounters sets each raw node's fencing counter for resource.
func seedCounters(t *testing.T, c *cluster, resource string, counters ...int64) {
	t.Helper()
	for i, v := range counters {
		if err := c.raw[i].RaiseFence(context.Background(), resource, "nobody-0123456789", v); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFencingWriteBackCoversDriftedCounters(t *testing.T) {
	// The reliability doc's example: counters A=10 and B..E=3. Without the
	// write-back, a grant on {A,B,C} gets 11 and a later grant on {C,D,E}
	// gets max(5,4,4) = 5 < 11.
	ctx := context.Background()
	const res = "drift"
	for _, tc := range []struct {
		name       string
		secondDown []int
	}{
		{"second grant on C,D,E", []int{0, 1}},
		{"second grant without A", []int{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 5, nil, nil)
			seedCounters(t, c, res, 10, 3, 3, 3, 3)

			c.down(true, 3, 4) // grant 1 on {A,B,C}
			first, err := c.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: res, LeaseID: leaseA, TTL: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if first.Token != 11 {
				t.Fatalf("first token = %d, want 11 (A's counter 10 + 1)", first.Token)
			}
			// The write-back raised B and C to the token, the lock's stored token with it.
			for i, l := range c.holders(t, res)[:3] {
				if l.Token != first.Token {
					t.Fatalf("node %d holds token %d after the grant, want %d written back", i, l.Token, first.Token)
				}
			}
			if err := c.rl.Release(ctx, lockcore.ReleaseRequest{Resource: res, LeaseID: leaseA}); err != nil {
				t.Fatal(err)
			}

			c.down(false, 3, 4)
			c.down(true, tc.secondDown...)
			second, err := c.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: res, LeaseID: leaseB, TTL: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if second.Token <= first.Token {
				t.Fatalf("second token %d is not above the first %d: counters drifted and were not written back", second.Token, first.Token)
			}
		})
	}
}

func TestFencingTokensGrowUnderRandomMinorityFailures(t *testing.T) {
	// Sequential grants, each with a random minority of nodes down, through
	// two replicas: every token is above every earlier one.
	ctx := context.Background()
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprintf("%d nodes", n), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(n), 42))
			c := newCluster(t, n, nil, nil)
			replicas := []*lockcore.Redlock{c.rl, c.replica(t, nil)}
			var last int64
			for round := range 300 {
				down := rng.Perm(n)[:rng.IntN(n/2+1)] // up to n/2 nodes
				c.down(true, down...)
				rl := replicas[rng.IntN(len(replicas))]
				lease, err := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "r", TTL: 10 * time.Second})
				if err != nil {
					t.Fatalf("round %d, down %v: %v", round, down, err)
				}
				if lease.Token <= last {
					t.Fatalf("round %d, down %v: token %d after %d", round, down, lease.Token, last)
				}
				last = lease.Token
				// Flip the failures between grant and release, so that the
				// nodes that miss grants and releases vary independently.
				c.down(false, down...)
				down = rng.Perm(n)[:rng.IntN(n/2+1)]
				c.down(true, down...)
				// With other nodes down than at the grant, fewer than a
				// quorum may confirm the release: ErrNotHeld when the nodes
				// down could not make up a quorum with those that
				// confirmed, ErrNoQuorum (unknown) when they could.
				err = rl.Release(ctx, lockcore.ReleaseRequest{Resource: "r", LeaseID: lease.ID})
				if err != nil && !errors.Is(err, lockcore.ErrNotHeld) && !errors.Is(err, lockcore.ErrNoQuorum) {
					t.Fatalf("round %d: release: %v", round, err)
				}
				c.down(false, down...)
				// Locks left on nodes that missed the release would block the
				// next grant for the TTL; clear them as an expiry would.
				for _, raw := range c.raw {
					_, _ = raw.Release(ctx, "r", lease.ID, 0)
				}
			}
		})
	}
}

func TestAcquireRetryWithTheSameLeaseIsIdempotent(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 3, nil, nil)
	first, err := c.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "idem", LeaseID: leaseA, TTL: 5 * time.Second, Owner: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	if first.Reentered {
		t.Fatal("a new holder is reported as reentered")
	}
	again, err := c.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "idem", LeaseID: leaseA, TTL: 8 * time.Second, Owner: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	if !again.Reentered || again.Token != first.Token || again.TTL != 8*time.Second || again.ID != leaseA {
		t.Fatalf("retry = %+v, want reentered with token %d and the new TTL", again, first.Token)
	}
	for i, l := range c.holders(t, "idem") {
		if l.Lease != leaseA || l.TTL != 8*time.Second || l.Token != first.Token {
			t.Fatalf("node %d after the retry: %+v", i, l)
		}
	}
	// A retry through another replica, with a node down, is the same lease.
	c.down(true, 0)
	viaOther, err := c.replica(t, nil).Acquire(ctx, lockcore.AcquireRequest{Resource: "idem", LeaseID: leaseA, TTL: 8 * time.Second})
	if err != nil || !viaOther.Reentered || viaOther.Token != first.Token {
		t.Fatalf("retry via another replica = %+v, %v", viaOther, err)
	}
	c.down(false, 0)
	if _, err := c.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "idem", LeaseID: leaseB, TTL: 5 * time.Second}); !errors.Is(err, lockcore.ErrTaken) {
		t.Fatalf("another lease: err = %v, want ErrTaken", err)
	}
	// A minted lease id is valid and distinct each time.
	l1, err1 := c.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "minted-1", TTL: time.Second})
	l2, err2 := c.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "minted-2", TTL: time.Second})
	if err1 != nil || err2 != nil || !lockcore.ValidLeaseID(l1.ID) || l1.ID == l2.ID {
		t.Fatalf("minted leases: %+v %v, %+v %v", l1, err1, l2, err2)
	}
}

func TestExtend(t *testing.T) {
	ctx := context.Background()
	clk := nodetest.NewClock(fakeStart) // expires the nodes' locks
	c := newCluster(t, 3, nil, clk.Now)
	acq := func(res, lease string, ttl time.Duration) *lockcore.Lease {
		t.Helper()
		l, err := c.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: res, LeaseID: lease, TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}

	t.Run("the holder extends to a new TTL; TTL 0 keeps the last one", func(t *testing.T) {
		l := acq("ext-1", leaseA, 3*time.Second)
		got, err := c.rl.Extend(ctx, lockcore.ExtendRequest{Resource: "ext-1", LeaseID: leaseA})
		if err != nil || got.TTL != 3*time.Second || got.Token != l.Token || !got.Reentered {
			t.Fatalf("extend with TTL 0 = %+v, %v; want TTL 3s, token %d", got, err, l.Token)
		}
		if got, err = c.rl.Extend(ctx, lockcore.ExtendRequest{Resource: "ext-1", LeaseID: leaseA, TTL: 7 * time.Second}); err != nil || got.TTL != 7*time.Second {
			t.Fatalf("extend to 7s = %+v, %v", got, err)
		}
		clk.Advance(5 * time.Second) // past the first TTL, within the new one
		if got, err = c.rl.Extend(ctx, lockcore.ExtendRequest{Resource: "ext-1", LeaseID: leaseA}); err != nil || got.TTL != 7*time.Second {
			t.Fatalf("extend with TTL 0 after extending to 7s = %+v, %v", got, err)
		}
		info, err := c.rl.Inspect(ctx, "ext-1")
		if err != nil || info.TTL != 7*time.Second || info.Token != l.Token {
			t.Fatalf("inspect = %+v, %v", info, err)
		}
	})

	t.Run("a free lock is not held", func(t *testing.T) {
		_, err := c.rl.Extend(ctx, lockcore.ExtendRequest{Resource: "ext-free", LeaseID: leaseA})
		if !errors.Is(err, lockcore.ErrNotHeld) {
			t.Fatalf("err = %v, want ErrNotHeld", err)
		}
	})

	t.Run("another lease's lock is held by other and left alone", func(t *testing.T) {
		l := acq("ext-2", leaseA, 10*time.Second)
		_, err := c.rl.Extend(ctx, lockcore.ExtendRequest{Resource: "ext-2", LeaseID: leaseB, TTL: time.Hour})
		var he *lockcore.HeldByOtherError
		if !errors.Is(err, lockcore.ErrHeldByOther) || !errors.As(err, &he) || he.RetryAfter <= 0 {
			t.Fatalf("err = %v, want *HeldByOtherError with a retry hint", err)
		}
		for i, h := range c.holders(t, "ext-2") {
			if h.Lease != leaseA || h.TTL != 10*time.Second || h.Token != l.Token {
				t.Fatalf("node %d: holder touched: %+v", i, h)
			}
		}
	})

	t.Run("IfToken must match the holder's token", func(t *testing.T) {
		l := acq("ext-3", leaseA, 10*time.Second)
		if _, err := c.rl.Extend(ctx, lockcore.ExtendRequest{Resource: "ext-3", LeaseID: leaseA, IfToken: l.Token + 1}); !errors.Is(err, lockcore.ErrTokenMismatch) {
			t.Fatalf("wrong token: err = %v, want ErrTokenMismatch", err)
		}
		if _, err := c.rl.Extend(ctx, lockcore.ExtendRequest{Resource: "ext-3", LeaseID: leaseA, IfToken: l.Token}); err != nil {
			t.Fatalf("right token: %v", err)
		}
		if _, err := c.rl.Extend(ctx, lockcore.ExtendRequest{Resource: "ext-free", LeaseID: leaseA, IfToken: 1}); !errors.Is(err, lockcore.ErrNotHeld) {
			t.Fatalf("IfToken on a free lock: err = %v, want ErrNotHeld", err)
		}
	})

	t.Run("an expired lease cannot extend or release the next holder's lock", func(t *testing.T) {
		old := acq("ext-4", leaseA, time.Second)
		clk.Advance(time.Second)
		if _, err := c.rl.Extend(ctx, lockcore.ExtendRequest{Resource: "ext-4", LeaseID: leaseA}); !errors.Is(err, lockcore.ErrNotHeld) {
			t.Fatalf("expired, free: extend err = %v, want ErrNotHeld", err)
		}
		next := acq("ext-4", leaseB, 10*time.Second)
		if next.Token <= old.Token {
			t.Fatalf("next token %d not above %d", next.Token, old.Token)
		}
		if _, err := c.rl.Extend(ctx, lockcore.ExtendRequest{Resource: "ext-4", LeaseID: leaseA}); !errors.Is(err, lockcore.ErrHeldByOther) {
			t.Fatalf("expired lease extend: err = %v, want ErrHeldByOther", err)
		}
		if err := c.rl.Release(ctx, lockcore.ReleaseRequest{Resource: "ext-4", LeaseID: leaseA}); !errors.Is(err, lockcore.ErrHeldByOther) {
			t.Fatalf("expired lease release: err = %v, want ErrHeldByOther", err)
		}
		info, err := c.rl.Inspect(ctx, "ext-4")
		if err != nil || info.Token != next.Token || info.TTL != 10*time.Second {
			t.Fatalf("the next holder was touched: %+v, %v", info, err)
		}
	})

	t.Run("a minority down is fine, a majority down is no quorum", func(t *testing.T) {
		acq("ext-5", leaseA, 10*time.Second)
		c.down(true, 2)
		if _, err := c.rl.Extend(ctx, lockcore.ExtendRequest{Resource: "ext-5", LeaseID: leaseA}); err != nil {
			t.Fatalf("one node down: %v", err)
		}
		c.down(true, 1)
		_, err := c.rl.Extend(ctx, lockcore.ExtendRequest{Resource: "ext-5", LeaseID: leaseA})
		c.down(false, 1, 2)
		if !errors.Is(err, lockcore.ErrNoQuorum) {
			t.Fatalf("two nodes down: err = %v, want ErrNoQuorum", err)
		}
	})
}

func TestRelease(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 3, nil, nil)
	acq := func(res, lease string) *lockcore.Lease {
		t.Helper()
		l, err := c.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: res, LeaseID: lease, TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}

	t.Run("the holder releases once; then the lock is not held", func(t *testing.T) {
		acq("rel-1", leaseA)
		if err := c.rl.Release(ctx, lockcore.ReleaseRequest{Resource: "rel-1", LeaseID: leaseA}); err != nil {
			t.Fatal(err)
		}
		c.assertNotHolding(t, "rel-1", leaseA)
		if _, err := c.rl.Inspect(ctx, "rel-1"); !errors.Is(err, lockcore.ErrNotHeld) {
			t.Fatalf("inspect after release: %v", err)
		}
		if err := c.rl.Release(ctx, lockcore.ReleaseRequest{Resource: "rel-1", LeaseID: leaseA}); !errors.Is(err, lockcore.ErrNotHeld) {
			t.Fatalf("second release: err = %v, want ErrNotHeld", err)
		}
	})

	t.Run("another lease cannot release the holder's lock", func(t *testing.T) {
		l := acq("rel-2", leaseA)
		err := c.rl.Release(ctx, lockcore.ReleaseRequest{Resource: "rel-2", LeaseID: leaseB})
		var he *lockcore.HeldByOtherError
		if !errors.As(err, &he) || !errors.Is(err, lockcore.ErrHeldByOther) {
			t.Fatalf("err = %v, want *HeldByOtherError", err)
		}
		if info, err := c.rl.Inspect(ctx, "rel-2"); err != nil || info.Token != l.Token {
			t.Fatalf("holder touched: %+v, %v", info, err)
		}
	})

	t.Run("IfToken must match the holder's token", func(t *testing.T) {
		l := acq("rel-3", leaseA)
		if err := c.rl.Release(ctx, lockcore.ReleaseRequest{Resource: "rel-3", LeaseID: leaseA, IfToken: l.Token + 1}); !errors.Is(err, lockcore.ErrTokenMismatch) {
			t.Fatalf("wrong token: err = %v, want ErrTokenMismatch", err)
		}
		if _, err := c.rl.Inspect(ctx, "rel-3"); err != nil {
			t.Fatalf("a refused release freed the lock: %v", err)
		}
		if err := c.rl.Release(ctx, lockcore.ReleaseRequest{Resource: "rel-3", LeaseID: leaseA, IfToken: l.Token}); err != nil {
			t.Fatalf("right token: %v", err)
		}
	})

	t.Run("a majority down is no quorum, and the retry succeeds", func(t *testing.T) {
		acq("rel-4", leaseA)
		c.down(true, 0, 1)
		err := c.rl.Release(ctx, lockcore.ReleaseRequest{Resource: "rel-4", LeaseID: leaseA})
		c.down(false, 0, 1)
		if !errors.Is(err, lockcore.ErrNoQuorum) {
			t.Fatalf("err = %v, want ErrNoQuorum", err)
		}
		if err := c.rl.Release(ctx, lockcore.ReleaseRequest{Resource: "rel-4", LeaseID: leaseA}); err != nil {
			t.Fatalf("retry: %v", err)
		}
		c.assertNotHolding(t, "rel-4", leaseA)
	})
}

func TestInspect(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 5, nil, nil)
	l, err := c.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "insp", LeaseID: leaseA, TTL: 10 * time.Second, Owner: "worker 7"})
	if err != nil {
		t.Fatal(err)
	}
	c.down(true, 0, 4)
	info, err := c.rl.Inspect(ctx, "insp")
	if err != nil {
		t.Fatal(err)
	}
	if info.Resource != "insp" || info.Token != l.Token || info.Owner != "worker 7" || info.TTL != 10*time.Second ||
		info.Remaining <= 0 || info.Remaining > 10*time.Second || info.Expires.IsZero() {
		t.Fatalf("inspect = %+v", info)
	}
	c.down(true, 1)
	if _, err := c.rl.Inspect(ctx, "insp"); !errors.Is(err, lockcore.ErrNoQuorum) {
		t.Fatalf("three of five down: err = %v, want ErrNoQuorum", err)
	}
	if err := c.rl.Ready(ctx); !errors.Is(err, lockcore.ErrNoQuorum) {
		t.Fatalf("Ready with three of five down: %v", err)
	}
	c.down(false, 0, 1, 4)
	if err := c.rl.Ready(ctx); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	// Held on a minority only (e.g. what a failed attempt leaves on a node
	// whose release was lost): not held.
	if _, err := c.raw[0].Acquire(ctx, lockcore.NodeAcquire{Resource: "minority", Lease: leaseB, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.rl.Inspect(ctx, "minority"); !errors.Is(err, lockcore.ErrNotHeld) {
		t.Fatalf("held on one node of five: err = %v, want ErrNotHeld", err)
	}
	// Held on one node that answers and two that do not: a quorum may
	// hold it, so "not held" would be a guess.
	for _, i := range []int{1, 2} {
		if _, err := c.raw[i].Acquire(ctx, lockcore.NodeAcquire{Resource: "minority", Lease: leaseB, TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	c.down(true, 1, 2)
	_, err = c.rl.Inspect(ctx, "minority")
	c.down(false, 1, 2)
	if !errors.Is(err, lockcore.ErrNoQuorum) {
		t.Fatalf("held on one answering node and two silent ones: err = %v, want ErrNoQuorum", err)
	}
}

func TestInputValidation(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 3, nil, nil)
	rl := c.rl
	minTTL, maxTTL, maxWait := rl.Limits()
	// acquire returns a call of Acquire with a valid request changed by edit.
	acquire := func(edit func(r *lockcore.AcquireRequest)) func() error {
		req := lockcore.AcquireRequest{Resource: "valid", TTL: minTTL}
		edit(&req)
		return func() error { _, err := rl.Acquire(ctx, req); return err }
	}
	type req = lockcore.AcquireRequest
	cases := []struct {
		name  string
		call  func() error
		field string // "" means the call must succeed
	}{
		{"an empty resource", acquire(func(r *req) { r.Resource = "" }), "resource"},
		{"a resource with a space", acquire(func(r *req) { r.Resource = "a b" }), "resource"},
		{"a resource with a slash", acquire(func(r *req) { r.Resource = "a/b" }), "resource"},
		{"a resource with a brace", acquire(func(r *req) { r.Resource = "a{b}" }), "resource"},
		{"a resource of 201 characters", acquire(func(r *req) { r.Resource = strings.Repeat("r", 201) }), "resource"},
		{"a resource of 200 characters", acquire(func(r *req) { r.Resource = strings.Repeat("r", 200) }), ""},
		{"a resource of every allowed kind of character", acquire(func(r *req) { r.Resource = "Az09._:-" }), ""},
		{"a lease id of 15 characters", acquire(func(r *req) { r.LeaseID = strings.Repeat("l", 15) }), "lease_id"},
		{"a lease id of 129 characters", acquire(func(r *req) { r.LeaseID = strings.Repeat("l", 129) }), "lease_id"},
		{"a lease id with a dot", acquire(func(r *req) { r.LeaseID = "lease.0123456789abcdef" }), "lease_id"},
		{"a lease id of 16 characters", acquire(func(r *req) { r.Resource, r.LeaseID = "valid-16", strings.Repeat("l", 16) }), ""},
		{"a zero TTL", acquire(func(r *req) { r.TTL = 0 }), "ttl_ms"},
		{"a negative TTL", acquire(func(r *req) { r.TTL = -time.Second }), "ttl_ms"},
		{"a TTL below the minimum", acquire(func(r *req) { r.TTL = minTTL - time.Millisecond }), "ttl_ms"},
		{"a TTL above the maximum", acquire(func(r *req) { r.TTL = maxTTL + time.Millisecond }), "ttl_ms"},
		{"a TTL at the maximum", acquire(func(r *req) { r.Resource, r.TTL = "valid-max", maxTTL }), ""},
		{"a negative wait", acquire(func(r *req) { r.Wait = -time.Millisecond }), "wait_ms"},
		{"a wait above the maximum", acquire(func(r *req) { r.Wait = maxWait + time.Millisecond }), "wait_ms"},
		{"a wait at the maximum on a free lock", acquire(func(r *req) { r.Resource, r.Wait = "valid-wait", maxWait }), ""},
		{"an owner of 257 characters", acquire(func(r *req) { r.Owner = strings.Repeat("o", 257) }), "owner"},
		{"an owner with a NUL", acquire(func(r *req) { r.Owner = "a\x00b" }), "owner"},
		{"an owner with a newline", acquire(func(r *req) { r.Owner = "a\nb" }), "owner"},
		{"an owner with DEL", acquire(func(r *req) { r.Owner = "a\x7fb" }), "owner"},
		{"an owner with a C1 control", acquire(func(r *req) { r.Owner = "a\u0085b" }), "owner"},
		{"an owner with invalid UTF-8", acquire(func(r *req) { r.Owner = "a\xffb" }), "owner"},
		{"an owner of 256 characters", acquire(func(r *req) { r.Resource, r.Owner = "valid-owner", strings.Repeat("é", 256) }), ""},
		{"extend: an empty resource", func() error {
			_, err := rl.Extend(ctx, lockcore.ExtendRequest{LeaseID: leaseA})
			return err
		}, "resource"},
		{"extend: a bad lease id", func() error {
			_, err := rl.Extend(ctx, lockcore.ExtendRequest{Resource: "x", LeaseID: "short"})
			return err
		}, "lease_id"},
		{"extend: a TTL below the minimum", func() error {
			_, err := rl.Extend(ctx, lockcore.ExtendRequest{Resource: "x", LeaseID: leaseA, TTL: time.Millisecond})
			return err
		}, "ttl_ms"},
		{"extend: a negative TTL", func() error {
			_, err := rl.Extend(ctx, lockcore.ExtendRequest{Resource: "x", LeaseID: leaseA, TTL: -time.Second})
			return err
		}, "ttl_ms"},
		{"release: a bad resource", func() error {
			return rl.Release(ctx, lockcore.ReleaseRequest{Resource: "a b", LeaseID: leaseA})
		}, "resource"},
		{"release: a missing lease id", func() error {
			return rl.Release(ctx, lockcore.ReleaseRequest{Resource: "x"})
		}, "lease_id"},
		{"inspect: a bad resource", func() error {
			_, err := rl.Inspect(ctx, "")
			return err
		}, "resource"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("valid input refused: %v", err)
				}
				return
			}
			var ie *lockcore.InvalidError
			if !errors.Is(err, lockcore.ErrInvalid) || !errors.As(err, &ie) || ie.Field != tc.field || ie.Reason == "" {
				t.Fatalf("err = %v, want *InvalidError for %q", err, tc.field)
			}
		})
	}
	for _, n := range c.nodes {
		if got := n.Acquires(); got != 6 {
			t.Fatalf("node %v saw %d acquires; only the 6 valid requests may reach the nodes", n, got)
		}
	}
}

func TestNewRejectsContradictoryOptions(t *testing.T) {
	node := []lockcore.Node{memnode.New(nil)}
	cases := []struct {
		name  string
		nodes []lockcore.Node
		opts  *lockcore.Options
		field string
	}{
		{"no nodes", nil, nil, "nodes"},
		{"minimum TTL above the maximum", node, &lockcore.Options{MinTTL: 2 * time.Hour}, "ttl bounds"},
		{"node timeout over half the minimum TTL", node, &lockcore.Options{NodeTimeout: 51 * time.Millisecond, MinTTL: 100 * time.Millisecond}, "node timeout"},
		{"drift factor of one half", node, &lockcore.Options{DriftFactor: 0.5}, "drift factor"},
		{"maximum node timeout below the node timeout", node, &lockcore.Options{MaxNodeTimeout: 40 * time.Millisecond}, "max node timeout"},
		{"maximum node timeout over half the maximum TTL", node, &lockcore.Options{MaxNodeTimeout: 600 * time.Millisecond, MaxTTL: time.Second}, "max node timeout"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rl, err := lockcore.New(tc.nodes, tc.opts)
			var ie *lockcore.InvalidError
			if rl != nil || !errors.As(err, &ie) || !errors.Is(err, lockcore.ErrInvalid) || ie.Field != tc.field {
				t.Fatalf("New = %v, %v; want *InvalidError for %q", rl, err, tc.field)
			}
		})
	}
	rl, err := lockcore.New(node, nil)
	if err != nil || rl.Quorum() != 1 || len(rl.Nodes()) != 1 {
		t.Fatalf("one node: %v, %v", rl, err)
	}
	if minTTL, maxTTL, maxWait := rl.Limits(); minTTL != 100*time.Millisecond || maxTTL != time.Hour || maxWait != 5*time.Minute {
		t.Fatalf("default limits = %v %v %v", minTTL, maxTTL, maxWait)
	}
	if got := rl.NodeTimeout(); got != 50*time.Millisecond {
		t.Fatalf("node timeout of a new Redlock %v, want the default 50ms", got)
	}
	// The default maximum node timeout (ten times the node timeout) stays
	// within half of a short maximum TTL rather than contradict it.
	if _, err := lockcore.New(node, &lockcore.Options{MaxTTL: 200 * time.Millisecond}); err != nil {
		t.Fatalf("a maximum TTL of 200ms with the default node timeouts: %v", err)
	}
}

func TestContextCancellation(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()

	t.Run("an ended context fails every call with its error", func(t *testing.T) {
		c := newCluster(t, 3, nil, nil)
		held, err := c.rl.Acquire(context.Background(), lockcore.AcquireRequest{Resource: "held", TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			ctx  context.Context
			want error
		}{{canceled, context.Canceled}, {expired, context.DeadlineExceeded}} {
			ctx := tc.ctx
			calls := map[string]func() error{
				"acquire": func() error {
					_, err := c.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "free", LeaseID: leaseA, TTL: time.Second})
					return err
				},
				"acquire with wait": func() error {
					_, err := c.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "free", LeaseID: leaseA, TTL: time.Second, Wait: time.Second})
					return err
				},
				"extend": func() error {
					_, err := c.rl.Extend(ctx, lockcore.ExtendRequest{Resource: "held", LeaseID: held.ID})
					return err
				},
				"release": func() error {
					return c.rl.Release(ctx, lockcore.ReleaseRequest{Resource: "held", LeaseID: held.ID})
				},
				"inspect": func() error {
					_, err := c.rl.Inspect(ctx, "held")
					return err
				},
			}
			for name, call := range calls {
				if err := call(); !errors.Is(err, tc.want) {
					t.Fatalf("%s with %v: err = %v", name, tc.want, err)
				}
			}
			c.assertNotHolding(t, "free", leaseA)
			if info, err := c.rl.Inspect(context.Background(), "held"); err != nil || info.Token != held.Token {
				t.Fatalf("the held lock after failed calls: %+v, %v", info, err)
			}
		}
	})

	t.Run("canceling mid-acquire undoes what the nodes granted", func(t *testing.T) {
		c := newCluster(t, 3, &lockcore.Options{NodeTimeout: 10 * time.Second, MinTTL: 30 * time.Second}, nil)
		reached := make(chan struct{}, 3)
		for _, n := range c.nodes {
			n.SetLateGrant(true) // grants, then no reply until ctx ends
			n.SetBeforeAcquire(func(lockcore.NodeAcquire) { reached <- struct{}{} })
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		errc := make(chan error, 1)
		go func() {
			_, err := c.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "mid", TTL: time.Minute})
			errc <- err
		}()
		for range 3 {
			<-reached
		}
		cancel()
		select {
		case err := <-errc:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want context.Canceled", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Acquire did not return within 5s of cancel")
		}
		c.assertFree(t, "mid")
	})

	t.Run("canceling a retry of a held lease mid-acquire keeps the lock it held", func(t *testing.T) {
		// The client holds the lock with its own lease id and retries the
		// acquire (its first answer was lost, say); the retry's context ends
		// while every node is still working. Nothing tells the retry that
		// the lease held the lock, so nothing may be released: the client
		// still counts on its first answer.
		c := newCluster(t, 3, &lockcore.Options{NodeTimeout: 10 * time.Second, MinTTL: 30 * time.Second}, nil)
		first := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "retry", LeaseID: leaseA, TTL: time.Minute})
		reached := make(chan struct{}, 3)
		for _, n := range c.nodes {
			n.SetLateGrant(true)
			n.SetBeforeAcquire(func(lockcore.NodeAcquire) { reached <- struct{}{} })
		}
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := c.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "retry", LeaseID: leaseA, TTL: time.Minute})
			errc <- err
		}()
		for range 3 {
			<-reached
		}
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		for _, n := range c.nodes {
			n.SetLateGrant(false)
		}
		info, err := c.rl.Inspect(context.Background(), "retry")
		if err != nil || info.Token != first.Token {
			t.Fatalf("after the canceled retry: %+v, %v; want the lease's lock with token %d", info, err, first.Token)
		}
		if _, err := c.rl.Acquire(context.Background(), lockcore.AcquireRequest{Resource: "retry", LeaseID: leaseB, TTL: time.Minute}); !errors.Is(err, lockcore.ErrTaken) {
			t.Fatalf("another lease acquired the lock the first still holds: %v", err)
		}
	})
}

func TestRetryAfterIsWhenAQuorumFreesUp(t *testing.T) {
	// A leftover copy of another lease's lock on one node (a release that
	// never reached it, say) with a long TTL does not decide when the lock
	// frees up: the holder's copies on the quorum do.
	c := newCluster(t, 3, nil, nil)
	ctx := context.Background()
	if _, err := c.nodes[0].Inner().Acquire(ctx, lockcore.NodeAcquire{Resource: "hint", Lease: leaseB, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	c.down(true, 0)
	mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "hint", LeaseID: leaseA, TTL: 10 * time.Second})
	c.down(false, 0)

	_, err := c.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "hint", TTL: time.Minute})
	var te *lockcore.TakenError
	if !errors.As(err, &te) {
		t.Fatalf("err = %v, want *TakenError", err)
	}
	if te.RetryAfter > 10*time.Second || te.RetryAfter < 9*time.Second {
		t.Fatalf("RetryAfter = %v, want the holder's ~10s on the quorum, not the leftover's hour", te.RetryAfter)
	}
}

func TestIfTokenIsCheckedByTheNodes(t *testing.T) {
	ctx := context.Background()
	// lagging makes nodes 0 and 1 hold res for leaseA with token 11 and
	// node 2 with token 1, as a node that missed the raise of the lease's
	// token would until catch-up: the quorum's token is 11.
	lagging := func(t *testing.T, c *cluster, res string) {
		t.Helper()
		for i, raw := range c.raw {
			if i < 2 {
				if err := raw.RaiseFence(ctx, res, "", 10); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := raw.Acquire(ctx, lockcore.NodeAcquire{Resource: res, Lease: leaseA, TTL: 10 * time.Second}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The check is one node call per node, in the node's own atomic step:
	// no Inspect round before it.
	obs := &opsObserver{}
	c := newCluster(t, 3, &lockcore.Options{Observer: obs}, nil)

	t.Run("a lagging minority does not refuse the holder, and is extended too", func(t *testing.T) {
		lagging(t, c, "if-ext")
		obs.take()
		ext, err := c.rl.Extend(ctx, lockcore.ExtendRequest{Resource: "if-ext", LeaseID: leaseA, TTL: time.Minute, IfToken: 11})
		if err != nil || ext.Token != 11 {
			t.Fatalf("extend = %+v, %v; want token 11", ext, err)
		}
		if ops := obs.take(); ops["extend"] != 4 || ops["inspect"] != 0 {
			t.Fatalf("node calls %v; want 3 checked extends and 1 unchecked for the lagging node, no inspect", ops)
		}
		for i, h := range c.holders(t, "if-ext") {
			if h.Lease != leaseA || h.TTL != time.Minute {
				t.Fatalf("node %d: %+v; want extended to 1m", i, h)
			}
		}
	})

	t.Run("the lagging node's token is not the lock's", func(t *testing.T) {
		lagging(t, c, "if-low")
		_, err := c.rl.Extend(ctx, lockcore.ExtendRequest{Resource: "if-low", LeaseID: leaseA, TTL: time.Minute, IfToken: 1})
		if !errors.Is(err, lockcore.ErrTokenMismatch) {
			t.Fatalf("err = %v, want ErrTokenMismatch", err)
		}
		// The quorum's copies are untouched; the lagging node, whose token
		// the request named, acted on it (see Redlock.checked).
		for i, h := range c.holders(t, "if-low") {
			if want := []time.Duration{10 * time.Second, 10 * time.Second, time.Minute}[i]; h.Lease != leaseA || h.TTL != want {
				t.Fatalf("node %d: %+v; want TTL %v", i, h, want)
			}
		}
		if info, err := c.rl.Inspect(ctx, "if-low"); err != nil || info.Token != 11 || info.Remaining > 10*time.Second {
			t.Fatalf("the quorum's lock changed: %+v, %v", info, err)
		}
	})

	t.Run("a lagging minority does not refuse the holder's release, and is released too", func(t *testing.T) {
		lagging(t, c, "if-rel")
		obs.take()
		if err := c.rl.Release(ctx, lockcore.ReleaseRequest{Resource: "if-rel", LeaseID: leaseA, IfToken: 11}); err != nil {
			t.Fatal(err)
		}
		if ops := obs.take(); ops["release"] != 4 || ops["inspect"] != 0 {
			t.Fatalf("node calls %v; want 3 checked releases and 1 unchecked for the lagging node, no inspect", ops)
		}
		c.assertFree(t, "if-rel")
	})

	t.Run("one node call each when every node matches", func(t *testing.T) {
		l := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "if-one", LeaseID: leaseA, TTL: 10 * time.Second})
		obs.take()
		if _, err := c.rl.Extend(ctx, lockcore.ExtendRequest{Resource: "if-one", LeaseID: leaseA, IfToken: l.Token}); err != nil {
			t.Fatal(err)
		}
		if err := c.rl.Release(ctx, lockcore.ReleaseRequest{Resource: "if-one", LeaseID: leaseA, IfToken: l.Token}); err != nil {
			t.Fatal(err)
		}
		if ops := obs.take(); ops["extend"] != 3 || ops["release"] != 3 || ops["inspect"] != 0 {
			t.Fatalf("node calls %v, want 3 extends and 3 releases, no inspect", ops)
		}
	})
}

func TestAReleaseWithAWrongTokenHandsNothingOn(t *testing.T) {
	obs := &opsObserver{}
	c := newWaitCluster(t, memNodes, 3, &lockcore.Options{Observer: obs}, false)
	holder := mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "if-hand", TTL: holdTTL})
	out := make(chan acquired, 1)
	startWaiter(context.Background(), c.rl, 0, lockcore.AcquireRequest{Resource: "if-hand", LeaseID: waiterLease(0), TTL: holdTTL, Wait: longWait}, out)
	c.parked(t, 1)
	obs.take()
	err := c.rl.Release(context.Background(), lockcore.ReleaseRequest{Resource: "if-hand", LeaseID: holder.ID, IfToken: holder.Token + 1})
	if !errors.Is(err, lockcore.ErrTokenMismatch) {
		t.Fatalf("err = %v, want ErrTokenMismatch", err)
	}
	if ops := obs.take(); ops["handoff"] != 3 || ops["inspect"] != 0 || ops["release"] != 0 {
		t.Fatalf("node calls %v, want 3 hand-offs only (the check is inside them)", ops)
	}
	for i, l := range c.holders(t, "if-hand") {
		if l.Lease != holder.ID || l.Token != holder.Token {
			t.Fatalf("node %d holds %+v; want the holder's lock untouched", i, l)
		}
	}
	c.parked(t, 1) // the head is back asleep, not served
	none(t, out)
	if err := c.rl.Release(context.Background(), lockcore.ReleaseRequest{Resource: "if-hand", LeaseID: holder.ID, IfToken: holder.Token}); err != nil {
		t.Fatal(err)
	}
	if r := next(t, out, wakeBound); r.err != nil || r.lease.Token <= holder.Token {
		t.Fatalf("waiter: %+v, %v; want the lock handed on", r.lease, r.err)
	}
}
