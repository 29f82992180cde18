package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/api"
	"github.com/lockgate/lockgate/internal/redistest"
)

// Two gateways over three Redis Cluster nodes (three shards each), given
// as redis-cluster:// URLs: locks are granted, listed across every shard,
// and a waiter on one gateway is woken by a release through the other
// (the Cluster's pub/sub carries it) within 500 ms; without the release's
// notification the waiter would try again only on its next poll (about
// 1 s: 983 ms measured with Watch failing on Cluster nodes).
func TestGatewaysOverClusterNodes(t *testing.T) {
	cs := []*redistest.Cluster{redistest.StartCluster(t, 3, 0), redistest.StartCluster(t, 3, 0), redistest.StartCluster(t, 3, 0)}
	urls := make([]string, len(cs))
	for i, c := range cs {
		urls[i] = c.URL()
	}
	args := []string{"-redis", strings.Join(urls, ",")}
	a, b := startGateway(t, args, nil), startGateway(t, args, nil)
	a.eventually(t, "/readyz", http.StatusOK)
	b.eventually(t, "/readyz", http.StatusOK)

	names := []string{"c-alpha", "c-beta", "c-gamma", "c-delta", "c-epsilon", "c-zeta"}
	lease := []string{api.HeaderLeaseID, "cluster-lease-A-0123456789"}
	for _, n := range names {
		if r := a.do(t, "PUT", "/locks/"+n, `{"ttl_ms":30000}`, lease...); r.status != 201 {
			t.Fatalf("PUT %s: %d %s", n, r.status, r.body)
		}
	}
	r := b.do(t, "GET", "/locks?prefix=c-", "")
	for _, n := range names {
		if r.status != 200 || !strings.Contains(r.body, `"`+n+`"`) {
			t.Fatalf("GET /locks?prefix=c- through the other gateway: %d %s; want every lock (%s missing)", r.status, r.body, n)
		}
	}

	waited := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("PUT", b.base+"/locks/c-alpha", strings.NewReader(`{"wait_ms":20000}`))
		req.Header.Set("Content-Type", api.MediaJSON)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			waited <- 0
			return
		}
		resp.Body.Close()
		waited <- resp.StatusCode
	}()
	if !b.waiters(t, 1, 10*time.Second) {
		t.Fatal("the waiter never waited")
	}
	released := time.Now()
	if r := a.do(t, "DELETE", "/locks/c-alpha", "", lease...); r.status != 204 {
		t.Fatalf("DELETE: %d %s", r.status, r.body)
	}
	st := <-waited
	took := time.Since(released)
	if st != 201 {
		t.Fatalf("the waiter got %d, want 201", st)
	}
	t.Logf("the waiter on the other gateway got the lock %v after the release", took.Round(time.Millisecond))
	if took > 500*time.Millisecond {
		t.Fatalf("the waiter got the lock %v after the release: it was not notified", took)
	}
}
