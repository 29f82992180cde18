package main

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// traceFlush bounds the export of the spans still buffered at exit.
const traceFlush = 2 * time.Second

// tracing returns the OpenTelemetry tracer provider the standard
// environment asks for, or nil when tracing is off. It is on when
// OTEL_TRACES_EXPORTER is otlp, or is unset while an OTLP endpoint is
// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT); off
// when neither is set, OTEL_TRACES_EXPORTER is none, or OTEL_SDK_DISABLED
// is true. Spans go over OTLP/HTTP (protobuf), configured by the
// exporter's own OTEL_EXPORTER_OTLP_* variables; the sampler by
// OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (default parentbased_always_on);
// the service by OTEL_SERVICE_NAME (default lockgate) and
// OTEL_RESOURCE_ATTRIBUTES. Errors: an exporter or protocol other than
// OTLP over HTTP.
func tracing(ctx context.Context, getenv func(string) string) (*sdktrace.TracerProvider, error) {
	exporter := getenv("OTEL_TRACES_EXPORTER")
	endpoint := getenv("OTEL_EXPORTER_OTLP_ENDPOINT") + getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	switch {
	case getenv("OTEL_SDK_DISABLED") == "true", exporter == "none", exporter == "" && endpoint == "":
		return nil, nil
	case exporter != "" && exporter != "otlp":
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: this gateway exports traces only with otlp (or none)", exporter)
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := getenv(v); p != "" && p != "http/protobuf" {
			return nil, fmt.Errorf("%s=%q: this gateway exports OTLP over http/protobuf only", v, p)
		}
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithAttributes(semconv.ServiceName("lockgate")),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}
