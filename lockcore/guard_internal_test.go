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
		want        nodeAction
	}{
		{"in service: audit if suspected", inService, false, actAudit},
		{"refusing writes: nothing", NodeHealth{Initialized: true, Refusing: "out of memory"}, false, actNone},
		{"never initialized, no mark", NodeHealth{}, false, actQuarantine},
		{"marked for initialization a moment ago", NodeHealth{Initializing: true, InitializingFor: time.Second}, false, actBootWait},
		{"marked for initialization bootGrace ago", NodeHealth{Initializing: true, InitializingFor: bootGrace}, false, actQuarantine},
		{"marked, but lost", NodeHealth{Initializing: true, Lost: true}, false, actQuarantine},
		{"lost", NodeHealth{Initialized: true, Lost: true}, true, actQuarantine},
		{"quarantined long enough", NodeHealth{Initialized: true, Quarantined: true, QuarantinedFor: q}, true, actRepair},
		{"quarantined, recoverable", NodeHealth{Initialized: true, Quarantined: true, QuarantinedFor: time.Second}, true, actRecover},
		{"quarantined, not recoverable", NodeHealth{Initialized: true, Quarantined: true, QuarantinedFor: time.Second}, false, actWait},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := decide(tc.h, q, tc.recoverable); got != tc.want {
				t.Errorf("decide(%+v, recoverable %v) = %d, want %d", tc.h, tc.recoverable, got, tc.want)
			}
		})
	}
}
