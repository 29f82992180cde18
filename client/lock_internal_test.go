package client

import (
	"testing"
	"time"

	"github.com/lockgate/lockgate/api"
)

func TestLockOptionDefaults(t *testing.T) {
	tests := []struct {
		name            string
		in              *LockOptions
		ttl, wantMargin time.Duration
	}{
		{"nil: 30s TTL, margin a tenth", nil, 30 * time.Second, 3 * time.Second},
		{"a 1s TTL", &LockOptions{TTL: time.Second}, time.Second, 100 * time.Millisecond},
		{"a short TTL keeps 20ms", &LockOptions{TTL: 100 * time.Millisecond}, 100 * time.Millisecond, 20 * time.Millisecond},
		{"a long TTL stops at 5s", &LockOptions{TTL: time.Hour}, time.Hour, 5 * time.Second},
		{"a margin of one's own", &LockOptions{TTL: time.Second, Margin: 300 * time.Millisecond}, time.Second, 300 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.in.withDefaults()
			if o.TTL != tt.ttl || o.Margin != tt.wantMargin {
				t.Fatalf("TTL %v margin %v, want %v and %v", o.TTL, o.Margin, tt.ttl, tt.wantMargin)
			}
		})
	}
}

// The first renewal comes a third of the TTL after the request was sent,
// or halfway to the loss deadline when the validity is short; the loss
// deadline is the validity counted from the send, minus the margin.
func TestRenewalAndLossTimes(t *testing.T) {
	sent := time.Unix(1000, 0)
	tests := []struct {
		name                string
		ttl, margin         time.Duration
		validityMs          int64
		wantRenew, wantLoss time.Duration // after sent
	}{
		{"a 1s lock", time.Second, 100 * time.Millisecond, 988, 333333333, 888 * time.Millisecond},
		{"a 30s lock", 30 * time.Second, 3 * time.Second, 29698, 10 * time.Second, 26698 * time.Millisecond},
		{"a validity cut short by a slow acquisition", time.Second, 100 * time.Millisecond, 400, 150 * time.Millisecond, 300 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lease := &Lease{Lease: api.Lease{ValidityMs: tt.validityMs}, Sent: sent}
			l := &Lock{margin: tt.margin}
			if got := renewAt(lease, tt.ttl, tt.margin).Sub(sent); got != tt.wantRenew {
				t.Errorf("renew after %v, want %v", got, tt.wantRenew)
			}
			if got := l.lossAt(lease).Sub(sent); got != tt.wantLoss {
				t.Errorf("loss after %v, want %v", got, tt.wantLoss)
			}
		})
	}
}

func TestJitterStaysWithinAFifth(t *testing.T) {
	for range 1000 {
		if d := jitter(100 * time.Millisecond); d < 80*time.Millisecond || d > 120*time.Millisecond {
			t.Fatalf("jitter(100ms) = %v", d)
		}
	}
}
