package lockcore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
	"github.com/lockgate/lockgate/lockcore/nodetest"
)

// rejoinCluster is three in-memory nodes under a Redlock that checks them
// every 10ms, with a lock held for a minute on all three.
func rejoinCluster(t *testing.T) (*lockcore.Redlock, []*memnode.Node, *lockcore.Lease) {
	t.Helper()
	mems := make([]*memnode.Node, 3)
	nodes := make([]lockcore.Node, 3)
	for i := range mems {
		mems[i] = memnode.New(nil)
		nodes[i] = mems[i]
	}
	rl, err := lockcore.New(nodes, &lockcore.Options{CheckInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rl.Close)
	held := nodetest.MustAcquire(t, rl, lockcore.AcquireRequest{Resource: "held", TTL: time.Minute})
	witnessedAll(t, mems)
	return rl, mems, held
}

// witnessedAll waits until every node's record holds what the guard saw of
// the two others (rule 8's witnesses), and then for a few more passes.
func witnessedAll(t *testing.T, mems []*memnode.Node) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := 0
		for _, m := range mems {
			if h, err := m.Check(context.Background()); err == nil && h.ServedAt > 0 && len(h.Witnessed) == len(mems)-1 {
				n++
			}
		}
		if n == len(mems) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the guard never recorded the nodes' witnesses")
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // a few passes more: every witness moves past a copy taken before
}

