package lockcore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
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

// sourceless is an in-memory node whose counters cannot be read while
// fail is set, as a recovery source that answers its checks but not the
// recovery's reads.
type sourceless struct {
	*memnode.Node
	fail *atomic.Bool
}

func (s sourceless) Counters(ctx context.Context) ([]int64, error) {
	if s.fail.Load() {
		return nil, errors.New("counters unreadable")
	}
	return s.Node.Counters(ctx)
}

// TestARecoveryThatFailsSaysWhy: a recovery run under its claim that
// cannot read the sources it needs reports the node as failing to recover,
// with the reason, and is tried again at the guard's interval; a failure
// is not taken for another replica's claim on the recovery.
func TestARecoveryThatFailsSaysWhy(t *testing.T) {
	var fail atomic.Bool
	mems := make([]*memnode.Node, 3)
	nodes := make([]lockcore.Node, 3)
	for i := range mems {
		mems[i] = memnode.New(nil)
		nodes[i] = sourceless{mems[i], &fail}
	}
	rl, err := lockcore.New(nodes, &lockcore.Options{CheckInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rl.Close)
	nodetest.MustAcquire(t, rl, lockcore.AcquireRequest{Resource: "r", TTL: time.Minute})
	fail.Store(true)
	mems[0].LoseData()
	eventually(t, "node 0, whose sources cannot be read, reported failing to recover", func() bool {
		st := rl.NodeReports()[0]
		return st.State == lockcore.NodeUnreachable && strings.Contains(st.Reason, "recovery read 0 of the 2")
	})
	fail.Store(false)
	eventually(t, "node 0 serving once its sources answer", func() bool { return rl.NodeReports()[0].State == lockcore.NodeServing })
}
