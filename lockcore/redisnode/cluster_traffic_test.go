package redisnode_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/chaos"
	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/redisnode"
)

// traffic is a history of clients acquiring, writing to a fenced register
// and releasing locks on a Redlock, for chaos's checkers.
type traffic struct {
	rl    *lockcore.Redlock
	reg   *chaos.Register
	start time.Time
	names []string

	mu     sync.Mutex
	events []chaos.Event
	// grants, taken and failed count acquisitions granted, refused for a
	// holder, and failed otherwise (no quorum, a node error).
	grants, taken, failed atomic.Int64
	errs                  sync.Map // error text → count, for the log
}

func newTraffic(rl *lockcore.Redlock, names []string) *traffic {
	return &traffic{rl: rl, reg: chaos.NewRegister(), start: time.Now(), names: names}
}

func (tr *traffic) now() time.Duration { return time.Since(tr.start) }

func (tr *traffic) record(e chaos.Event) {
	tr.mu.Lock()
	tr.events = append(tr.events, e)
	tr.mu.Unlock()
}

// run runs clients goroutines until stop is closed, then returns.
func (tr *traffic) run(clients int, stop <-chan struct{}) {
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				tr.cycle(c, i, tr.names[rng.IntN(len(tr.names))])
			}
		})
	}
	wg.Wait()
}

const trafficTTL = time.Second

// cycle is one client's acquire, write and release of resource.
func (tr *traffic) cycle(c, i int, resource string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	inv := tr.now()
	l, err := tr.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: resource, TTL: trafficTTL})
	done := tr.now()
	switch {
	case errors.Is(err, lockcore.ErrTaken):
		tr.taken.Add(1)
		return
	case err != nil:
		tr.failed.Add(1)
		n, _ := tr.errs.LoadOrStore(err.Error(), new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		tr.record(chaos.Event{Client: c, Op: chaos.OpAcquire, Resource: resource, Outcome: chaos.Unknown, Invoke: inv, Complete: done})
		time.Sleep(5 * time.Millisecond)
		return
	}
	tr.grants.Add(1)
	tr.record(chaos.Event{Client: c, Op: chaos.OpAcquire, Resource: resource, Lease: l.ID, Token: uint64(l.Token),
		Outcome: chaos.Ok, ValidFor: l.Validity, Invoke: inv, Complete: done})
	value := strconv.Itoa(c) + "-" + strconv.Itoa(i)
	winv := tr.now()
	werr := tr.reg.Write(ctx, resource, l.ID, uint64(l.Token), value, winv)
	out := chaos.Ok
	if werr != nil {
		out = chaos.Fail
	}
	tr.record(chaos.Event{Client: c, Op: chaos.OpWrite, Resource: resource, Lease: l.ID, Token: uint64(l.Token),
		Value: value, Outcome: out, Invoke: winv, Complete: tr.now(), Stale: werr != nil})
	rinv := tr.now()
	rerr := tr.rl.Release(ctx, lockcore.ReleaseRequest{Resource: resource, LeaseID: l.ID})
	out = chaos.Ok
	if rerr != nil {
		out = chaos.Unknown
	}
	tr.record(chaos.Event{Client: c, Op: chaos.OpRelease, Resource: resource, Lease: l.ID, Outcome: out, Invoke: rinv, Complete: tr.now()})
}

