package client_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/internal/gatewaytest"
	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/redisnode"
)

// Node calls get more than the 50ms default: a loaded machine running the
// race detector next to several redis-servers can be slow to answer, and a
// spurious timeout would make the timing tests flaky. A paused node still
// costs every call this long.
const (
	itNodeTimeout = 150 * time.Millisecond
	itMinTTL      = 500 * time.Millisecond
)

// testGateway is the real gateway (lockcore over redis-server nodes, the
// handlers) served by gatewaytest.InProcess, with a handler in front that counts requests.
type testGateway struct {
	URL   string
	nodes []*redistest.Server

	patches  atomic.Int64 // PATCH requests that reached the handler
	inflight atomic.Int64 // PATCH requests being handled

	mu    sync.Mutex
	front func(w http.ResponseWriter, r *http.Request, next http.Handler) // optional
}

// startGateway starts n redis-server nodes and a gateway over them.
func startGateway(t *testing.T, n int) *testGateway {
	t.Helper()
	g := &testGateway{nodes: redistest.StartN(t, n, nil)}
	nodes := make([]lockcore.Node, n)
	for i, s := range g.nodes {
		node, err := redisnode.New(s.URL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { node.Close() })
		nodes[i] = node
	}
	counting := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPatch {
				g.patches.Add(1)
				g.inflight.Add(1)
				defer g.inflight.Add(-1)
			}
			g.mu.Lock()
			front := g.front
			g.mu.Unlock()
			if front != nil {
				front(w, r, h)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	srv := gatewaytest.InProcess(t, nodes, &gatewaytest.InProcessOptions{
		Core:  &lockcore.Options{NodeTimeout: itNodeTimeout, MinTTL: itMinTTL},
		Front: counting,
	})
	g.URL = srv.URL
	return g
}

// setFront puts f in front of the gateway's handler.
func (g *testGateway) setFront(f func(w http.ResponseWriter, r *http.Request, next http.Handler)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.front = f
}

// pttl returns the remaining TTL of resource's lock key on node i.
func (g *testGateway) pttl(t *testing.T, i int, resource string) time.Duration {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: g.nodes[i].Addr()})
	defer rc.Close()
	d, err := rc.PTTL(context.Background(), "lockgate:{"+resource+"}:lock").Result()
	if err != nil {
		t.Fatalf("PTTL on node %d: %v", i, err)
	}
	return d
}

// del deletes resource's lock key on node i, behind the gateway's back.
func (g *testGateway) del(t *testing.T, i int, resource string) {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: g.nodes[i].Addr()})
	defer rc.Close()
	if err := rc.Del(context.Background(), "lockgate:{"+resource+"}:lock").Err(); err != nil {
		t.Fatalf("DEL on node %d: %v", i, err)
	}
}
