//go:build unix

package handlers_test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockgate/lockgate/api"
	"github.com/lockgate/lockgate/handlers"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/metrics"
)

// The benchmarks measure the gateway's request path in process: the handler
// stack as cmd/lockgate assembles it (BodyDeadline around handlers.New with
// an info-level JSON access log, the metrics hook and the /metrics route),
// over a lockcore.Redlock on three in-memory nodes, so that no Redis and no
// socket is measured. The harness reuses its requests, bodies and response
// writers, so that allocs/op is the handler stack's and lockcore's alone.
//
//	go test ./handlers -run '^$' -bench . -benchmem
//
// BenchmarkLockcoreAcquireRelease is the same work without HTTP: the
// difference is what the HTTP layer costs.
//
// Besides ns/op (wall time, which other processes on a shared machine
// inflate), each reports cpu-ns/op: the CPU time of the whole process (all
// threads, the garbage collector's included) per op, from getrusage.

// cpuTime is the CPU time the process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the CPU time per op since start.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
}

// benchGateway returns the production handler stack over three memnodes.
func benchGateway(b *testing.B) (http.Handler, *lockcore.Redlock) {
	return benchGatewayTraced(b, nil)
}

// benchGatewayTraced is benchGateway with tp as the handlers' Tracer (none
// when nil).
func benchGatewayTraced(b *testing.B, tp trace.TracerProvider) (http.Handler, *lockcore.Redlock) {
	b.Helper()
	// A node timeout of 1s instead of 50ms (and a minimum TTL that allows
	// it): on a busy machine a goroutine descheduled for 50ms would turn
	// into a 503. It changes no work done.
	rl, err := lockcore.New(memNodes(3, nil), &lockcore.Options{NodeTimeout: time.Second, MinTTL: 2 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(rl.Close)
	m := metrics.New()
	// As cmd/lockgate's run builds it, writing to io.Discard.
	log := zerolog.New(io.Discard).Level(zerolog.InfoLevel).With().Timestamp().Str("service", "lockgate").Logger()
	h, err := handlers.New(rl, &handlers.Options{
		Logger: &log, BodyLimit: 16 << 10, DefaultTTL: 30 * time.Second,
		OnRequest: m.Request, Metrics: m.Handler(), Tracer: tp,
	})
	if err != nil {
		b.Fatal(err)
	}
	return handlers.BodyDeadline(5 * time.Second)(h), rl
}

// benchBody is a request body that can be rewound without allocating.
type benchBody struct{ strings.Reader }

func (*benchBody) Close() error { return nil }

// benchWriter is a reusable http.ResponseWriter that keeps the status and
// the headers, and drops the body.
type benchWriter struct {
	h      http.Header
	status int
	n      int
}

func (w *benchWriter) Header() http.Header { return w.h }

func (w *benchWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *benchWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.n += len(p)
	return len(p), nil
}

// SetReadDeadline lets BodyDeadline wrap the body, as it does over
// net/http's writer.
func (w *benchWriter) SetReadDeadline(time.Time) error { return nil }

func (w *benchWriter) reset() {
	clear(w.h)
	w.status, w.n = 0, 0
}

// benchRequest is one reusable request.
type benchRequest struct {
	req  *http.Request
	body *benchBody
	text string
}

func newBenchRequest(b *testing.B, method, target, body string) *benchRequest {
	b.Helper()
	br := &benchRequest{body: &benchBody{}, text: body}
	req, err := http.NewRequestWithContext(context.Background(), method, target, nil)
	if err != nil {
		b.Fatal(err)
	}
	req.RequestURI = target
	req.RemoteAddr = "192.0.2.1:1234"
	if body != "" {
		req.Header.Set("Content-Type", api.MediaJSON)
	}
	req.ContentLength = int64(len(body))
	br.req = req
	return br
}

// serve sends the request again through h, with a rewound body.
func (br *benchRequest) serve(h http.Handler, w *benchWriter) {
	w.reset()
	br.body.Reset(br.text)
	if br.text == "" {
		br.req.Body = http.NoBody
	} else {
		br.req.Body = br.body
	}
	h.ServeHTTP(w, br.req)
}

var benchSeq atomic.Int64

// BenchmarkAcquireRelease is one PUT /locks/{r} {"ttl_ms":10000} and one
// DELETE /locks/{r} with the lease it got, per op. Each goroutine has its
// own resource, so nothing contends for a lock.
func BenchmarkAcquireRelease(b *testing.B) { benchAcquireRelease(b, nil) }

// BenchmarkAcquireReleaseTraced is BenchmarkAcquireRelease with tracing on,
// as cmd/lockgate configures it: parent-based TraceIDRatio sampling at 1 %
// and 100 %, spans batched to an exporter that drops them (the OTLP
// encoding is the bench module's to measure). Compare with
// BenchmarkAcquireRelease: the difference is what tracing costs the
// request path.
func BenchmarkAcquireReleaseTraced(b *testing.B) {
	for _, ratio := range []float64{0.01, 1} {
		b.Run(strconv.FormatFloat(ratio*100, 'f', -1, 64)+"%", func(b *testing.B) {
			tp := sdktrace.NewTracerProvider(
				sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
				sdktrace.WithBatcher(discardExporter{}))
			b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			benchAcquireRelease(b, tp)
		})
	}
}

// discardExporter drops every span.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

func benchAcquireRelease(b *testing.B, tp trace.TracerProvider) {
	h, _ := benchGatewayTraced(b, tp)
	b.ReportAllocs()
	defer reportCPU(b, cpuTime(b))
	b.RunParallel(func(pb *testing.PB) {
		target := "/locks/bench-" + strconv.FormatInt(benchSeq.Add(1), 10)
		put := newBenchRequest(b, http.MethodPut, target, `{"ttl_ms":10000}`)
		del := newBenchRequest(b, http.MethodDelete, target, "")
		leaseHdr := []string{""}
		del.req.Header[api.HeaderLeaseID] = leaseHdr
		w := &benchWriter{h: http.Header{}}
		for pb.Next() {
			put.serve(h, w)
			if w.status != http.StatusCreated {
				b.Errorf("PUT %s: status %d", target, w.status)
				return
			}
			leaseHdr[0] = w.h.Get(api.HeaderLeaseID)
			del.serve(h, w)
			if w.status != http.StatusNoContent {
				b.Errorf("DELETE %s: status %d", target, w.status)
				return
			}
		}
	})
}

// BenchmarkInspect is one GET /locks/{r} of a held lock per op.
func BenchmarkInspect(b *testing.B) {
	h, rl := benchGateway(b)
	b.ReportAllocs()
	defer reportCPU(b, cpuTime(b))
	b.RunParallel(func(pb *testing.PB) {
		resource := "bench-" + strconv.FormatInt(benchSeq.Add(1), 10)
		if _, err := rl.Acquire(context.Background(), lockcore.AcquireRequest{Resource: resource, TTL: time.Hour}); err != nil {
			b.Error(err)
			return
		}
		get := newBenchRequest(b, http.MethodGet, "/locks/"+resource, "")
		w := &benchWriter{h: http.Header{}}
		for pb.Next() {
			get.serve(h, w)
			if w.status != http.StatusOK {
				b.Errorf("GET /locks/%s: status %d", resource, w.status)
				return
			}
		}
	})
}

// BenchmarkLockcoreAcquireRelease is BenchmarkAcquireRelease's lock work
// without HTTP: lockcore.Redlock's Acquire and Release on three memnodes.
func BenchmarkLockcoreAcquireRelease(b *testing.B) {
	_, rl := benchGateway(b)
	b.ReportAllocs()
	defer reportCPU(b, cpuTime(b))
	b.RunParallel(func(pb *testing.PB) {
		resource := "bench-" + strconv.FormatInt(benchSeq.Add(1), 10)
		ctx := context.Background()
		for pb.Next() {
			l, err := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: resource, TTL: 10 * time.Second})
			if err != nil {
				b.Error(err)
				return
			}
			if err := rl.Release(ctx, lockcore.ReleaseRequest{Resource: resource, LeaseID: l.ID}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