// check runs chaos's checkers C1 (no overlap), C2 (no duplicate or
// backward token) and C3 (the fenced register admitted no lower token
// after a higher one) on the history, fails t on any violation, and
// fails t when fewer than minGrants were granted or more than maxFailed
// of the attempts failed.
func (tr *traffic) check(t *testing.T, minGrants int64, maxFailed float64) {
	t.Helper()
	tr.mu.Lock()
	events := append([]chaos.Event(nil), tr.events...)
	tr.mu.Unlock()
	v1, _ := chaos.CheckC1(events, nil, 0)
	v2 := chaos.CheckC2(events)
	v3, refused := chaos.CheckC3(events, tr.reg.Log(), tr.reg.Finals(context.Background()))
	for _, v := range append(append(v1, v2...), v3...) {
		t.Errorf("violation: %s", v)
	}
	g, tk, f := tr.grants.Load(), tr.taken.Load(), tr.failed.Load()
	attempts := g + tk + f
	t.Logf("%d attempts: %d granted, %d refused (held), %d failed (%.1f%%); the register refused %d stale writes",
		attempts, g, tk, f, 100*float64(f)/float64(max(attempts, 1)), refused)
	tr.errs.Range(func(k, v any) bool {
		t.Logf("  failed %d×: %s", v.(*atomic.Int64).Load(), k)
		return true
	})
	if g < minGrants {
		t.Errorf("only %d grants, want at least %d", g, minGrants)
	}
	if float64(f) > maxFailed*float64(attempts) {
		t.Errorf("%d of %d attempts failed, more than %.0f%%", f, attempts, 100*maxFailed)
	}
}

// callCounter is a lockcore.Observer that counts, per node, the lock
// calls (not checks) and those that failed.
type callCounter struct {
	mu           sync.Mutex
	calls, fails map[string]int
	last         map[string]error
}

func newCallCounter() *callCounter {
	return &callCounter{calls: map[string]int{}, fails: map[string]int{}, last: map[string]error{}}
}

func (o *callCounter) NodeCall(node, op string, _ time.Duration, err error) {
	if op == "check" {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls[node]++
	if err != nil && !errors.Is(err, context.Canceled) {
		o.fails[node]++
		o.last[node] = err
	}
}
func (o *callCounter) QuorumFailed(string) {}
func (o *callCounter) Fenced()             {}

// failed returns node's failed lock calls, of how many, and the last error.
func (o *callCounter) failed(node string) (int, int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.fails[node], o.calls[node], o.last[node]
}

// clusterRedlock returns a Redlock over one ClusterNode per Cluster, each
// put in service, closed when t ends.
func clusterRedlock(t *testing.T, cs []*redistest.Cluster, obs lockcore.Observer) (*lockcore.Redlock, []*redisnode.ClusterNode) {
	t.Helper()
	nodes := make([]lockcore.Node, len(cs))
	cns := make([]*redisnode.ClusterNode, len(cs))
	for i, c := range cs {
		cns[i] = newClusterNode(t, c)
		nodes[i] = cns[i]
	}
	rl, err := lockcore.New(nodes, &lockcore.Options{NodeTimeout: 300 * time.Millisecond, MinTTL: trafficTTL,
		CheckInterval: 200 * time.Millisecond, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rl.Close)
	return rl, cns
}

// trafficNames are the resources the traffic tests lock.
func trafficNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("name-%d", i)
	}
	return out
}

