package semaphore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
)

// grantAll grants every permit at once, for a second, and reads nothing.
type grantAll struct{ Locker }

func (grantAll) Acquire(_ context.Context, req lockcore.AcquireRequest) (*lockcore.Lease, error) {
	return &lockcore.Lease{Resource: req.Resource, ID: lockcore.NewLeaseID(), Token: 1, TTL: req.TTL, Validity: time.Second}, nil
}

func (grantAll) Inspect(context.Context, string) (*lockcore.LockInfo, error) {
	return nil, lockcore.ErrNotHeld
}

// Permits left to expire do not grow the count of permits in use without
// bound when InUse is never called (no metrics scrape).
func TestExpiredPermitsAreForgottenWithoutInUse(t *testing.T) {
	now := time.Unix(1e9, 0)
	s := New(grantAll{})
	s.now = func() time.Time { return now }
	for i := range 10 * minPrune {
		if _, err := s.Acquire(context.Background(), AcquireRequest{Name: "n" + strconv.Itoa(i), Permits: 1, TTL: time.Second}); err != nil {
			t.Fatal(err)
		}
		now = now.Add(100 * time.Millisecond) // about 10 permits valid at a time
		s.mu.Lock()
		n := len(s.inUse)
		s.mu.Unlock()
		if n > minPrune {
			t.Fatalf("after %d grants: %d permits tracked, at most 11 valid", i+1, n)
		}
	}
}
