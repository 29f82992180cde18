package redisnode

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
)

// reviewCounter counts a watch's notifications.
type reviewCounter struct{ n atomic.Int64 }

func (c *reviewCounter) notify() { c.n.Add(1) }

func (c *reviewCounter) waitAbove(n int64, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if c.n.Load() > n {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

// reviewNames returns k resources of k different slots that p serves.
func reviewNames(c *redistest.Cluster, p *redistest.Server, prefix string, k int) []string {
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

// shardHubOf returns the router's hub of the primary at addr.
func shardHubOf(t *testing.T, n *ClusterNode, addr string) *shardHub {
	t.Helper()
	r := n.getRouter()
	r.mu.Lock()
	defer r.mu.Unlock()
	sh := r.hubs[addr]
	if sh == nil {
		t.Fatalf("no hub for %s", addr)
	}
	return sh
}

// A re-subscription made after a reconnect (reconnected) whose SSUBSCRIBE
// could not be written fails (hub.subscribe); that is what a second
// outage right after the reconnect leaves (the send goroutine's conn()
// finds the server gone). The next reconnect must subscribe the channel
// again and notify its watches: go-redis's own re-subscription of every
// channel in one SSUBSCRIBE is refused (CROSSSLOT) for channels of several
// slots, so nothing else will.
func TestClusterFailedResubscribeIsRetriedOnReconnect(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	n, err := NewCluster(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	p := c.Primaries()[1]
	names := reviewNames(c, p, "refail", 2)
	var counters []*reviewCounter
	for _, r := range names {
		var w reviewCounter
		stop, err := n.Watch(context.Background(), r, w.notify)
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		counters = append(counters, &w)
	}
	h := shardHubOf(t, n, p.Addr()).h.Load()
	channel := releasedKey(names[0])
	// The state hub.subscribe leaves when the write of a renotify
	// SUBSCRIBE fails.
	h.mu.Lock()
	hc := h.chans[channel]
	s := &hubSub{marker: "lockgate:hub:failed:" + channel, done: make(chan struct{}), renotify: true,
		channel: channel, sent: true, err: errors.New("dial tcp: connection refused")}
	close(s.done)
	hc.sub = s
	h.mu.Unlock()

	if _, err := p.Do("CLIENT", "KILL", "TYPE", "pubsub"); err != nil {
		t.Fatal(err)
	}
	if !counters[1].waitAbove(0, 10*time.Second) {
		t.Fatal("control: the other watch was not notified after the reconnect")
	}
	if !counters[0].waitAbove(0, 5*time.Second) {
		t.Error("the watch whose re-subscription had failed was not notified after the next reconnect")
	}
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	defer rdb.Close()
	before := counters[0].n.Load()
	if err := rdb.SPublish(context.Background(), channel, "1").Err(); err != nil {
		t.Fatal(err)
	}
	if !counters[0].waitAbove(before, 3*time.Second) {
		t.Fatal("an announcement after the reconnect was not heard: the watch is subscribed nowhere")
	}
}
