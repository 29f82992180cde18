package nodetest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
	"github.com/lockgate/lockgate/lockcore/nodetest"
)

// With no fault set, a Faulty is a node like the one it wraps.
func TestFaultyIsTransparent(t *testing.T) {
	nodetest.Run(t, func(t *testing.T) lockcore.Node { return nodetest.NewFaulty(memnode.New(nil)) })
}

func TestFaultyFaults(t *testing.T) {
	ctx := context.Background()
	req := lockcore.NodeAcquire{Resource: "r", Lease: "lease-A-0123456789", TTL: time.Minute}
	errOff := errors.New("off")

	t.Run("down fails every call with the error set, and up again", func(t *testing.T) {
		raw := memnode.New(nil)
		f := nodetest.NewFaulty(raw)
		f.SetDown(errOff)
		calls := map[string]func() error{
			"acquire": func() error { _, err := f.Acquire(ctx, req); return err },
			"extend":  func() error { _, err := f.Extend(ctx, "r", req.Lease, 0, 0); return err },
			"release": func() error { _, err := f.Release(ctx, "r", req.Lease, 0); return err },
			"fence":   func() error { return f.RaiseFence(ctx, "r", req.Lease, 5) },
			"inspect": func() error { _, err := f.Inspect(ctx, "r"); return err },
			"ping":    func() error { return f.Ping(ctx) },
			"watch":   func() error { _, err := f.Watch(ctx, "r", func() {}); return err },
		}
		for name, call := range calls {
			if err := call(); !errors.Is(err, errOff) {
				t.Errorf("%s while down: err = %v, want %v", name, err, errOff)
			}
		}
		if l, _ := raw.Inspect(ctx, "r"); l.Found {
			t.Fatalf("a call while down reached the node: %+v", l)
		}
		f.SetDown(nil)
		if rep, err := f.Acquire(ctx, req); err != nil || rep.Status != lockcore.StatusGranted {
			t.Fatalf("acquire once up: %+v, %v", rep, err)
		}
		if got := f.Acquires(); got != 2 {
			t.Fatalf("Acquires() = %d, want 2 (failed calls count too)", got)
		}
	})

	t.Run("hang blocks until the context ends", func(t *testing.T) {
		f := nodetest.NewFaulty(memnode.New(nil))
		f.SetHang(true)
		cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		if err := f.Ping(cctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("ping while hanging: %v, want DeadlineExceeded", err)
		}
	})

	t.Run("delay holds every call back", func(t *testing.T) {
		f := nodetest.NewFaulty(memnode.New(nil))
		f.SetDelay(30 * time.Millisecond)
		start := time.Now()
		if err := f.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < 30*time.Millisecond {
			t.Fatalf("ping answered after %v, want ≥ 30ms", d)
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
		defer cancel()
		if err := f.Ping(cctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("ping with a shorter deadline than the delay: %v", err)
		}
	})

	t.Run("late grant acquires on the node but loses the reply", func(t *testing.T) {
		raw := memnode.New(nil)
		f := nodetest.NewFaulty(raw)
		f.SetLateGrant(true)
		cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		if _, err := f.Acquire(cctx, req); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("late grant: err = %v, want DeadlineExceeded", err)
		}
		if l, _ := raw.Inspect(ctx, "r"); !l.Found || l.Lease != req.Lease {
			t.Fatalf("late grant did not reach the node: %+v", l)
		}
	})

	t.Run("acquire hooks run before the faults and after a reply", func(t *testing.T) {
		f := nodetest.NewFaulty(memnode.New(nil))
		var before, after int
		var got lockcore.NodeReply
		f.SetBeforeAcquire(func(r lockcore.NodeAcquire) {
			if r != req {
				t.Errorf("before hook got %+v", r)
			}
			before++
		})
		f.SetAfterAcquire(func(_ lockcore.NodeAcquire, rep lockcore.NodeReply) { after++; got = rep })
		f.SetDown(errOff)
		f.Acquire(ctx, req)
		if before != 1 || after != 0 {
			t.Fatalf("while down: before %d after %d, want 1 and 0", before, after)
		}
		f.SetDown(nil)
		rep, err := f.Acquire(ctx, req)
		if err != nil || before != 2 || after != 1 || got != rep {
			t.Fatalf("up: before %d after %d (hook saw %+v, reply %+v, %v)", before, after, got, rep, err)
		}
		f.SetBeforeAcquire(nil)
		f.SetAfterAcquire(nil)
		f.Acquire(ctx, req)
		if before != 2 || after != 1 {
			t.Fatal("hooks still ran after being removed")
		}
	})

	t.Run("watch delegates, or fails when the node is no watcher", func(t *testing.T) {
		f := nodetest.NewFaulty(memnode.New(nil))
		heard := make(chan struct{}, 1)
		stop, err := f.Watch(ctx, "r", func() { heard <- struct{}{} })
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		f.Acquire(ctx, req)
		f.Release(ctx, "r", req.Lease, 0)
		select {
		case <-heard:
		case <-time.After(2 * time.Second):
			t.Fatal("release not announced through the wrapper")
		}
		plain := nodetest.NewFaulty(struct{ lockcore.Node }{memnode.New(nil)})
		if _, err := plain.Watch(ctx, "r", func() {}); !errors.Is(err, nodetest.ErrNotWatcher) {
			t.Fatalf("watch of a non-watcher: %v, want ErrNotWatcher", err)
		}
	})
}
