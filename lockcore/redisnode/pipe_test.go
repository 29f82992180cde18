package redisnode_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/internal/goroutines"
	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/nodetest"
	"github.com/lockgate/lockgate/lockcore/redisnode"
)

// The stack frames the tests look for: a caller in the pipe (waiting or
// sending its own call), a worker.
const (
	inPipe   = "redisnode.(*pipe).do("
	inWorker = "redisnode.(*pipe).work("
)

// initialize puts n in service as newNode does (Check, and Repair on a new
// server).
func initialize(tb testing.TB, n *redisnode.Node) {
	tb.Helper()
	h, err := n.Check(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	if !h.Initialized {
		if err := nodetest.Initialize(context.Background(), n); err != nil {
			tb.Fatal(err)
		}
	}
}

// grantNew acquires resource with a new lease and fails unless it is granted.
func grantNew(ctx context.Context, n *redisnode.Node, resource string) error {
	rep, err := n.Acquire(ctx, lockcore.NodeAcquire{Resource: resource, Lease: lockcore.NewLeaseID(), TTL: time.Minute})
	if err != nil {
		return err
	}
	if rep.Status != lockcore.StatusGranted {
		return fmt.Errorf("%s: %v, want granted", resource, rep.Status)
	}
	return nil
}

// warm loads the scripts and opens the pipe's connections, with rounds of
// concurrent acquisitions and releases.
func warm(t *testing.T, n *redisnode.Node) {
	t.Helper()
	ctx := context.Background()
	err := parallel(3*64, func(i int) error {
		resource := "warm-" + strconv.Itoa(i)
		lease := lockcore.NewLeaseID()
		if _, err := n.Acquire(ctx, lockcore.NodeAcquire{Resource: resource, Lease: lease, TTL: time.Minute}); err != nil {
			return err
		}
		_, err := n.Release(ctx, resource, lease, 0)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitUntil polls cond for up to 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !poll(10*time.Second, cond) {
		t.Fatalf("still not %s after 10 s", what)
	}
}

// poll calls cond until it holds or d has passed, and reports whether it
// held. Tests poll where a call was answered at a quorum and a node may
// still be doing its part.
func poll(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// serverInfo reads an INFO section through rdb.
func serverInfo(t *testing.T, rdb *redis.Client, section string) string {
	t.Helper()
	info, err := rdb.Info(context.Background(), section).Result()
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// commandCalls reads the calls of one command from INFO commandstats (0 when
// it never ran).
func commandCalls(t *testing.T, rdb *redis.Client, cmd string) int64 {
	t.Helper()
	for line := range strings.Lines(serverInfo(t, rdb, "commandstats")) {
		if v, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls="); ok {
			n, err := strconv.ParseInt(v[:strings.IndexByte(v, ',')], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	return 0
}

// many starts one grant per resource, each with a 10 s deadline, and
// returns their errors' channel.
func many(n *redisnode.Node, prefix string, count int) <-chan error {
	errs := make(chan error, count)
	for i := range count {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			errs <- grantNew(ctx, n, prefix+strconv.Itoa(i))
		}()
	}
	return errs
}

// Concurrent calls must share round trips. The server is paused while 64
// calls come in, so that they all wait in the pipe; after it resumes, the
// server must have read their EVALSHAs in a few reads
// (total_reads_processed counts read events): one pipeline is one read, one
// call per round trip would be one read per EVALSHA.
func TestConcurrentCallsSharePipelines(t *testing.T) {
	srv := redistest.Start(t, nil)
	n := newNode(t, srv)
	warm(t, n)
	rdb := n.Client()
	const calls = 64
	evalshas := commandCalls(t, rdb, "evalsha")
	reads := infoField(serverInfo(t, rdb, "stats"), "total_reads_processed")
	srv.Pause()
	errs := many(n, "shared-", calls)
	waitUntil(t, "every call in the pipe", func() bool { return goroutines.Count("", inPipe) == calls })
	srv.Resume()
	for range calls {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	evalshas = commandCalls(t, rdb, "evalsha") - evalshas
	// Less the reads of the two INFO commands.
	reads = infoField(serverInfo(t, rdb, "stats"), "total_reads_processed") - reads - 2
	t.Logf("%d calls: %d EVALSHAs in %d reads", calls, evalshas, reads)
	if evalshas != calls {
		t.Fatalf("the server ran %d EVALSHAs for %d calls", evalshas, calls)
	}
	if reads*4 > evalshas {
		t.Fatalf("%d EVALSHAs came in %d reads: the calls did not share pipelines", evalshas, reads)
	}
}

// Every call ends by its own deadline, whether it waits in the pipe or is in
// flight in a pipeline whose deadline is later, and a call that ends before
// it is sent never runs. The server is paused and every slot is taken by a
// call waiting for it, sent by its own goroutine: the first until 3 s (the
// setting up must end before; it takes well under a second on a quiet
// machine), the others until 10 s.
func TestEveryCallEndsByItsDeadline(t *testing.T) {
	srv := redistest.Start(t, nil)
	n := newNode(t, srv)
	warm(t, n)
	type result struct {
		err  error
		took time.Duration
	}
	call := func(resource string, d time.Duration) <-chan result {
		out := make(chan result, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			start := time.Now()
			err := grantNew(ctx, n, resource)
			out <- result{err, time.Since(start)}
		}()
		return out
	}
	check := func(name string, r result, deadline time.Duration, says string) {
		t.Helper()
		if !errors.Is(r.err, context.DeadlineExceeded) || !strings.Contains(fmt.Sprint(r.err), says) {
			t.Fatalf("%s: %v; want context.DeadlineExceeded, saying %q", name, r.err, says)
		}
		if r.took > deadline+time.Second {
			t.Fatalf("%s: answered after %v, its deadline %v", name, r.took, deadline)
		}
	}

	start := time.Now()
	srv.Pause()
	held := make([]<-chan result, redisnode.PipeWorkers)
	for i := range held {
		d := 10 * time.Second
		if i == 0 {
			d = 3 * time.Second
		}
		held[i] = call("held-"+strconv.Itoa(i), d)
		waitUntil(t, fmt.Sprintf("%d calls waiting for the server", i+1), func() bool {
			return goroutines.Count("[IO wait", inPipe) == i+1
		})
	}

	// No slot is free: this call waits in the pipe until its deadline.
	check("a call in the queue", <-call("queued", 100*time.Millisecond), 100*time.Millisecond, "did not run")

	// These two wait in the pipe for the first slot, which a worker takes
	// when the first call times out, and sends both in one pipeline, with
	// the later deadline (10 s); the earlier caller stops waiting at its
	// own.
	late := call("late", 10*time.Second)
	early := call("early", 4*time.Second)
	waitUntil(t, "two more calls in the pipe", func() bool { return goroutines.Count("", inPipe) == redisnode.PipeWorkers+2 })
	if since := time.Since(start); since > 2700*time.Millisecond {
		t.Fatalf("setting up took %v, past the first call's deadline: the machine is too slow for this test", since)
	}
	check("the first call, in flight", <-held[0], 3*time.Second, "")
	check("a call in flight with a later one", <-early, 4*time.Second, "may have run")
	select {
	case r := <-late:
		t.Fatalf("the later call ended with the earlier: %v", r.err)
	default:
	}

	srv.Resume()
	rest := map[string]<-chan result{"late": late}
	for i, ch := range held[1:] {
		rest["held-"+strconv.Itoa(i+1)] = ch
	}
	for name, ch := range rest {
		if r := <-ch; r.err != nil {
			t.Fatalf("%s, answered once the server resumed: %v", name, r.err)
		}
	}
	if lk, err := n.Inspect(context.Background(), "queued"); err != nil || lk.Found {
		t.Fatalf("the call that ended in the queue: %+v, %v; it must not have run", lk, err)
	}
}

// A NOSCRIPT reply means the script did not run. A protected node's lock
// scripts are bound to the processes its checks judged (bound.go), so
// after SCRIPT FLUSH its calls, sent alone or pipelined, run nothing and
// fail as out of service (no EVAL is sent), until a Check loads the
// scripts again. With the server paused, every slot is taken by an
// Inspect and 28 acquisitions wait in the pipe, so that both paths meet
// NOSCRIPT when it resumes.
func TestAFlushedScriptCacheStopsTheNodeUntilACheck(t *testing.T) {
	srv := redistest.Start(t, nil)
	n := newNode(t, srv)
	warm(t, n)
	rdb := n.Client()
	ctx := context.Background()
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	evals := commandCalls(t, rdb, "eval")
	srv.Pause()
	inspects := make(chan error, redisnode.PipeWorkers)
	for i := range redisnode.PipeWorkers {
		go func() {
			_, err := n.Inspect(ctx, "flushed-inspect")
			inspects <- err
		}()
		waitUntil(t, fmt.Sprintf("%d Inspects waiting for the server", i+1), func() bool {
			return goroutines.Count("[IO wait", inPipe) == i+1
		})
	}
	const calls = 28
	errs := many(n, "flushed-", calls)
	waitUntil(t, "every call in the pipe", func() bool { return goroutines.Count("", inPipe) == redisnode.PipeWorkers+calls })
	srv.Resume()
	for range redisnode.PipeWorkers {
		if err := <-inspects; !errors.Is(err, lockcore.ErrQuarantined) {
			t.Fatalf("inspect after SCRIPT FLUSH: %v, want ErrQuarantined", err)
		}
	}
	for range calls {
		if err := <-errs; !errors.Is(err, lockcore.ErrQuarantined) {
			t.Fatalf("acquire after SCRIPT FLUSH: %v, want ErrQuarantined", err)
		}
	}
	if got := commandCalls(t, rdb, "eval") - evals; got != 0 {
		t.Fatalf("%d EVALs after SCRIPT FLUSH: a script ran on a process no check bound it to", got)
	}
	if keys := rdb.Keys(ctx, "lockgate:{flushed-*}:lock").Val(); len(keys) != 0 {
		t.Fatalf("locks taken after SCRIPT FLUSH: %v", keys)
	}
	if _, err := n.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if err := grantNew(ctx, n, "flushed-after"); err != nil {
		t.Fatalf("after a Check: %v", err)
	}
}

// Close stops the pipe's workers, also with calls in flight to a paused
// server and calls waiting in the pipe behind them, which all fail at once;
// later calls fail with redis.ErrClosed, and no goroutine is left.
func TestCloseStopsThePipe(t *testing.T) {
	srv := redistest.Start(t, nil)
	base := runtime.NumGoroutine()
	n, err := redisnode.New(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	initialize(t, n)
	ctx := context.Background()
	if err := grantNew(ctx, n, "before"); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	const calls = redisnode.PipeWorkers + 2
	errs := make(chan error, calls)
	for i := range calls {
		go func() { errs <- grantNew(ctx, n, "pending-"+strconv.Itoa(i)) }() // no deadline
	}
	waitUntil(t, "every call in the pipe", func() bool {
		return goroutines.Count("", inPipe) == calls && goroutines.Count("[IO wait", inPipe) == redisnode.PipeWorkers
	})
	closed := make(chan struct{})
	go func() {
		n.Close()
		close(closed)
	}()
	timeout := time.After(time.Second)
	select {
	case <-closed:
	case <-timeout:
		t.Fatal("Close still waits a second later, with calls in flight")
	}
	for range calls {
		select {
		case err := <-errs:
			if err == nil {
				t.Fatal("a pending call succeeded on a closed node")
			}
		case <-timeout:
			t.Fatal("pending calls still wait a second after Close")
		}
	}
	if err := grantNew(ctx, n, "after"); !errors.Is(err, redis.ErrClosed) {
		t.Fatalf("a call after Close: %v, want redis.ErrClosed", err)
	}
	srv.Resume()
	waitUntil(t, "every worker gone", func() bool { return goroutines.Count("", inWorker) == 0 })
	waitUntil(t, fmt.Sprintf("back to %d goroutines", base), func() bool { return runtime.NumGoroutine() <= base })
}

// variants are the nodes the benchmarks compare: through the pipe, and
// directly (one pooled connection per call in flight, as before the pipe).
var variants = []struct {
	name string
	open func(string) (*redisnode.Node, error)
}{{"pipe", redisnode.New}, {"direct", redisnode.NewDirect}}

// benchNode opens a node of the variant on srv, in service, closed when b
// ends.
func benchNode(b *testing.B, srv *redistest.Server, open func(string) (*redisnode.Node, error)) *redisnode.Node {
	b.Helper()
	n, err := open(srv.URL())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { n.Close() })
	initialize(b, n)
	return n
}

// cycleOnce acquires and releases req's resource once, each call with a 1 s
// deadline, as lockcore gives each.
func cycleOnce(n *redisnode.Node, req lockcore.NodeAcquire) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	rep, err := n.Acquire(ctx, req)
	if err == nil && rep.Status == lockcore.StatusGranted {
		rep, err = n.Release(ctx, req.Resource, req.Lease, 0)
	}
	if err == nil && rep.Status != lockcore.StatusOK {
		err = fmt.Errorf("%s: %v", req.Resource, rep.Status)
	}
	return err
}

// BenchmarkAcquireReleaseParallel acquires and releases, 16 goroutines per
// CPU each on its own resource, on one redis-server, through the pipe and
// directly.
func BenchmarkAcquireReleaseParallel(b *testing.B) {
	srv := redistest.Start(b, nil)
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			n := benchNode(b, srv, v.open)
			var seq atomic.Int64
			b.SetParallelism(16)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				req := lockcore.NodeAcquire{Resource: "bench-" + strconv.FormatInt(seq.Add(1), 10),
					Lease: lockcore.NewLeaseID(), TTL: time.Minute}
				for pb.Next() {
					if err := cycleOnce(n, req); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkAcquireRelease is BenchmarkAcquireReleaseParallel with one
// goroutine: what the pipe costs a call that is alone.
func BenchmarkAcquireRelease(b *testing.B) {
	srv := redistest.Start(b, nil)
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			n := benchNode(b, srv, v.open)
			req := lockcore.NodeAcquire{Resource: "bench", Lease: lockcore.NewLeaseID(), TTL: time.Minute}
			b.ReportAllocs()
			for b.Loop() {
				if err := cycleOnce(n, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
