package lockcore_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
)

// rwFlaky is a memnode whose readers-writer calls fail while it is down.
type rwFlaky struct {
	*memnode.Node
	down atomic.Bool
}

var errRWDown = errors.New("test: node is down")

func (f *rwFlaky) RWAcquire(ctx context.Context, req lockcore.NodeRWAcquire) (lockcore.NodeReply, error) {
	if f.down.Load() {
		return lockcore.NodeReply{}, errRWDown
	}
	return f.Node.RWAcquire(ctx, req)
}

func (f *rwFlaky) RWRaise(ctx context.Context, name, lease string, token int64) error {
	if f.down.Load() {
		return errRWDown
	}
	return f.Node.RWRaise(ctx, name, lease, token)
}

func (f *rwFlaky) RWExtend(ctx context.Context, name, lease string, ttl time.Duration) (lockcore.NodeReply, error) {
	if f.down.Load() {
		return lockcore.NodeReply{}, errRWDown
	}
	return f.Node.RWExtend(ctx, name, lease, ttl)
}

func (f *rwFlaky) RWRelease(ctx context.Context, name, lease string) (lockcore.NodeReply, error) {
	if f.down.Load() {
		return lockcore.NodeReply{}, errRWDown
	}
	return f.Node.RWRelease(ctx, name, lease)
}

