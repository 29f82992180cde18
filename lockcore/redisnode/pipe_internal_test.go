package redisnode

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/internal/redistest"
)

// A worker that takes calls whose context has ended sends the others and
// not those, although the pipeline's deadline (the live call's) would let
// them run: their callers were told the script did not run. Through the
// public methods such a call reaches a worker only in a race with its
// context's end (or, alone, with an idle worker), so this test hands exec a
// batch itself.
func TestAPipelineLeavesOutCallsWhoseContextEnded(t *testing.T) {
	srv := redistest.Start(t, nil)
	n, err := New(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	// The NOSCRIPT fallback (EVAL) of nodes whose scripts are not bound
	// (unprotected: see bound.go).
	n.pipe.evalOnNoScript.Store(true)
	rdb := n.Client()
	set := redis.NewScript(`redis.call("SET", KEYS[1], "ran") return 1`)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond))
	defer cancel()
	live, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	// Each case runs with the script loaded on the server and with the
	// script cache empty (the live calls go through the NOSCRIPT fallback).
	for _, tc := range []struct {
		name    string
		ctx     context.Context
		state   int32
		loaded  bool
		wantErr error
	}{
		{"cancelled", ended, queued, true, context.Canceled},
		{"cancelled, no script", ended, queued, false, context.Canceled},
		{"deadline passed", expired, queued, true, context.DeadlineExceeded},
		{"deadline passed, no script", expired, queued, false, context.DeadlineExceeded},
		{"abandoned by its caller", expired, abandoned, true, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := rdb.FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			if err := rdb.ScriptFlush(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			if tc.loaded {
				if err := set.Load(context.Background(), rdb).Err(); err != nil {
					t.Fatal(err)
				}
			}
			mk := func(ctx context.Context, key string) *call {
				return &call{ctx: ctx, s: set, keys: []string{key}, done: make(chan struct{})}
			}
			before, gone, after := mk(live, "before"), mk(tc.ctx, "gone"), mk(live, "after")
			gone.state.Store(tc.state)
			n.pipe.exec([]*call{before, gone, after}, make([]*redis.Cmd, 0, maxBatch))
			for _, c := range []*call{before, gone, after} {
				select {
				case <-c.done:
				default:
					t.Fatalf("%s: not answered", c.keys[0])
				}
			}
			if !errors.Is(gone.err, tc.wantErr) {
				t.Fatalf("the ended call: %v, %v; want %v", gone.res, gone.err, tc.wantErr)
			}
			for _, c := range []*call{before, after} {
				if c.err != nil || c.res != int64(1) {
					t.Fatalf("%s: %v, %v; want 1", c.keys[0], c.res, c.err)
				}
			}
			got, err := rdb.Exists(context.Background(), "before", "gone", "after").Result()
			if err != nil || got != 2 {
				t.Fatalf("%d of before, gone, after exist (%v); want 2, gone never run", got, err)
			}
		})
	}
}
