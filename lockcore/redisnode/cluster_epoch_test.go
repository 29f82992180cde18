package redisnode_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/redisnode"
)

// clusterSlotsWith counts the slots of a Cluster node whose counter hash
// has field.
func clusterSlotsWith(t *testing.T, n *redisnode.ClusterNode, field string) int {
	t.Helper()
	pipe := n.Client().Pipeline()
	cmds := make([]*redis.BoolCmd, lockcore.FenceSlots)
	for i := range cmds {
		cmds[i] = pipe.HExists(context.Background(), slotKey(i), field)
	}
	if _, err := pipe.Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
	count := 0
	for _, c := range cmds {
		if c.Val() {
			count++
		}
	}
	return count
}

// A Cluster script cannot read the meta hash (another slot), so a Cluster
// node's slots carry their quarantine's epoch themselves (cmark.lua). A
// repair decided on one quarantine, whose slot writes come after another
// gateway quarantined the node again (or after the node lost its data and
// was quarantined again), must change no slot: every slot stays marked
// and the node out of service.
func TestClusterRepairDoesNotServeANodeThatChangedUnderIt(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flush bool
	}{
		{"quarantined again", false},
		{"lost its data and quarantined again", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := redistest.StartCluster(t, 3, 0)
			ctx := context.Background()
			first := newClusterNode(t, c)
			if err := first.Quarantine(ctx); err != nil {
				t.Fatal(err)
			}
			h, err := first.Check(ctx)
			if err != nil || !h.Quarantined {
				t.Fatalf("after Quarantine: %+v, %v", h, err)
			}
			repairer, other := connectCluster(t, c), connectCluster(t, c)
			if _, err := other.Check(ctx); err != nil {
				t.Fatal(err)
			}
			repairer.Client().AddHook(&hooks{pick: slotPipeline, before: func() {
				if tc.flush {
					err := other.Client().ForEachMaster(ctx, func(ctx context.Context, s *redis.Client) error { return s.FlushAll(ctx).Err() })
					if err != nil {
						t.Error(err)
					}
				}
				if err := other.Quarantine(ctx); err != nil {
					t.Error(err)
				}
			}})
			err = repairer.Repair(ctx, make([]int64, lockcore.FenceSlots), h.Epoch)
			if !errors.Is(err, lockcore.ErrNodeChanged) {
				t.Fatalf("Repair after another quarantine: %v, want ErrNodeChanged", err)
			}
			if got := clusterSlotsWith(t, other, "q"); got != lockcore.FenceSlots {
				t.Fatalf("%d slots marked after the repair, want all %d", got, lockcore.FenceSlots)
			}
			h, err = other.Check(ctx)
			if err != nil || !h.Quarantined || h.Lost {
				t.Fatalf("after the repair: %+v, %v; want quarantined, the later quarantine's", h, err)
			}
			// A repair decided on the later quarantine puts it back.
			if err := other.Repair(ctx, make([]int64, lockcore.FenceSlots), h.Epoch); err != nil {
				t.Fatalf("Repair with the later quarantine's epoch: %v", err)
			}
			if got := clusterSlotsWith(t, other, "q"); got != 0 {
				t.Fatalf("%d slots still marked after the later quarantine's repair", got)
			}
		})
	}
}