// notDurable waits until node i's record says it is not durable: a
// Witness since SetDurable(false) recorded it.
func notDurable(t *testing.T, i int, m *memnode.Node) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for h, _ := m.Check(context.Background()); h.Durable; h, _ = m.Check(context.Background()) {
		if time.Now().After(deadline) {
			t.Fatalf("node %d still durable 5 s after SetDurable(false)", i)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// seenAfterCopy waits until every node other than i witnessed node i
// served later than its record said just after a copy of it was taken.
func seenAfterCopy(t *testing.T, mems []*memnode.Node, i int) {
	t.Helper()
	h, err := mems[i].Check(context.Background())
	if err != nil || h.ID == "" {
		t.Fatalf("node %d: %+v, %v", i, h, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for j, m := range mems {
		for j != i {
			if w, err := m.Check(context.Background()); err == nil && w.Witnessed[h.ID] > h.ServedAt {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d never witnessed node %d served after %d", j, i, h.ServedAt)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// servingAgainWithin waits up to d for every node to serve again since
// the moment since (its state changed after it) and reports whether they
// did.
func servingAgainWithin(rl *lockcore.Redlock, since time.Time, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		all := true
		for _, st := range rl.NodeReports() {
			all = all && st.State == lockcore.NodeServing && st.Since.After(since)
		}
		if all {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

// TestAMajorityRestartOfDurableNodes (rule 8): every node of three
// restarts at once, each with every write it acknowledged (a Redis node on
// appendfsync always). With nodes that are durable the cluster serves
// again within a few checks, the held lock still held and tokens going on
// above it; with nodes that may have lost the tail of their writes
// (everysec) it waits out the quarantine, as before.
func TestAMajorityRestartOfDurableNodes(t *testing.T) {
	for _, durable := range []bool{true, false} {
		t.Run(map[bool]string{true: "durable", false: "not durable"}[durable], func(t *testing.T) {
			rl, mems, held := rejoinCluster(t)
			if !durable {
				for _, m := range mems {
					m.SetDurable(false)
				}
				for i, m := range mems {
					notDurable(t, i, m)
				}
			}
			restarted := time.Now()
			for _, m := range mems {
				m.Restart()
			}
			back := servingAgainWithin(rl, restarted, 2*time.Second)
			if back != durable {
				t.Fatalf("back in service within 2s: %v, want %v (%+v)", back, durable, rl.NodeReports())
			}
			if !durable {
				if st := rl.NodeReports()[0]; st.State != lockcore.NodeQuarantined || time.Until(st.Until) < 50*time.Minute {
					t.Fatalf("node 0: %+v; want quarantined for about an hour", st)
				}
				return
			}
			_, err := rl.Acquire(context.Background(), lockcore.AcquireRequest{Resource: "held", TTL: time.Second})
			if !errors.Is(err, lockcore.ErrTaken) {
				t.Fatalf("acquire of the held lock by another lease after the restart: %v, want ErrTaken", err)
			}
			if err := rl.Release(context.Background(), lockcore.ReleaseRequest{Resource: "held", LeaseID: held.ID}); err != nil {
				t.Fatalf("release by its holder after the restart: %v", err)
			}
			next := nodetest.MustAcquire(t, rl, lockcore.AcquireRequest{Resource: "held", TTL: time.Second})
			if next.Token <= held.Token {
				t.Fatalf("token after the restart %d, not above the one before %d", next.Token, held.Token)
			}
		})
	}
}

// TestARestoreDuringAMajorityRestartIsCaught (rule 8, the witnesses): the
// lock is taken after copies of nodes 0 and 1 were made; then every node
// restarts, 0 and 1 from their copies (restored from copies of one
// moment), and node 2, which kept the lock, on a setting that may lose
// writes, so that it is not whole. Nodes 0 and 1 look whole to
// themselves, but node 2's witnesses show them older than it saw them:
// no recovery after a restart, and no second holder. With the witness
// check off, 0 and 1 recover from each other, and a second lease gets
// the lock.
func TestARestoreDuringAMajorityRestartIsCaught(t *testing.T) {
	for _, check := range []bool{true, false} {
		t.Run(map[bool]string{true: "witnesses checked", false: "witnesses not checked"}[check], func(t *testing.T) {
			lockcore.SetWitnessCheck(check)
			t.Cleanup(func() { lockcore.SetWitnessCheck(true) })
			rl, mems, _ := rejoinCluster(t)
			copies := []*memnode.Copy{mems[0].Snapshot(), mems[1].Snapshot()}
			seenAfterCopy(t, mems, 0)
			seenAfterCopy(t, mems, 1)
			lease := nodetest.MustAcquire(t, rl, lockcore.AcquireRequest{Resource: "after-the-copies", TTL: time.Minute})
			mems[2].SetDurable(false)
			notDurable(t, 2, mems[2])
			mems[0].Restore(copies[0])
			mems[1].Restore(copies[1])
			mems[2].Restart()
			time.Sleep(300 * time.Millisecond) // many passes
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			second, err := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "after-the-copies", TTL: time.Minute})
			if check && err == nil {
				t.Fatalf("a second lease got the lock held by %s: %+v", lease.ID, second)
			}
			if !check && err != nil {
				t.Fatalf("without the witness check the copies recovered from each other, and a second lease should have got the lock; got %v (%+v)", err, rl.NodeReports())
			}
			if check {
				for i, st := range rl.NodeReports()[:2] {
					if st.State != lockcore.NodeQuarantined {
						t.Errorf("node %d: %+v, want quarantined", i, st)
					}
				}
				t.Logf("node 0: %s", rl.NodeReports()[0].Reason)
			}
		})
	}
}

// TestAMajorityRestartIsNeverReportedUnreachable (rule 8): in one pass
// the first node to recover puts itself in service, which ends the
// quarantine the next node's recovery reads it through. That read's
// failure means the source changed, not that the recovering node failed:
// the guard looks again at once, and no node is reported unreachable
// while the cluster comes back.
func TestAMajorityRestartIsNeverReportedUnreachable(t *testing.T) {
	for run := range 5 {
		rl, mems, _ := rejoinCluster(t)
		restarted := time.Now()
		for _, m := range mems {
			m.Restart()
		}
		deadline := time.Now().Add(2 * time.Second)
		for {
			all := true
			for i, st := range rl.NodeReports() {
				if st.State == lockcore.NodeUnreachable {
					t.Fatalf("run %d: node %d reported unreachable during the restart: %+v", run, i, st)
				}
				all = all && st.State == lockcore.NodeServing && st.Since.After(restarted)
			}
			if all {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("run %d: not back in service within 2 s: %+v", run, rl.NodeReports())
			}
			time.Sleep(time.Millisecond)
		}
	}
}
