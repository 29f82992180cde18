//go:build recoverysize

package redisnode_test

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// recoveryGoal is the longest a recovery of a million held locks may take
// (issue 38).
const recoveryGoal = 30 * time.Second

// TestARecoveryAtSize times the recovery of a node restarted empty while
// the two others hold each of the sizes in LOCKGATE_RECOVERY_SIZE
// (comma-separated lock counts, by default 100000,400000,1000000), and
// fails when one takes longer than recoveryGoal. It is built only with
// -tags recoverysize, and run on purpose (it fills the nodes with
// millions of keys):
//
//	go test -tags recoverysize -count=1 -timeout 30m -v ./lockcore/redisnode -run TestARecoveryAtSize
func TestARecoveryAtSize(t *testing.T) {
	spec := os.Getenv("LOCKGATE_RECOVERY_SIZE")
	if spec == "" {
		spec = "100000,400000,1000000"
	}
	var sizes []int
	for _, f := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			t.Fatalf("LOCKGATE_RECOVERY_SIZE=%q: want comma-separated positive lock counts", spec)
		}
		sizes = append(sizes, n)
	}
	for _, n := range sizes {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			took := recoverSized(t, n, 10*time.Minute)
			t.Logf("%d held locks: back in service %v after an empty restart (load %s)", n, took.Round(time.Millisecond), loadAverage())
			if took > recoveryGoal {
				t.Errorf("%d held locks: recovery took %v, over the %v goal (load %s)", n, took.Round(time.Millisecond), recoveryGoal, loadAverage())
			}
		})
	}
}
