package lockcore_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/redisnode"
)

// TestWaitingOnRedis runs the waiting suite again with every cluster node a
// real redis-server (through redisnode, so releases are announced by the
// release script's PUBLISH and heard over pub/sub), three nodes per cluster.
// Each cluster starts from empty servers.
func TestWaitingOnRedis(t *testing.T) {
	servers := redistest.StartN(t, 3, nil)
	saved := newRawNode
	t.Cleanup(func() { newRawNode = saved })
	newRawNode = func(t testing.TB, i int, nodeNow func() time.Time) lockcore.Node {
		if nodeNow != nil {
			t.Fatal("a fake node clock cannot drive redis-server: this test belongs to the in-memory suite only")
		}
		n, err := redisnode.New(servers[i].URL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		if err := n.Client().FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, tc := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"FIFO order", TestWaitersAreServedInArrivalOrder},
		{"wakes on release", TestWaiterWakesOnRelease},
		{"wakes on expiry", TestWaiterWakesOnExpiry},
		{"timeout hint is the TTL left then", TestWaitRunsOutWithTheHoldersRemainingTTLAtThatMoment},
		{"timeout gives TakenError", TestWaitRunsOutWithTakenError},
		{"a waiter that leaves does not block", TestWaiterThatLeavesDoesNotBlockTheQueue},
		{"a caller gone as it acquires leaves no lock", TestWaiterCanceledAsItAcquiresReleasesTheLock},
		{"too many waiters", TestTooManyWaiters},
		{"Close ends waits", TestCloseEndsWaits},
		{"no lost wake-up", TestNoLostWakeup},
		{"no lost wake-up during the attempt", TestNoLostWakeupWhenReleasedDuringTheAttempt},
		{"no spin with a free minority", TestWaiterDoesNotSpinWhileAMinorityIsFree},
		{"no spin across two replicas", TestWaitersOnTwoReplicasDoNotSpinWhileAMinorityIsFree},
		{"a stampede does not stall", TestStampedeOnAFreeLockDoesNotStall},
		{"a holder's retry is answered", TestARetryByTheHolderIsAnsweredNotQueued},
		{"an abandoned retry keeps the lock", TestAHolderWhoseRetryIsAbandonedKeepsItsLock},
		{"a deaf queue recovers", TestAQueueWhoseFirstSubscriptionFailedHearsReleasesLater},
		{"a release hands the lock to the head", TestReleaseHandsTheLockToTheHeadOfTheQueue},
		{"a hand-off's token follows the fencing rule", TestHandOffTokensFollowTheFencingRule},
		{"a hand-off with a minority down", TestHandOffWithAMinorityDown},
		{"a stale release leaves the head waiting", TestAReleaseByALeaseThatHoldsNothingLeavesTheHeadWaiting},
		{"a release through another replica wakes the head", TestAReleaseThroughAnotherReplicaWakesTheHeadInstead},
		{"a refused hand-off lets the head try", TestAHandOffRefusedOnAQuorumLetsTheHeadTry},
		{"no replica starves another", TestAQueueOnOneReplicaDoesNotStarveAnother},
	} {
		t.Run(tc.name, tc.run)
	}
}
