package lockcore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
)

// A permit's lock name is accepted by the lock operations only in its one
// form, is no resource name, and is not listed among locks.
func TestPermitResourceNames(t *testing.T) {
	rl := threeNodes()
	defer rl.Close()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{lockcore.PermitResource("jobs", 0), true},
		{lockcore.PermitResource("jobs", lockcore.MaxPermits-1), true},
		{"jobs/" + "64", false},
		{"jobs/01", false},
		{"jobs/+1", false},
		{"jobs/-1", false},
		{"jobs/", false},
		{"/1", false},
		{"jobs/1/2", false},
		{"jo bs/1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if lockcore.ValidResource(tc.name) {
				t.Fatalf("%q is a valid resource name: a lock could share it", tc.name)
			}
			_, err := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: tc.name, TTL: time.Second})
			if tc.ok != (err == nil) || !tc.ok && !errors.Is(err, lockcore.ErrInvalid) {
				t.Fatalf("acquire %q: %v, want ok=%v", tc.name, err, tc.ok)
			}
		})
	}
	page, err := rl.List(ctx, "jobs", 100, "")
	if err != nil || len(page.Locks) != 0 {
		t.Fatalf("listing with permits held: %+v, %v", page, err)
	}
}
