package lockcore

import (
	"testing"
	"time"
)

// TestDecide is the guard's rule for one node that answered its check.
func TestDecide(t *testing.T) {
	const q = time.Hour // how long a quarantine lasts
	inService := NodeHealth{Initialized: true}
	for _, tc := range []struct {
		name        string
		h           NodeHealth
		recoverable bool
		rejoinable  bool
		want        nodeAction
	}{
		{"in service: audit if suspected", inService, false, false, actAudit},
		{"refusing writes: nothing", NodeHealth{Initialized: true, Refusing: "out of memory"}, false, false, actNone},
		{"never initialized, no mark", NodeHealth{}, false, false, actQuarantine},
		{"marked for initialization a moment ago", NodeHealth{Initializing: true, InitializingFor: time.Second}, false, false, actBootWait},
		{"marked for initialization bootGrace ago", NodeHealth{Initializing: true, InitializingFor: bootGrace}, false, false, actQuarantine},
		{"marked, but lost", NodeHealth{Initializing: true, Lost: true}, false, false, actQuarantine},
		{"lost", NodeHealth{Initialized: true, Lost: true}, true, false, actQuarantine},
		{"quarantined long enough", NodeHealth{Initialized: true, Quarantined: true, QuarantinedFor: q}, true, false, actRepair},
		{"quarantined, recoverable", NodeHealth{Initialized: true, Quarantined: true, QuarantinedFor: time.Second}, true, false, actRecover},
		{"quarantined, not recoverable", NodeHealth{Initialized: true, Quarantined: true, QuarantinedFor: time.Second}, false, false, actWait},
		{"quarantined after a restart, whole with a quorum", NodeHealth{Initialized: true, Quarantined: true, Durable: true}, false, true, actRejoin},
		{"quarantined, recoverable from the nodes in service first", NodeHealth{Initialized: true, Quarantined: true, Durable: true}, true, true, actRecover},
		{"quarantined long enough, whole too", NodeHealth{Initialized: true, Quarantined: true, QuarantinedFor: q, Durable: true}, false, true, actRepair},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := decide(tc.h, q, tc.recoverable, tc.rejoinable); got != tc.want {
				t.Errorf("decide(%+v, recoverable %v, rejoinable %v) = %d, want %d", tc.h, tc.recoverable, tc.rejoinable, got, tc.want)
			}
		})
	}
}

// A node that lost data stays out longer than any lock it held can have
// lived on: the longest TTL, its drift allowance and the longest a node
// call can last, MaxNodeTimeout (the node timeout of the moment may have
// been raised to it), not NodeTimeout.
func TestTheQuarantineOutlastsTheLongestNodeCall(t *testing.T) {
	r := &Redlock{opt: (&Options{NodeTimeout: 50 * time.Millisecond, MaxTTL: time.Minute}).withDefaults()}
	want := time.Minute + r.drift(time.Minute) + 500*time.Millisecond
	if got := r.quarantine(); got != want {
		t.Fatalf("quarantine %v, want %v (MaxTTL, drift and MaxNodeTimeout)", got, want)
	}
}