// rwCluster returns a Redlock over n memnodes that can be taken down.
func rwCluster(t *testing.T, n int) (*lockcore.Redlock, []*rwFlaky) {
	t.Helper()
	flaky := make([]*rwFlaky, n)
	nodes := make([]lockcore.Node, n)
	for i := range nodes {
		flaky[i] = &rwFlaky{Node: memnode.New(nil)}
		nodes[i] = flaky[i]
	}
	rl, err := lockcore.New(nodes, &lockcore.Options{CheckInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rl.Close)
	return rl, flaky
}

func mustRW(t *testing.T, rl *lockcore.Redlock, req lockcore.RWAcquireRequest) *lockcore.RWLease {
	t.Helper()
	if req.TTL == 0 {
		req.TTL = time.Minute
	}
	l, err := rl.AcquireRW(context.Background(), req)
	if err != nil {
		t.Fatalf("AcquireRW(%s, exclusive %v): %v", req.Name, req.Exclusive, err)
	}
	return l
}

// Readers share; a writer is refused beside them and beside another
// writer; a refused upgrade changes nothing; the writer gets in once the
// readers have gone.
func TestRWReadersShareAndWritersAreAlone(t *testing.T) {
	ctx := context.Background()
	rl, _ := rwCluster(t, 3)
	r1 := mustRW(t, rl, lockcore.RWAcquireRequest{Name: "doc", Owner: "r1"})
	r2 := mustRW(t, rl, lockcore.RWAcquireRequest{Name: "doc", Owner: "r2"})
	if _, err := rl.AcquireRW(ctx, lockcore.RWAcquireRequest{Name: "doc", Exclusive: true, TTL: time.Minute}); !errors.Is(err, lockcore.ErrTaken) {
		t.Fatalf("writer beside two readers: %v, want ErrTaken", err)
	}
	if _, err := rl.AcquireRW(ctx, lockcore.RWAcquireRequest{Name: "doc", Exclusive: true, LeaseID: r1.ID, TTL: time.Minute}); !errors.Is(err, lockcore.ErrModeHeld) {
		t.Fatalf("upgrade of reader 1: %v, want ErrModeHeld", err)
	}
	info, err := rl.InspectRW(ctx, "doc")
	if err != nil || len(info.Holders) != 2 || info.Holders[0].Token != r1.Token || info.Holders[1].Token != r2.Token || info.Holders[0].Exclusive {
		t.Fatalf("InspectRW: %+v, %v; want the two readers", info, err)
	}
	for _, r := range []*lockcore.RWLease{r1, r2} {
		if err := rl.ReleaseRW(ctx, lockcore.RWReleaseRequest{Name: "doc", LeaseID: r.ID}); err != nil {
			t.Fatal(err)
		}
	}
	w := mustRW(t, rl, lockcore.RWAcquireRequest{Name: "doc", Exclusive: true})
	if _, err := rl.AcquireRW(ctx, lockcore.RWAcquireRequest{Name: "doc", Exclusive: true, TTL: time.Minute}); !errors.Is(err, lockcore.ErrTaken) {
		t.Fatalf("second writer: %v, want ErrTaken", err)
	}
	if _, err := rl.AcquireRW(ctx, lockcore.RWAcquireRequest{Name: "doc", TTL: time.Minute}); !errors.Is(err, lockcore.ErrTaken) {
		t.Fatalf("reader beside a writer: %v, want ErrTaken", err)
	}
	if w.Token <= r2.Token {
		t.Fatalf("writer's token %d, not above the readers' %d and %d", w.Token, r1.Token, r2.Token)
	}
	ext, err := rl.ExtendRW(ctx, lockcore.RWExtendRequest{Name: "doc", LeaseID: w.ID, TTL: 2 * time.Minute})
	if err != nil || ext.Token != w.Token || ext.TTL != 2*time.Minute {
		t.Fatalf("ExtendRW: %+v, %v", ext, err)
	}
	if err := rl.ReleaseRW(ctx, lockcore.RWReleaseRequest{Name: "doc", LeaseID: w.ID}); err != nil {
		t.Fatal(err)
	}
	if err := rl.ReleaseRW(ctx, lockcore.RWReleaseRequest{Name: "doc", LeaseID: w.ID}); !errors.Is(err, lockcore.ErrNotHeld) {
		t.Fatalf("second release: %v, want ErrNotHeld", err)
	}
	if _, err := rl.ExtendRW(ctx, lockcore.RWExtendRequest{Name: "doc", LeaseID: w.ID}); !errors.Is(err, lockcore.ErrNotHeld) {
		t.Fatalf("extend after release: %v, want ErrNotHeld", err)
	}
}

// TestRWAWaitingWriterIsNotStarvedByReaders: readers come one after
// another, each taking the lock before the one before it leaves, so that
// the lock is never free of readers; a writer that waits is still granted
// (rule R4: its mark keeps new readers out, the readers holding leave).
func TestRWAWaitingWriterIsNotStarvedByReaders(t *testing.T) {
	rl, _ := rwCluster(t, 3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := mustRW(t, rl, lockcore.RWAcquireRequest{Name: "feed", TTL: time.Second})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for range 3 { // overlapping readers: each holds 60 ms, a new one every 20 ms
		wg.Go(func() {
			for ctx.Err() == nil {
				l, err := rl.AcquireRW(ctx, lockcore.RWAcquireRequest{Name: "feed", TTL: time.Second, Wait: time.Second})
				if err != nil {
					continue
				}
				time.Sleep(60 * time.Millisecond)
				_ = rl.ReleaseRW(context.Background(), lockcore.RWReleaseRequest{Name: "feed", LeaseID: l.ID})
			}
		})
		time.Sleep(20 * time.Millisecond)
	}
	if err := rl.ReleaseRW(ctx, lockcore.RWReleaseRequest{Name: "feed", LeaseID: first.ID}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	w, err := rl.AcquireRW(ctx, lockcore.RWAcquireRequest{Name: "feed", Exclusive: true, TTL: time.Second, Wait: 3 * time.Second})
	if err != nil {
		t.Fatalf("writer waiting behind a stream of readers, after %v: %v", time.Since(start).Round(time.Millisecond), err)
	}
	t.Logf("writer granted after %v", time.Since(start).Round(time.Millisecond))
	info, err := rl.InspectRW(context.Background(), "feed")
	if err != nil || len(info.Holders) != 1 || !info.Holders[0].Exclusive || info.Holders[0].Token != w.Token {
		t.Fatalf("InspectRW once the writer is granted: %+v, %v; want the writer alone", info, err)
	}
}

// TestRWAWritersTokenIsAboveEveryEarlierHolders: with the nodes' counters
// apart (one node was down for a while), a reader's token comes from one
// node alone; a writer granted later by the two other nodes still gets a
// higher token, because the reader's token was fenced on a quorum (rule
// R3, step 3).
func TestRWAWritersTokenIsAboveEveryEarlierHolders(t *testing.T) {
	rl, n := rwCluster(t, 3)
	var earlier int64
	take := func(name string, exclusive bool) {
		t.Helper()
		l := mustRW(t, rl, lockcore.RWAcquireRequest{Name: name, Exclusive: exclusive})
		if exclusive && l.Token <= earlier {
			t.Fatalf("writer's token %d, not above the earlier holders' highest %d", l.Token, earlier)
		}
		earlier = max(earlier, l.Token)
		if err := rl.ReleaseRW(context.Background(), lockcore.RWReleaseRequest{Name: name, LeaseID: l.ID}); err != nil {
			t.Fatal(err)
		}
	}
	n[2].down.Store(true) // nodes 0 and 1 go ahead
	for range 5 {
		take("ledger", false)
	}
	n[1].down.Store(true) // node 0 answers 6, node 2 answers 1
	n[2].down.Store(false)
	take("ledger", false)
	n[0].down.Store(true) // nodes 1 and 2: 5 and 1, unless the reader's 6 was fenced
	n[1].down.Store(false)
	take("ledger", true)
	take("ledger", false)
	take("ledger", true)
}

// TestRWANodeRestartedEmptyAdmitsNoWriterBesideReaders: a reader holds
// nodes 0 and 1 (node 2 was down); node 0 loses its data and recovers
// from nodes 1 and 2 (step 7). A writer then asks: node 2 never had the
// reader and grants; node 0 must refuse, which it does only because the
// recovery took the reader's hold in (rule R6).
func TestRWANodeRestartedEmptyAdmitsNoWriterBesideReaders(t *testing.T) {
	rl, n := rwCluster(t, 3)
	ctx := context.Background()
	n[2].down.Store(true)
	r := mustRW(t, rl, lockcore.RWAcquireRequest{Name: "table", TTL: time.Minute})
	n[2].down.Store(false)
	n[0].LoseData()
	deadline := time.Now().Add(5 * time.Second)
	for !inServiceAgain(n[0].Node) {
		if time.Now().After(deadline) {
			t.Fatalf("node 0 not recovered: %+v", rl.NodeReports()[0])
		}
		time.Sleep(10 * time.Millisecond)
	}
	w, err := rl.AcquireRW(ctx, lockcore.RWAcquireRequest{Name: "table", Exclusive: true, TTL: time.Minute})
	if err == nil {
		t.Fatalf("writer granted (token %d) beside the live reader (token %d) after node 0 restarted empty", w.Token, r.Token)
	}
	if !errors.Is(err, lockcore.ErrTaken) {
		t.Fatalf("writer beside the reader: %v, want ErrTaken", err)
	}
	if _, err := rl.ExtendRW(ctx, lockcore.RWExtendRequest{Name: "table", LeaseID: r.ID}); err != nil {
		t.Fatalf("the reader extending after the recovery: %v", err)
	}
}

// inServiceAgain reports whether n serves again after a loss.
func inServiceAgain(n *memnode.Node) bool {
	h, err := n.Check(context.Background())
	return err == nil && h.Initialized && !h.Quarantined && !h.Lost
}

// Close ends a readers-writer wait at once with ErrClosed, and a later
// wait fails with it.
func TestRWCloseEndsWaits(t *testing.T) {
	rl, _ := rwCluster(t, 3)
	mustRW(t, rl, lockcore.RWAcquireRequest{Name: "closing"})
	ended := make(chan error, 1)
	go func() {
		_, err := rl.AcquireRW(context.Background(), lockcore.RWAcquireRequest{Name: "closing", Exclusive: true, TTL: time.Minute, Wait: time.Minute})
		ended <- err
	}()
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	rl.Close()
	select {
	case err := <-ended:
		if !errors.Is(err, lockcore.ErrClosed) {
			t.Fatalf("wait ended by Close: %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the wait")
	}
	t.Logf("the wait ended %v after Close began", time.Since(start).Round(time.Millisecond))
	if _, err := rl.AcquireRW(context.Background(), lockcore.RWAcquireRequest{Name: "closing", Exclusive: true, TTL: time.Minute, Wait: time.Second}); !errors.Is(err, lockcore.ErrClosed) {
		t.Fatalf("a wait after Close: %v, want ErrClosed", err)
	}
}

// Readers-writer waits count in Waiting and against MaxWaiters.
func TestRWWaitsCountAgainstMaxWaiters(t *testing.T) {
	nodes := []lockcore.Node{memnode.New(nil)}
	rl, err := lockcore.New(nodes, &lockcore.Options{MaxWaiters: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rl.Close)
	mustRW(t, rl, lockcore.RWAcquireRequest{Name: "busy"})
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan error, 1)
	go func() {
		_, err := rl.AcquireRW(ctx, lockcore.RWAcquireRequest{Name: "busy", Exclusive: true, TTL: time.Minute, Wait: time.Minute})
		ended <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for rl.Waiting() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("Waiting() = %d, want 1", rl.Waiting())
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := rl.AcquireRW(context.Background(), lockcore.RWAcquireRequest{Name: "busy", Exclusive: true, TTL: time.Minute, Wait: time.Second}); !errors.Is(err, lockcore.ErrTooManyWaiters) {
		t.Fatalf("a second waiter beside MaxWaiters 1: %v, want ErrTooManyWaiters", err)
	}
	if _, err := rl.AcquireRW(context.Background(), lockcore.RWAcquireRequest{Name: "free", TTL: time.Minute}); err != nil {
		t.Fatalf("a reader that does not wait: %v", err)
	}
	cancel()
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiter: %v, want context.Canceled", err)
	}
	if n := rl.Waiting(); n != 0 {
		t.Fatalf("Waiting() = %d after the wait ended", n)
	}
}
