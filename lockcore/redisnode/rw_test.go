package redisnode_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
)

// TestAnEmptyRestartAdmitsNoWriterBesideReaders: a reader holds nodes A
// and B (C lost its copy). A restarts empty and recovers
// from B and C. A writer then asks: C never had the reader and grants it,
// B refuses; A must refuse too, which it does only because its recovery
// took the reader's hold in (rule R6 of lockcore's doc).
func TestAnEmptyRestartAdmitsNoWriterBesideReaders(t *testing.T) {
	srvs := redistest.StartN(t, 3, &redistest.Options{AOF: true})
	a, c := srvs[0], srvs[2]
	opts := recoverOptions()
	opts.MaxTTL = time.Minute
	nodes := make([]lockcore.Node, 3)
	for i, s := range srvs {
		nodes[i] = newNode(t, s)
	}
	rl, err := lockcore.New(nodes, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rl.Close)
	ctx := context.Background()
	r, err := rl.AcquireRW(ctx, lockcore.RWAcquireRequest{Name: "table", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// C loses its copy (as if it had missed the grant): only A and B hold
	// the reader.
	waitUntil(t, "the reader's copy gone from C", func() bool {
		rep, err := newNode(t, c).RWRelease(ctx, "table", r.ID)
		return err == nil && rep.Status == lockcore.StatusOK
	})
	restartEmpty(t, a)
	waitUntil(t, "A back in service", func() bool {
		h := health(t, a)
		return h.Initialized && !h.Lost && !h.Quarantined && h.Refusing == ""
	})
	if v, err := connect(t, a).Client().HExists(ctx, "lockgate:{table}:rw", "r"+r.ID).Result(); err != nil || !v {
		t.Fatalf("A after its recovery keeps the reader's hold: %v (%v), want true", v, err)
	}
	w, err := rl.AcquireRW(ctx, lockcore.RWAcquireRequest{Name: "table", Exclusive: true, TTL: time.Minute})
	if err == nil {
		t.Fatalf("writer granted (token %d) beside the live reader (token %d) after A restarted empty", w.Token, r.Token)
	}
	if !errors.Is(err, lockcore.ErrTaken) {
		t.Fatalf("writer beside the reader: %v, want ErrTaken", err)
	}
	if _, err := rl.ExtendRW(ctx, lockcore.RWExtendRequest{Name: "table", LeaseID: r.ID}); err != nil {
		t.Fatalf("the reader extending after the recovery: %v", err)
	}
}