// waitGrants waits until tr has granted at least n more than it had.
func waitGrants(t *testing.T, tr *traffic, n int64) {
	t.Helper()
	want := tr.grants.Load() + n
	deadline := time.Now().Add(20 * time.Second)
	for tr.grants.Load() < want {
		if time.Now().After(deadline) {
			t.Fatalf("traffic stalled: %d grants, waiting for %d", tr.grants.Load(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestClusterReshardUnderTraffic moves every slot of the locked names
// that one shard of the first Cluster node serves to another shard, key
// batch by key batch, while 16 clients acquire, write with their token
// and release 64 names on three Cluster nodes: scripts meet MOVED, ASK
// and TRYAGAIN, and counters move with their slots. No two holders may
// overlap, no token may repeat or go back, and failures stay under 5%.
func TestClusterReshardUnderTraffic(t *testing.T) {
	cs := []*redistest.Cluster{redistest.StartCluster(t, 3, 0), redistest.StartCluster(t, 3, 0), redistest.StartCluster(t, 3, 0)}
	obs := newCallCounter()
	rl, cns := clusterRedlock(t, cs, obs)
	names := trafficNames(64)
	tr := newTraffic(rl, names)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { tr.run(16, stop); close(done) }()
	waitGrants(t, tr, 200)

	c := cs[0]
	src := c.OwnerOf(lockcore.FenceSlot(names[0]))
	var dst *redistest.Server
	for _, p := range c.Primaries() {
		if p != src {
			dst = p
			break
		}
	}
	moved := 0
	seen := map[int]bool{}
	for _, name := range names {
		slot := lockcore.FenceSlot(name)
		if seen[slot] || c.OwnerOf(slot) != src {
			continue
		}
		seen[slot] = true
		if err := c.MoveSlot(slot, src, dst, time.Millisecond); err != nil {
			close(stop)
			<-done
			t.Fatalf("moving slot %d: %v", slot, err)
		}
		moved++
	}
	waitGrants(t, tr, 200)
	close(stop)
	<-done
	c.WaitStable()
	t.Logf("moved %d slots from %s to %s under traffic", moved, src.Addr(), dst.Addr())
	if moved == 0 {
		t.Fatal("no slot moved: the test proves nothing")
	}
	tr.check(t, 400, 0.05)
	// The resharded node itself: every lock script that met the moving
	// slots was sent again until it ran, none failed for it.
	fails, calls, last := obs.failed(cns[0].String())
	t.Logf("the resharded node: %d lock calls, %d failed (last: %v), %d sent again after MOVED/ASK/TRYAGAIN",
		calls, fails, last, cns[0].Resent())
	if cns[0].Resent() == 0 {
		t.Error("no lock script met a moving slot: the reshard was not exercised")
	}
	if limit := max(5, calls/1000); fails > limit {
		t.Errorf("the resharded node failed %d of %d lock calls, more than %d", fails, calls, limit)
	}
}

// TestClusterFailoverUnderTraffic kills a shard primary of the first of
// three Cluster nodes while 16 clients acquire, write with their token
// and release 64 names; its replica takes over. The node must be found
// lost, recovered from the two others by the Redlock's guard, and serve
// again; no two holders may overlap, no token may repeat or go back, and
// failures stay under 5% of the attempts.
func TestClusterFailoverUnderTraffic(t *testing.T) {
	cs := []*redistest.Cluster{redistest.StartCluster(t, 3, 1), redistest.StartCluster(t, 3, 0), redistest.StartCluster(t, 3, 0)}
	obs := newCallCounter()
	rl, cns := clusterRedlock(t, cs, obs)
	names := trafficNames(64)
	tr := newTraffic(rl, names)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { tr.run(16, stop); close(done) }()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-done
	}()
	waitGrants(t, tr, 200)

	c := cs[0]
	p := c.OwnerOf(lockcore.FenceSlot(names[0]))
	killed := time.Now()
	c.KillAndPromote(p, c.ReplicaOf(p))
	promoted := time.Now()
	// The guard finds the node lost (quarantined, out of service), then
	// recovers it from the two others.
	sawOut := false
	deadline := time.Now().Add(20 * time.Second)
	for {
		h, err := cns[0].Check(context.Background())
		out := err != nil || h.Lost || h.Quarantined
		sawOut = sawOut || (err == nil && out)
		if sawOut && !out {
			t.Logf("primary killed; replica promoted after %v; node back in service %v later",
				promoted.Sub(killed).Round(time.Millisecond), time.Since(promoted).Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node did not come back within 20s (saw it out: %v): %+v, %v", sawOut, h, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	fails0, calls0, _ := obs.failed(cns[0].String())
	waitGrants(t, tr, 200)
	close(stop)
	<-done
	tr.check(t, 400, 0.05)
	fails, calls, last := obs.failed(cns[0].String())
	t.Logf("the failed-over node: %d lock calls, %d failed (out of service) until it was recovered; %d calls, %d failed since (last error: %v)",
		calls0, fails0, calls-calls0, fails-fails0, last)
	if limit := max(5, (calls-calls0)/100); fails-fails0 > limit {
		t.Errorf("the recovered node failed %d of %d lock calls, more than %d", fails-fails0, calls-calls0, limit)
	}
}
