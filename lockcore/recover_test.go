package lockcore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
	"github.com/lockgate/lockgate/lockcore/nodetest"
)

// TestARecoveryNeedsAllButAMinorityOfTheOthers: a node that lost its data
// recovers at once only when n − quorum + 1 of the other nodes are in
// service (the package doc, step 7); otherwise it stays quarantined for
// the largest TTL (1 h here). Node 0 loses its data while a lock is held;
// down nodes are unreachable.
func TestARecoveryNeedsAllButAMinorityOfTheOthers(t *testing.T) {
	for _, tc := range []struct {
		nodes, down int
		recovers    bool
	}{
		{3, 0, true},  // both others
		{3, 1, false}, // one other of the two needed
		{5, 1, true},  // three others of the three needed
		{5, 2, false}, // two others of three
	} {
		t.Run(fmt.Sprintf("%d nodes, %d others down", tc.nodes, tc.down), func(t *testing.T) {
			mems := make([]*memnode.Node, tc.nodes)
			nodes := make([]lockcore.Node, tc.nodes)
			var faulty []*nodetest.Faulty
			for i := range nodes {
				mems[i] = memnode.New(nil)
				nodes[i] = mems[i]
				if i >= tc.nodes-tc.down {
					f := nodetest.NewFaulty(mems[i])
					faulty = append(faulty, f)
					nodes[i] = f
				}
			}
			rl, err := lockcore.New(nodes, &lockcore.Options{CheckInterval: 10 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(rl.Close)
			held := nodetest.MustAcquire(t, rl, lockcore.AcquireRequest{Resource: "held", TTL: time.Minute})
			for _, f := range faulty {
				f.SetDown(errors.New("test: node is down"))
			}
			mems[0].LoseData()
			recovered := func() bool {
				l, err := mems[0].Inspect(context.Background(), "held")
				return err == nil && l.Lease == held.ID
			}
			deadline := time.Now().Add(2 * time.Second)
			for !recovered() && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if got := recovered(); got != tc.recovers {
				t.Fatalf("node 0 back in service with the held lock: %v, want %v (%+v)", got, tc.recovers, rl.NodeReports()[0])
			}
			if st := rl.NodeReports()[0]; !tc.recovers && (st.State != lockcore.NodeQuarantined || time.Until(st.Until) < 50*time.Minute) {
				t.Fatalf("node 0: %+v; want quarantined for about an hour", st)
			}
		})
	}
}
