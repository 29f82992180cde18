package handlers_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockgate/lockgate/api"
	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/handlers"
)

// tracedGateway is a gateway over three in-memory nodes whose spans go to
// the returned in-memory exporter as each ends.
func tracedGateway(t *testing.T) (*gateway, *tracetest.InMemoryExporter) {
	t.Helper()
	tp, exp := memTracer(t)
	return newGateway(t, memNodes(3, nil), nil, &handlers.Options{Tracer: tp}), exp
}

// memTracer is a tracer provider that sends every span, as it ends, to
// the returned in-memory exporter.
func memTracer(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}

// spansNamed returns the ended spans called name.
func spansNamed(exp *tracetest.InMemoryExporter, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

// TestARequestIsTracedWithItsRoundAndNodeCalls: a PUT with a traceparent
// gets a server span "PUT /locks/{resource}" in the caller's trace, with
// the HTTP semantic conventions' attributes, a quorum round span under it
// and a span per node call under that, each naming the node by index; no
// attribute holds the resource name, the lease id or the path.
func TestARequestIsTracedWithItsRoundAndNodeCalls(t *testing.T) {
	g, exp := tracedGateway(t)
	const (
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		parent  = "00f067aa0ba902b7"
	)
	res := g.do(t, PUT, "/locks/secret-resource-name", `{"ttl_ms":60000}`,
		"traceparent", "00-"+traceID+"-"+parent+"-01", api.HeaderLeaseID, leaseA)
	if res.Status != http.StatusCreated {
		t.Fatalf("PUT: %s", res)
	}
	servers := spansNamed(exp, "PUT /locks/{resource}")
	if len(servers) != 1 {
		t.Fatalf("server spans %d, want 1 named PUT /locks/{resource}; spans: %v", len(servers), names(exp))
	}
	srv := servers[0]
	if srv.SpanContext.TraceID().String() != traceID || srv.Parent.SpanID().String() != parent || !srv.Parent.IsRemote() ||
		srv.SpanKind != trace.SpanKindServer {
		t.Errorf("server span in trace %s under %s (remote %v), kind %v: want trace %s under %s, server",
			srv.SpanContext.TraceID(), srv.Parent.SpanID(), srv.Parent.IsRemote(), srv.SpanKind, traceID, parent)
	}
	a := attrs(srv)
	for k, want := range map[attribute.Key]string{"http.request.method": "PUT", "http.route": "/locks/{resource}",
		"url.scheme": "http", "lockgate.outcome": "acquired"} {
		if got := a[k].Emit(); got != want {
			t.Errorf("server span %s = %q, want %q", k, got, want)
		}
	}
	if a["http.response.status_code"].AsInt64() != 201 {
		t.Errorf("http.response.status_code %v, want 201", a["http.response.status_code"].Emit())
	}

	rounds := spansNamed(exp, "lockgate.quorum_round")
	if len(rounds) == 0 {
		t.Fatalf("no quorum round span; spans: %v", names(exp))
	}
	for _, r := range rounds {
		if r.Parent.SpanID() != srv.SpanContext.SpanID() {
			t.Errorf("round span under %s, want the server span %s", r.Parent.SpanID(), srv.SpanContext.SpanID())
		}
		if ra := attrs(r); ra["lockgate.quorum"].AsInt64() != 2 || ra["lockgate.nodes"].AsInt64() != 3 {
			t.Errorf("round span attributes %v", r.Attributes)
		}
	}
	waitUntil(t, "a node call span for every node of every round", func() bool {
		return len(spansNamed(exp, "lockgate.node_call")) == 3*len(rounds)
	})
	seen := map[int64]int{}
	for _, n := range spansNamed(exp, "lockgate.node_call") {
		if n.Parent.SpanID() != rounds[0].SpanContext.SpanID() && (len(rounds) == 1 || n.Parent.SpanID() != rounds[1].SpanContext.SpanID()) {
			t.Errorf("node call span under %s, not under a round", n.Parent.SpanID())
		}
		na := attrs(n)
		seen[na["lockgate.node.index"].AsInt64()]++
		if na["lockgate.node.outcome"].Emit() != "ok" {
			t.Errorf("node call outcome %q, want ok", na["lockgate.node.outcome"].Emit())
		}
	}
	if seen[0] == 0 || seen[1] == 0 || seen[2] == 0 {
		t.Errorf("node indexes seen %v, want 0, 1 and 2", seen)
	}
	for _, s := range exp.GetSpans() {
		for _, kv := range s.Attributes {
			if v := kv.Value.Emit(); strings.Contains(v, "secret-resource-name") || strings.Contains(v, leaseA) {
				t.Errorf("span %s attribute %s = %q holds the resource name or the lease id", s.Name, kv.Key, v)
			}
		}
	}
}

// TestTracedWaitInTheRoomIsASpanUnderTheRequest: a PUT with wait_ms that
// stands in the waiting room's queue until the holder releases gets a
// child span "lockgate.wait" under its server span, covering its time in
// the queue: it starts before the release's request began (the waiter had
// tried twice, before and after joining the queue) and ends after, within
// the server span, with lockgate.wait.end handed or tried. The holder's
// own PUT, which did not wait, has no wait span. No attribute of any span
// holds a lease id, the resource name or the bearer token sent.
func TestTracedWaitInTheRoomIsASpanUnderTheRequest(t *testing.T) {
	const (
		resource = "secret-waited-resource"
		bearer   = "Bearer secret-token-0123456789"
	)
	tp, exp := memTracer(t)
	g, spy := spyGateway(t, nil, &handlers.Options{Tracer: tp})
	srv := g.serve(t, nil)
	holder := g.acquire(t, resource, leaseA, `{"ttl_ms":30000}`)
	waiting := sendAsync(context.Background(), srv, PUT, "/locks/"+resource, `{"wait_ms":60000}`,
		api.HeaderLeaseID, leaseB, "Authorization", bearer)
	spy.awaitWaiter(t) // the try before it joined the queue
	spy.awaitWaiter(t) // the try of a new queue's head
	if res := g.do(t, DELETE, "/locks/"+resource, "", api.HeaderLeaseID, leaseA); res.Status != http.StatusNoContent {
		t.Fatalf("release: %s", res)
	}
	wantWaiterGranted(t, waiting, resource, holder.FencingToken)

	servers := spansNamed(exp, "PUT /locks/{resource}")
	releases := spansNamed(exp, "DELETE /locks/{resource}")
	waits := spansNamed(exp, "lockgate.wait")
	if len(servers) != 2 || len(releases) != 1 || len(waits) != 1 {
		t.Fatalf("%d PUT, %d DELETE and %d lockgate.wait spans, want 2, 1 and 1 (the waiter's); spans: %v",
			len(servers), len(releases), len(waits), names(exp))
	}
	w, rel := waits[0], releases[0]
	var waiter *tracetest.SpanStub
	for i := range servers {
		if servers[i].SpanContext.SpanID() == w.Parent.SpanID() {
			waiter = &servers[i]
		}
	}
	if waiter == nil {
		t.Fatalf("the wait span's parent %s is no PUT's server span", w.Parent.SpanID())
	}
	if attrs(*waiter)["http.response.status_code"].AsInt64() != 201 {
		t.Errorf("the wait span is under a PUT answered %v, want the waiter's 201", attrs(*waiter)["http.response.status_code"].Emit())
	}
	if !w.StartTime.Before(rel.StartTime) || w.EndTime.Before(rel.StartTime) {
		t.Errorf("wait span %v to %v, release from %v: want the wait to begin before the release and end after it began",
			w.StartTime, w.EndTime, rel.StartTime)
	}
	if w.StartTime.Before(waiter.StartTime) || w.EndTime.After(waiter.EndTime) {
		t.Errorf("wait span %v to %v outside its request's span %v to %v", w.StartTime, w.EndTime, waiter.StartTime, waiter.EndTime)
	}
	if end := attrs(w)["lockgate.wait.end"].Emit(); end != "handed" && end != "tried" {
		t.Errorf("lockgate.wait.end %q, want handed or tried", end)
	}
	for _, s := range exp.GetSpans() {
		for _, kv := range s.Attributes {
			v := kv.Value.Emit()
			for _, secret := range []string{resource, leaseA, leaseB, "secret-token"} {
				if strings.Contains(v, secret) {
					t.Errorf("span %s attribute %s = %q holds %q", s.Name, kv.Key, v, secret)
				}
			}
		}
	}
}

// TestAnUnroutedRequestIsNamedByItsMethod: no route, no http.route.
func TestAnUnroutedRequestIsNamedByItsMethod(t *testing.T) {
	g, exp := tracedGateway(t)
	g.do(t, GET, "/nope", "")
	s := spansNamed(exp, "GET")
	if len(s) != 1 || attrs(s[0])["http.response.status_code"].AsInt64() != 404 {
		t.Fatalf("spans %v, want one GET with status 404", names(exp))
	}
	if _, ok := attrs(s[0])["http.route"]; ok {
		t.Errorf("an unrouted request has http.route %v", attrs(s[0])["http.route"])
	}
}

// TestTheGoClientSendsItsTraceToTheGateway: a call of package client made
// within a span carries its traceparent; the gateway's span is that
// span's child.
func TestTheGoClientSendsItsTraceToTheGateway(t *testing.T) {
	g, exp := tracedGateway(t)
	srv := g.serve(t, nil)
	callerExp := tracetest.NewInMemoryExporter()
	caller := sdktrace.NewTracerProvider(sdktrace.WithSyncer(callerExp))
	defer caller.Shutdown(context.Background())
	ctx, span := caller.Tracer("test").Start(context.Background(), "caller")
	cl, err := client.New(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Acquire(ctx, "traced", nil); err != nil {
		t.Fatal(err)
	}
	span.End()
	servers := spansNamed(exp, "PUT /locks/{resource}")
	if len(servers) != 1 {
		t.Fatalf("server spans: %v", names(exp))
	}
	if servers[0].SpanContext.TraceID() != span.SpanContext().TraceID() || servers[0].Parent.SpanID() != span.SpanContext().SpanID() {
		t.Errorf("the gateway's span is in trace %s under %s, want trace %s under the caller's span %s",
			servers[0].SpanContext.TraceID(), servers[0].Parent.SpanID(), span.SpanContext().TraceID(), span.SpanContext().SpanID())
	}
}

func names(exp *tracetest.InMemoryExporter) []string {
	var out []string
	for _, s := range exp.GetSpans() {
		out = append(out, s.Name)
	}
	return out
}
