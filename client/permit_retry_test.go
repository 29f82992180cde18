package client_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/lockgate/lockgate/api"
	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/fencing"
	"github.com/lockgate/lockgate/lockcore"
)

// The answer to the first permit PUT is lost (the connection is cut after
// the gateway granted the permit): HoldPermit retries with the same lease
// id and gets the same permit back (same token), not a second one.
func TestHoldPermitRetriesALostAnswerWithTheSameLeaseID(t *testing.T) {
	g := startGateway(t, 3)
	var mu sync.Mutex
	var leaseIDs []string
	puts := 0
	g.setFront(func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		if r.Method != http.MethodPut {
			next.ServeHTTP(w, r)
			return
		}
		mu.Lock()
		puts++
		first := puts == 1
		leaseIDs = append(leaseIDs, r.Header.Get(api.HeaderLeaseID))
		mu.Unlock()
		if first {
			next.ServeHTTP(httptest.NewRecorder(), r) // granted, answer dropped
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		next.ServeHTTP(w, r)
	})
	c := newClient(t, g.URL)
	ctx := context.Background()
	l, err := c.HoldPermit(ctx, "lost-permit", 3, &client.LockOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	mu.Lock()
	ids := append([]string(nil), leaseIDs...)
	mu.Unlock()
	if len(ids) != 2 || ids[0] == "" || ids[0] != ids[1] || l.LeaseID() != ids[0] {
		t.Fatalf("PUTs carried %d lease ids, want two, equal, the permit's", len(ids))
	}
	info, err := c.GetSemaphore(ctx, "lost-permit")
	if err != nil || info.InUse != 1 || info.Holders[0].Permit != l.Permit() || info.Holders[0].FencingToken != l.FencingToken() {
		t.Fatalf("after the retry: %+v, %v; want the one permit %d the Lock holds", info, err, l.Permit())
	}
}

// A permit's fence name is no lock's name, and fencing stores accept it.
func TestPermitFenceResourceIsNoLockName(t *testing.T) {
	name := client.FenceResource("jobs", 1)
	if name != "jobs/1" || lockcore.ValidResource(name) {
		t.Fatalf("FenceResource = %q: want jobs/1, which no lock can be named", name)
	}
	if err := fencing.CheckResource(name); err != nil {
		t.Fatalf("fencing refuses %q: %v", name, err)
	}
}
