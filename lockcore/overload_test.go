package lockcore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
)

// Load that slows every node, not one (a gateway whose CPU is saturated,
// so that every answer waits to be scheduled): with every node answering
// in three times NodeTimeout, acquisitions and releases succeed once the
// node timeout has followed the nodes (after at most two failed
// operations); with the node timeout fixed (MaxNodeTimeout =
// NodeTimeout), every acquisition fails.
func TestSlowNodesSlowCallsRatherThanFailThem(t *testing.T) {
	const nodeTimeout = 50 * time.Millisecond
	tests := []struct {
		name       string
		maxTimeout time.Duration
		adapts     bool
	}{
		{"the node timeout follows the nodes", 0 /* the default: 10 × NodeTimeout */, true},
		{"a fixed node timeout", nodeTimeout, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			c := newCluster(t, 3, &lockcore.Options{NodeTimeout: nodeTimeout, MaxNodeTimeout: tt.maxTimeout,
				MinTTL: 2 * nodeTimeout}, nil)
			for _, n := range c.nodes {
				n.SetDelay(3 * nodeTimeout)
			}
			const pairs = 6
			var outcomes []string
			failed, lastFailed := 0, -1
			for k := range pairs {
				res := fmt.Sprintf("slow-%d", k)
				lease, err := c.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: res, TTL: 5 * time.Second})
				if err == nil {
					err = c.rl.Release(ctx, lockcore.ReleaseRequest{Resource: res, LeaseID: lease.ID})
					if err != nil {
						err = fmt.Errorf("release: %w", err)
					} else if lease.Validity > 5*time.Second-3*nodeTimeout {
						t.Fatalf("validity %v after calls of %v; want the time they took taken off", lease.Validity, 3*nodeTimeout)
					}
				}
				var qe *lockcore.QuorumError
				switch {
				case err == nil:
					outcomes = append(outcomes, "ok")
				case errors.As(err, &qe):
					outcomes = append(outcomes, "failed")
					failed, lastFailed = failed+1, k
				default:
					t.Fatalf("pair %d: %v; want success or a QuorumError", k, err)
				}
			}
			t.Logf("outcomes %v, node timeout now %v", outcomes, c.rl.NodeTimeout())
			if tt.adapts && (failed > 2 || lastFailed >= 2) {
				t.Fatalf("outcomes %v; want at most the first two pairs failed", outcomes)
			}
			if tt.adapts {
				// The bound now lets the slow answers in, but validity
				// stays measured: a TTL shorter than the time the grants
				// took leaves none, and the acquisition fails (its grants
				// undone, as TestValidity checks on a fake clock).
				lease, err := c.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "short", TTL: 2 * nodeTimeout})
				if !errors.Is(err, lockcore.ErrValidityExhausted) {
					t.Fatalf("a %v TTL acquired by %v calls: %+v, %v; want ErrValidityExhausted", 2*nodeTimeout, 3*nodeTimeout, lease, err)
				}
			}
			if !tt.adapts && failed != pairs {
				t.Fatalf("outcomes %v; want every pair failed with a fixed node timeout", outcomes)
			}
		})
	}
}
