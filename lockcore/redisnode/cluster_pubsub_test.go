package redisnode_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
)

// counter is a watch's notify that counts.
type counter struct{ n atomic.Int64 }

func (c *counter) notify() { c.n.Add(1) }

// waitAbove waits up to limit for more than n notifications and reports
// whether they came.
func (c *counter) waitAbove(n int64, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if c.n.Load() > n {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

// take acquires resource for lease on n, failing t otherwise.
func take(t *testing.T, n lockcore.Node, resource, lease string) int64 {
	t.Helper()
	rep, err := n.Acquire(context.Background(), lockcore.NodeAcquire{Resource: resource, Lease: lease, TTL: time.Minute})
	if err != nil || rep.Status != lockcore.StatusGranted {
		t.Fatalf("acquire %s: %+v, %v", resource, rep, err)
	}
	return rep.Token
}

// give releases resource for lease on n, failing t otherwise.
func give(t *testing.T, n lockcore.Node, resource, lease string) {
	t.Helper()
	rep, err := n.Release(context.Background(), resource, lease, 0)
	if err != nil || rep.Status != lockcore.StatusOK {
		t.Fatalf("release %s: %+v, %v", resource, rep, err)
	}
}

// rawSubscribe subscribes a client of its own to channel on the server at
// addr, sharded or not, and counts what it hears.
func rawSubscribe(t *testing.T, addr, channel string, sharded bool) *counter {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	var ps *redis.PubSub
	if sharded {
		ps = rdb.SSubscribe(context.Background(), channel)
	} else {
		ps = rdb.Subscribe(context.Background(), channel)
	}
	if _, err := ps.Receive(context.Background()); err != nil {
		t.Fatal(err)
	}
	var c counter
	go func() {
		for range ps.Channel() {
			c.notify()
		}
	}()
	t.Cleanup(func() { ps.Close() })
	return &c
}

// On Redis 7 a Cluster node's release is published with SPUBLISH: it is
// heard on the shard that owns the lock's slot and nowhere else, and a
// Watch hears it. The broadcast control (as on Redis 6) is heard by a
// plain subscriber of another shard: that is what the sharded mode stops.
func TestClusterAnnouncesOnTheLocksShard(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	for _, tc := range []struct {
		name      string
		broadcast bool
	}{{"sharded", false}, {"broadcast", true}} {
		t.Run(tc.name, func(t *testing.T) {
			n := connectCluster(t, c)
			if tc.broadcast {
				n.UseBroadcast()
			}
			n = checked(t, n)
			r := "announce-" + tc.name
			owner := c.OwnerOf(lockcore.FenceSlot(r))
			var other *redistest.Server
			for _, p := range c.Primaries() {
				if p != owner {
					other = p
				}
			}
			channel := "lockgate:{" + r + "}:released"
			onOwner := rawSubscribe(t, owner.Addr(), channel, !tc.broadcast)
			onOther := rawSubscribe(t, other.Addr(), channel, false)
			var watched counter
			stop, err := n.Watch(context.Background(), r, watched.notify)
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			take(t, n, r, "lease-announce-0123456789")
			give(t, n, r, "lease-announce-0123456789")
			if !watched.waitAbove(0, 2*time.Second) || !onOwner.waitAbove(0, 2*time.Second) {
				t.Fatalf("release not heard: watch %d, owner's subscriber %d", watched.n.Load(), onOwner.n.Load())
			}
			heard := onOther.waitAbove(0, 300*time.Millisecond)
			if heard != tc.broadcast {
				t.Fatalf("a plain subscriber on another shard heard the release: %v, want %v", heard, tc.broadcast)
			}
		})
	}
}

// holdAndWatch takes each of names for lease on n and watches it until t
// ends, with a counter per name.
func holdAndWatch(t *testing.T, n lockcore.Node, names []string, lease string) []*counter {
	t.Helper()
	var counters []*counter
	for _, r := range names {
		take(t, n, r, lease)
		var w counter
		stop, err := n.(lockcore.Watcher).Watch(context.Background(), r, w.notify)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
		counters = append(counters, &w)
	}
	return counters
}

// namesOn returns k resource names, of k different slots, that the
// primary p serves.
func namesOn(c *redistest.Cluster, p *redistest.Server, prefix string, k int) []string {
	var out []string
	seen := map[int]bool{}
	for i := 0; len(out) < k; i++ {
		r := fmt.Sprintf("%s-%d", prefix, i)
		slot := lockcore.FenceSlot(r)
		if !seen[slot] && c.OwnerOf(slot) == p {
			seen[slot] = true
			out = append(out, r)
		}
	}
	return out
}

// A watch whose slot moves to another shard (a reshard) follows it: the
// old primary ends the subscription, the watch subscribes on the new one
// and is notified once it has, and a release after the move is heard.
// The slot then moves back and the same holds. Without the move (the
// hub's lost callback off) the watch is never notified.
func TestClusterWatchFollowsItsSlot(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	n := newClusterNode(t, c)
	src := c.Primaries()[0]
	dst := c.Primaries()[1]
	names := namesOn(c, src, "follow", 4)
	counters := holdAndWatch(t, n, names, "lease-follow-0123456789")
	moved := names[0]
	if err := c.MoveSlot(lockcore.FenceSlot(moved), src, dst, 0); err != nil {
		t.Fatal(err)
	}
	if !counters[0].waitAbove(0, 5*time.Second) {
		t.Fatal("the watch of the moved slot was not notified once subscribed on the new primary")
	}
	for i, r := range names {
		before := counters[i].n.Load()
		give(t, n, r, "lease-follow-0123456789")
		if !counters[i].waitAbove(before, 3*time.Second) {
			t.Fatalf("release of %s (moved: %v) not heard", r, r == moved)
		}
	}
	// And back: the first primary subscribes it afresh.
	take(t, n, moved, "lease-follow-0123456789")
	before := counters[0].n.Load()
	if err := c.MoveSlot(lockcore.FenceSlot(moved), dst, src, 0); err != nil {
		t.Fatal(err)
	}
	if !counters[0].waitAbove(before, 5*time.Second) {
		t.Fatal("the watch of the slot moved back was not notified once subscribed again")
	}
	before = counters[0].n.Load()
	give(t, n, moved, "lease-follow-0123456789")
	if !counters[0].waitAbove(before, 3*time.Second) {
		t.Fatal("release after the slot moved back not heard")
	}
}

// A pub/sub connection lost with watches of several slots on it is made
// again by go-redis, which subscribes every channel again in one
// SSUBSCRIBE; a Cluster refuses that (CROSSSLOT). The hub subscribes
// them again slot by slot, notifies each watch once it has, and releases
// after that are heard. Without it (reconnected off) none is.
func TestClusterWatchesSurviveAPubSubReconnect(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	n := newClusterNode(t, c)
	p := c.Primaries()[2]
	names := namesOn(c, p, "reconnect", 5)
	counters := holdAndWatch(t, n, names, "lease-reconnect-0123456789")
	if _, err := p.Do("CLIENT", "KILL", "TYPE", "pubsub"); err != nil {
		t.Fatal(err)
	}
	for i, r := range names {
		if !counters[i].waitAbove(0, 10*time.Second) {
			t.Fatalf("watch of %s not notified after the reconnect", r)
		}
	}
	for i, r := range names {
		before := counters[i].n.Load()
		give(t, n, r, "lease-reconnect-0123456789")
		if !counters[i].waitAbove(before, 3*time.Second) {
			t.Fatalf("release of %s after the reconnect not heard", r)
		}
	}
}

// A shard's primary killed and its replica promoted: the next Check finds
// the slot served by the new primary and the watch moves there, so an
// announcement on the new primary is heard. Without reconcile it is not:
// the watch waits on the dead primary's connection.
func TestClusterWatchFollowsAFailover(t *testing.T) {
	c := redistest.StartCluster(t, 3, 1)
	n := newClusterNode(t, c)
	r := "failover-watch"
	slot := lockcore.FenceSlot(r)
	old := c.OwnerOf(slot)
	var w counter
	stop, err := n.Watch(context.Background(), r, w.notify)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	c.KillAndPromote(old, c.ReplicaOf(old))
	if _, err := n.Check(context.Background()); err != nil {
		t.Logf("check after the failover: %v", err)
	}
	if !w.waitAbove(0, 10*time.Second) {
		t.Fatal("watch not notified once subscribed on the promoted primary")
	}
	rdb := redis.NewClient(&redis.Options{Addr: c.OwnerOf(slot).Addr()})
	defer rdb.Close()
	before := w.n.Load()
	if err := rdb.SPublish(context.Background(), "lockgate:{"+r+"}:released", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if !w.waitAbove(before, 3*time.Second) {
		t.Fatal("announcement on the promoted primary not heard")
	}
}
