package handlers

import (
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// tracerName names the handlers' tracer (the instrumentation scope).
const tracerName = "github.com/lockgate/lockgate/handlers"

// serverSpan is the start option of every request's span.
var serverSpan = trace.WithSpanKind(trace.SpanKindServer)

// traced starts one server span per request, a child of the W3C
// traceparent the request carries if any, named "{method} {http.route}"
// ("{method}" alone when no route matched) with the HTTP semantic
// conventions' attributes: http.request.method, http.route, url.scheme,
// network.protocol.version, http.response.status_code, and error.type
// for a 5xx, plus lockgate.outcome (the access log's outcome). It records
// neither the path nor the query (they hold resource names), nor any
// header: no lease id, no bearer token. It runs inside accessLog, whose
// writer gives the status. The attributes are set after the sampling
// decision (the standard samplers do not read them), so that a request
// that is not sampled pays for none of them: at 1 % sampling the request
// path costs little more than with tracing off (BENCHMARKS.md).
func traced(tp trace.TracerProvider) func(http.Handler) http.Handler {
	tracer := tp.Tracer(tracerName)
	prop := propagation.TraceContext{}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
			ctx, span := tracer.Start(ctx, r.Method, serverSpan)
			defer span.End() // also when a panic passes on to the recoverer
			if !span.IsRecording() {
				// Not sampled: the context still carries the span, so that
				// lockcore's spans follow the same decision.
				next.ServeHTTP(w, r.WithContext(ctx))
				return
			}
			scheme := "http"
			if r.TLS != nil {
				scheme = "https"
			}
			span.SetAttributes(
				semconv.HTTPRequestMethodKey.String(r.Method),
				semconv.URLScheme(scheme),
				semconv.NetworkProtocolVersion(strconv.Itoa(r.ProtoMajor)+"."+strconv.Itoa(r.ProtoMinor)),
			)
			next.ServeHTTP(w, r.WithContext(ctx))

			if rc := chi.RouteContext(ctx); rc != nil {
				if route := rc.RoutePattern(); route != "" && route != "/*" {
					span.SetName(r.Method + " " + route)
					span.SetAttributes(semconv.HTTPRoute(route))
				}
			}
			st := stateOf(r)
			if st == nil {
				return
			}
			status := st.w.answered()
			span.SetAttributes(semconv.HTTPResponseStatusCode(status))
			if st.outcome != "" {
				span.SetAttributes(attribute.String("lockgate.outcome", st.outcome))
			}
			if status >= 500 {
				span.SetAttributes(semconv.ErrorTypeKey.String(strconv.Itoa(status)))
				span.SetStatus(codes.Error, "")
			}
		})
	}
}
