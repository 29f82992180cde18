package main

import (
	"context"
	"strings"
	"testing"
)

// TestTracingFollowsTheStandardEnvironment: off unless an OTLP endpoint or
// exporter is configured, off when disabled, an error for what it cannot
// export with.
func TestTracingFollowsTheStandardEnvironment(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		on   bool
		err  string
	}{
		{"nothing set: off", nil, false, ""},
		{"a service name alone: off", map[string]string{"OTEL_SERVICE_NAME": "x"}, false, ""},
		{"an endpoint: on", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true, ""},
		{"a traces endpoint: on", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true, ""},
		{"the otlp exporter: on", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true, ""},
		{"exporter none wins", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"}, false, ""},
		{"the SDK disabled", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, false, ""},
		{"another exporter", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, false, "OTEL_TRACES_EXPORTER"},
		{"gRPC", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, false, "http/protobuf"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp, err := tracing(context.Background(), envOf(tc.env))
			if tp != nil {
				defer tp.Shutdown(context.Background())
			}
			if (err != nil) != (tc.err != "") || err != nil && !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err %v, want one naming %q", err, tc.err)
			}
			if (tp != nil) != tc.on {
				t.Errorf("tracing on %v, want %v", tp != nil, tc.on)
			}
		})
	}
}
