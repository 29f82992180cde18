package lockcore

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockgate/lockgate/lockcore/internal/waitroom"
)

// Tracing. lockcore imports the OpenTelemetry trace API
// (go.opentelemetry.io/otel/trace), never the SDK nor anything of HTTP:
// the API is a small, stable set of interfaces with a no-op default, and
// the spans here are children of the caller's span, found in ctx. A
// caller that traces nothing pays one context lookup per round and per
// node call: no span is started unless the caller's span records. A port
// of lockcore's own (a Tracer interface in Options) would only restate
// trace.Tracer's two methods and need an adapter in every caller.
//
// The attributes name nodes by their index in the configured list, never
// by address (which may carry a password or name internal hosts), and
// never carry a resource name, a lease id or a token.

// tracerName names lockcore's tracer (the instrumentation scope).
const tracerName = "github.com/lockgate/lockgate/lockcore"

// startRoundSpan starts the span of one quorum round over n nodes needing
// quorum, if ctx's span records; otherwise it returns ctx and a
// non-recording span.
func startRoundSpan(ctx context.Context, n, quorum int) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, parent
	}
	return parent.TracerProvider().Tracer(tracerName).Start(ctx, "lockgate.quorum_round", trace.WithAttributes(
		attribute.Int("lockgate.nodes", n), attribute.Int("lockgate.quorum", quorum)))
}

// endRoundSpan ends a round's span with how many nodes had answered, and
// how many of them successfully, when the round was decided.
func endRoundSpan(span trace.Span, v view) {
	if !span.IsRecording() {
		return
	}
	heard, ok := 0, 0
	for i, a := range v.Answers {
		if v.Heard[i] {
			heard++
			if a.err == nil {
				ok++
			}
		}
	}
	span.SetAttributes(attribute.Int("lockgate.nodes_heard", heard), attribute.Int("lockgate.nodes_ok", ok))
	span.End()
}

// startNodeSpan starts the span of the call to node i, a child of the
// round's span if that records.
func startNodeSpan(ctx context.Context, i int) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, parent
	}
	return parent.TracerProvider().Tracer(tracerName).Start(ctx, "lockgate.node_call", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.Int("lockgate.node.index", i)))
}

// endNodeSpan ends a node call's span with its outcome: ok, timeout,
// canceled or error (the error's text is left out: it names the node).
func endNodeSpan(span trace.Span, err error) {
	if !span.IsRecording() {
		return
	}
	outcome := "ok"
	switch {
	case err == nil:
	case errors.Is(err, context.DeadlineExceeded):
		outcome = "timeout"
	case errors.Is(err, context.Canceled):
		outcome = "canceled"
	default:
		outcome = "error"
	}
	span.SetAttributes(attribute.String("lockgate.node.outcome", outcome))
	if err != nil {
		span.SetStatus(codes.Error, outcome)
	}
	span.End()
}

// waitEnds names how a wait in the room ended, for lockgate.wait.end.
var waitEnds = map[waitroom.End]string{
	waitroom.Tried:    "tried",
	waitroom.Handed:   "handed",
	waitroom.RanOut:   "ran_out",
	waitroom.Canceled: "canceled",
	waitroom.Closed:   "closed",
	waitroom.TooMany:  "too_many",
}

// recordWait records the time an acquisition stood in the waiting room's
// queue as a span "lockgate.wait", a child of ctx's span if that records,
// that began when the request joined its queue and ends now, with
// lockgate.wait.end saying how the wait ended (tried: an acquisition
// round in the queue answered it, granted or not; handed: a release
// handed the lock over; ran_out; canceled; closed). An acquisition that
// never joined a queue (its first try answered it) has no such span.
//
// A span, not a duration attribute on the request's span: OpenTelemetry's
// semantic conventions define no attribute for a time waited; they give a
// phase of a request its time as a span's own start and end (and a
// duration as a metric's histogram), so a trace view draws the wait on
// the request's timeline and a query selects slow waits by span duration.
// The span is made when the wait is over, from the time it took (the room
// knows when the request joined, lockcore when it ended): the rounds tried
// in the queue are therefore its siblings, under the request's span,
// drawn within it. Its attributes carry no resource name and no lease id.
func recordWait(ctx context.Context, queued time.Duration, end waitroom.End) {
	parent := trace.SpanFromContext(ctx)
	if queued <= 0 || !parent.IsRecording() {
		return
	}
	now := time.Now()
	_, span := parent.TracerProvider().Tracer(tracerName).Start(ctx, "lockgate.wait",
		trace.WithTimestamp(now.Add(-queued)),
		trace.WithAttributes(attribute.String("lockgate.wait.end", waitEnds[end])))
	span.End(trace.WithTimestamp(now))
}
