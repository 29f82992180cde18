package lockcore

import (
	"testing"
	"time"
)

// TestARecoveryAdoptsACopyOnceOnlyWhenAnotherCoversIt: a lock read from a
// second source is left out only when a copy adopted before has its
// lease, a token no smaller and an expiry no earlier; any other copy is
// adopted, so the node ends as adopting every copy would leave it (two
// leases: held for neither; the larger token; the later expiry).
func TestARecoveryAdoptsACopyOnceOnlyWhenAnotherCoversIt(t *testing.T) {
	lock := func(lease string, tok int64, remaining time.Duration) HeldLock {
		return HeldLock{Resource: "r", NodeLock: NodeLock{Found: true, Lease: lease, Token: tok, Remaining: remaining}}
	}
	for _, tc := range []struct {
		name  string
		later HeldLock
		after time.Duration // the second read returned this long after the first
		adopt bool
	}{
		{"the same lock read again", lock("l1", 5, 10*time.Second), 10 * time.Millisecond, false},
		{"the same lock read again a moment later", lock("l1", 5, 10*time.Second-300*time.Millisecond), 300 * time.Millisecond, false},
		{"another lease", lock("l2", 5, 10*time.Second), 0, true},
		{"a larger token", lock("l1", 6, 10*time.Second), 0, true},
		{"an expiry later than the copy's, padding included", lock("l1", 5, 10*time.Second+recoverPad), 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTakenIn()
			at := time.Now()
			first := s.fresh(page{locks: []HeldLock{lock("l1", 5, 10*time.Second)}, at: at})
			if len(first) != 1 || first[0].Remaining != 10*time.Second+recoverPad {
				t.Fatalf("first copy: %+v, want it adopted with %v", first, 10*time.Second+recoverPad)
			}
			got := s.fresh(page{locks: []HeldLock{tc.later}, at: at.Add(tc.after)})
			if (len(got) == 1) != tc.adopt {
				t.Fatalf("second copy %+v adopted: %v, want %v", tc.later, len(got) == 1, tc.adopt)
			}
		})
	}
}
