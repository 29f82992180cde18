package handlers_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/lockgate/lockgate/api"
	"github.com/lockgate/lockgate/handlers"
)

// TestADrainingGatewayIsNotReadyButServes: once the drain begins /readyz
// answers 503 shutting-down with Retry-After, while /livez and the lock
// routes still serve.
func TestADrainingGatewayIsNotReadyButServes(t *testing.T) {
	t.Parallel()
	drain := handlers.NewDrain()
	g := newGateway(t, memNodes(3, nil), nil, &handlers.Options{Drain: drain})
	if res := g.do(t, GET, "/readyz", ""); res.Status != http.StatusOK {
		t.Fatalf("/readyz before the drain: %s", res)
	}
	drain.Begin()
	res := g.do(t, GET, "/readyz", "")
	wantProblem(t, res, http.StatusServiceUnavailable, api.ProblemShuttingDown)
	if res.Header.Get(api.HeaderRetryAfter) == "" {
		t.Errorf("/readyz 503 without Retry-After: %s", res)
	}
	if res := g.do(t, GET, "/livez", ""); res.Status != http.StatusOK {
		t.Errorf("/livez while draining: %s", res)
	}
	l := g.acquire(t, "job", "", "")
	if res := g.do(t, DELETE, "/locks/job", "", api.HeaderLeaseID, l.LeaseID); res.Status != http.StatusNoContent {
		t.Errorf("release while draining: %s", res)
	}
}

// TestEndStreamsEndsEveryStreamWithAShutdownEvent: a lock's stream and a
// prefix's stream each get a shutdown event and end, also when the watch
// hub closes their subscriptions right after EndStreams (as the gateway
// does).
func TestEndStreamsEndsEveryStreamWithAShutdownEvent(t *testing.T) {
	drain := handlers.NewDrain()
	g, hub := watchGateway(t, nil, &handlers.Options{Drain: drain})
	srv := g.serve(t, nil)
	one, stop1 := openStream(t, srv, srv.URL, "/locks/job")
	defer stop1()
	prefix, stop2 := openStream(t, srv, srv.URL, "/locks?prefix=jobs.")
	defer stop2()
	if ev := nextEvent(t, one); ev.name != "state" {
		t.Fatalf("first event %s, want state", ev.name)
	}
	waitUntil(t, "both streams watch", func() bool { return hub.Watchers() == 2 })
	drain.EndStreams()
	hub.Close()
	for name, events := range map[string]<-chan sseEvent{"/locks/job": one, "/locks?prefix=jobs.": prefix} {
		if ev := nextEvent(t, events); ev.name != "shutdown" {
			t.Errorf("%s: event %s after EndStreams, want shutdown", name, ev.name)
		}
		select {
		case ev, ok := <-events:
			if ok {
				t.Errorf("%s: event %s after shutdown, want the end", name, ev.name)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s: the stream did not end within 10s of its shutdown event", name)
		}
	}
}
