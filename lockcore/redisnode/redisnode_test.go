package redisnode_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/nodetest"
	"github.com/lockgate/lockgate/lockcore/redisnode"
)

// newNode connects a Node to srv, puts it in service (initializing a new
// server, as lockcore does for a new cluster) and closes it when t ends.
func newNode(t testing.TB, srv *redistest.Server) *redisnode.Node {
	t.Helper()
	n := connect(t, srv)
	h, err := n.Check(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !h.Initialized {
		if err := nodetest.Initialize(context.Background(), n); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// connect connects a Node to srv, as it is, and closes it when t ends.
func connect(t testing.TB, srv *redistest.Server) *redisnode.Node {
	t.Helper()
	return connectURL(t, srv.URL())
}

// connectURL connects a Node to the server at url and closes it when t
// ends.
func connectURL(t testing.TB, url string) *redisnode.Node {
	t.Helper()
	n, err := redisnode.New(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

func TestConformance(t *testing.T) {
	srv := redistest.Start(t, nil)
	nodetest.Run(t, func(t *testing.T) lockcore.Node { return connect(t, srv) })
}

func TestDataLoss(t *testing.T) {
	srv := redistest.Start(t, nil)
	nodetest.RunDataLoss(t, func(t *testing.T) lockcore.Node { return connect(t, srv) },
		func(t *testing.T, n lockcore.Node) {
			if err := n.(*redisnode.Node).Client().FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
		})
}

func TestRWConformance(t *testing.T) {
	srv := redistest.Start(t, nil)
	nodetest.RunRW(t, func(t *testing.T) lockcore.Node { return connect(t, srv) },
		func(t *testing.T, n lockcore.Node) {
			if err := n.(*redisnode.Node).Client().FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
		})
}

// A node whose server is gone (its host still up) refuses connections: that
// is an answer, and it must come at once, not after a retry back-off, or a
// dead minority node would slow every acquisition down (it did: 10 to 30 ms
// per call, go-redis's default back-off before its one retry). The fastest of
// twenty calls must stay under 8 ms, below the back-off's least 10 ms; a
// loaded machine is unlikely to be that slow for twenty calls in a row.
func TestADeadNodeAnswersAtOnce(t *testing.T) {
	srv := redistest.Start(t, nil)
	n := newNode(t, srv)
	ctx := context.Background()
	req := lockcore.NodeAcquire{Resource: "dead", Lease: lockcore.NewLeaseID(), TTL: time.Second}
	if _, err := n.Acquire(ctx, req); err != nil { // leaves a pooled connection behind
		t.Fatal(err)
	}
	srv.Kill()
	fastest := time.Hour
	for range 20 {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		start := time.Now()
		_, err := n.Acquire(cctx, req)
		d := time.Since(start)
		cancel()
		if err == nil {
			t.Fatal("acquire on a killed server succeeded")
		}
		fastest = min(fastest, d)
	}
	if fastest >= 8*time.Millisecond {
		t.Fatalf("the fastest of 20 calls to a killed server took %v; a refused connection should fail at once", fastest)
	}
}

// Every Watch that returns must hear every release until it stops, however
// the watches before it came and went: the last watch of a resource stopping
// (an UNSUBSCRIBE) just before a new first one (a SUBSCRIBE), a second watch
// joining one that then stops, and the pub/sub connection lost and made
// again (go-redis then subscribes again to the channels it knows). Each
// round releases at once and again 5 ms later, which an UNSUBSCRIBE sent
// late would silence, and the rounds are 0 to 2 ms apart.
func TestAWatchThatReturnedHearsTheNextRelease(t *testing.T) {
	srv := redistest.Start(t, &redistest.Options{AOF: true}) // restarts keep the node's data
	n := newNode(t, srv)
	ctx := context.Background()
	const resource = "heard"
	watch := func(round int, heard chan struct{}) func() {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			stop, err := n.Watch(cctx, resource, func() {
				select {
				case heard <- struct{}{}:
				default:
				}
			})
			cancel()
			if err == nil {
				return stop
			}
			if time.Now().After(deadline) { // only a restart may make it fail
				t.Fatalf("round %d: Watch: %v", round, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	release := func(round int) {
		t.Helper()
		lease := lockcore.NewLeaseID()
		if rep, err := n.Acquire(ctx, lockcore.NodeAcquire{Resource: resource, Lease: lease, TTL: 10 * time.Second}); err != nil || rep.Status != lockcore.StatusGranted {
			t.Fatalf("round %d: acquire: %v %v", round, rep.Status, err)
		}
		if rep, err := n.Release(ctx, resource, lease, 0); err != nil || rep.Status != lockcore.StatusOK {
			t.Fatalf("round %d: release: %v %v", round, rep.Status, err)
		}
	}
	expect := func(round int, heard chan struct{}) {
		t.Helper()
		for i := range 2 {
			if i == 1 {
				time.Sleep(5 * time.Millisecond)
			}
			release(round)
			select {
			case <-heard:
			case <-time.After(5 * time.Second):
				t.Fatalf("round %d: release %d after Watch returned was not heard", round, i+1)
			}
		}
	}
	for round := range 150 {
		if round == 50 || round == 100 {
			srv.Restart()
			// A new server process: it must recover before it serves (a
			// single node has nobody to recover from; the test repairs it
			// as the guard would after the quarantine).
			if h, err := n.Check(ctx); err != nil || !h.Lost {
				t.Fatalf("check after a restart: %+v, %v; want lost", h, err)
			}
			if err := n.Quarantine(ctx); err != nil {
				t.Fatal(err)
			}
			if err := nodetest.RepairNow(ctx, n, make([]int64, lockcore.FenceSlots)); err != nil {
				t.Fatal(err)
			}
			if h, err := n.Check(ctx); err != nil || h.Lost || h.Quarantined || !h.Initialized {
				t.Fatalf("check after the repair: %+v, %v", h, err)
			}
		}
		a := make(chan struct{}, 1)
		stopA := watch(round, a)
		if round%2 == 1 {
			// A second watch joins, and the first leaves before the release.
			b := make(chan struct{}, 1)
			stopB := watch(round, b)
			stopA()
			expect(round, b)
			stopB()
		} else {
			expect(round, a)
			stopA()
		}
		// The last watch stopped: the next round's Watch is a first one
		// again. A pause of 1 or 2 ms lets the UNSUBSCRIBE go out first.
		time.Sleep(time.Duration(round%3) * time.Millisecond)
	}
	// Nothing stays subscribed: neither the channel nor a marker.
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr(), DisableIdentity: true})
	defer admin.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		chans, err := admin.PubSubChannels(ctx, "*").Result()
		if err == nil && len(chans) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still subscribed after every watch stopped: %v (%v)", chans, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A watch that stands while its node's pub/sub connection is lost must not
// miss a release published before go-redis has made a new connection and
// subscribed again: it is notified once the subscription is back. The
// connection is killed and the release published in one MULTI, so the
// release can only be missed.
func TestAWatchHearsOfAReleaseMissedWhileItsConnectionWasDown(t *testing.T) {
	srv := redistest.Start(t, nil)
	n := newNode(t, srv)
	ctx := context.Background()
	heard := make(chan struct{}, 16)
	stop, err := n.Watch(ctx, "blip", func() {
		select {
		case heard <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr(), DisableIdentity: true})
	defer admin.Close()
	for round := range 3 {
		_, err := admin.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.ClientKillByFilter(ctx, "TYPE", "pubsub")
			p.Publish(ctx, "lockgate:{blip}:released", "1")
			return nil
		})
		if err != nil {
			t.Fatalf("round %d: MULTI: %v", round, err)
		}
		select {
		case <-heard:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: the watch never heard of the release made while its connection was down", round)
		}
	}
}

// TestRejoin: the conformance suite of rule 8's record, on redis-servers
// on appendfsync always, each restarted by killing it.
func TestRejoin(t *testing.T) {
	servers := map[lockcore.Node]*redistest.Server{}
	nodetest.RunRejoin(t, func(t *testing.T) lockcore.Node {
		srv := redistest.Start(t, &redistest.Options{AOF: true})
		n := connect(t, srv)
		servers[n] = srv
		return n
	}, func(t *testing.T, n lockcore.Node) { servers[n].Restart() })
}
