package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// value returns the value of the series name{labels} (counter, gauge, or a
// histogram's sample count), or -1 when there is no such series.
func value(t *testing.T, m *Metrics, name string, labels ...string) float64 {
	t.Helper()
	families, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, s := range f.GetMetric() {
			if len(s.GetLabel()) != len(want) {
				continue
			}
			for _, l := range s.GetLabel() {
				if want[l.GetName()] != l.GetValue() {
					continue series
				}
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				return s.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				return s.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				return float64(s.GetHistogram().GetSampleCount())
			}
		}
	}
	return -1
}

func TestRequestCountsByOperationAndOutcome(t *testing.T) {
	m := New()
	if v := value(t, m, "lockgate_requests_total", "op", "acquire", "outcome", "timed_out"); v != 0 {
		t.Errorf("a known outcome starts at %v, want 0", v)
	}
	m.Request("acquire", "acquired", 201, 3*time.Millisecond)
	m.Request("acquire", "acquired", 201, 2*time.Millisecond)
	m.Request("acquire", "timed_out", 409, 2*time.Second)
	m.Request("healthz", "", 200, time.Millisecond)
	m.Request("release", "", 401, time.Millisecond)
	m.Request("other", "", 405, time.Millisecond)
	m.Request("other", "", 502, time.Millisecond)
	tests := []struct {
		op, outcome string
		want        float64
	}{
		{"acquire", "acquired", 2},
		{"acquire", "timed_out", 1},
		{"acquire", "taken", 0},
		{"healthz", "ok", 1},
		{"release", "unauthorized", 1},
		{"other", "client_error_405", 1},
		{"other", "server_error", 1},
	}
	for _, tt := range tests {
		if v := value(t, m, "lockgate_requests_total", "op", tt.op, "outcome", tt.outcome); v != tt.want {
			t.Errorf("requests{op=%s,outcome=%s} = %v, want %v", tt.op, tt.outcome, v, tt.want)
		}
	}
	if v := value(t, m, "lockgate_request_duration_seconds", "op", "acquire"); v != 3 {
		t.Errorf("acquire latency samples %v, want 3", v)
	}
}

type netTimeout struct{}

func (netTimeout) Error() string   { return "i/o timeout" }
func (netTimeout) Timeout() bool   { return true }
func (netTimeout) Temporary() bool { return true }

var _ net.Error = netTimeout{}

func TestNodeCallsSortErrors(t *testing.T) {
	m := New()
	m.Nodes([]string{"a:6379", "b:6379", "c:6379"}, 2)
	tests := []struct {
		name string
		err  error
		kind string
	}{
		{"a context deadline is a timeout", fmt.Errorf("wrapped: %w", context.DeadlineExceeded), "timeout"},
		{"a network timeout is a timeout", &net.OpError{Op: "read", Err: netTimeout{}}, "timeout"},
		{"a cancellation is canceled", context.Canceled, "canceled"},
		{"anything else is an error", errors.New("connection refused"), "error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := value(t, m, "lockgate_node_call_errors_total", "node", "b:6379", "op", "acquire", "kind", tt.kind)
			m.NodeCall("b:6379", "acquire", time.Millisecond, tt.err)
			after := value(t, m, "lockgate_node_call_errors_total", "node", "b:6379", "op", "acquire", "kind", tt.kind)
			if after != max(before, 0)+1 {
				t.Errorf("errors{kind=%s} went from %v to %v", tt.kind, before, after)
			}
		})
	}
	m.NodeCall("a:6379", "check", time.Millisecond, nil)
	if v := value(t, m, "lockgate_node_call_duration_seconds", "node", "a:6379", "op", "check"); v != 1 {
		t.Errorf("ping latency samples %v, want 1", v)
	}
	if v := value(t, m, "lockgate_node_call_errors_total", "node", "a:6379", "op", "check", "kind", "error"); v != 0 {
		t.Errorf("a successful call counted an error: %v", v)
	}
	if v := value(t, m, "lockgate_node_call_errors_total", "node", "c:6379", "op", "release", "kind", "timeout"); v != 0 {
		t.Errorf("a configured node's error series should start at 0, got %v", v)
	}
	if v := value(t, m, "lockgate_nodes"); v != 3 {
		t.Errorf("lockgate_nodes %v", v)
	}
	if v := value(t, m, "lockgate_quorum"); v != 2 {
		t.Errorf("lockgate_quorum %v", v)
	}
}

// lockgate_node_index keeps the configured order of the nodes, which the
// exposition (sorted by label value) does not.
func TestNodeIndexIsTheConfiguredOrder(t *testing.T) {
	m := New()
	names := []string{"z.example:6379", "a.example:6379", "m.example:6379"}
	m.Nodes(names, 2)
	for i, n := range names {
		if v := value(t, m, "lockgate_node_index", "node", n); v != float64(i) {
			t.Errorf("lockgate_node_index{node=%q} %v, want %d", n, v, i)
		}
	}
}

func TestQuorumFencingAndWaiters(t *testing.T) {
	m := New()
	waiting := 0
	m.Waiters(func() int { return waiting })
	behind := []bool{false, false}
	m.Behind([]string{"a:1", "b:2"}, func() []bool { return behind })
	timeout := 50 * time.Millisecond
	m.NodeTimeout(func() time.Duration { return timeout })
	m.QuorumFailed("acquire")
	m.QuorumFailed("acquire")
	m.QuorumFailed("check")
	m.Fenced()
	waiting = 7
	behind[1] = true
	timeout = 150 * time.Millisecond
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"lockgate_quorum_failures_total", []string{"op", "acquire"}, 2},
		{"lockgate_quorum_failures_total", []string{"op", "check"}, 1},
		{"lockgate_quorum_failures_total", []string{"op", "fence"}, 0},
		{"lockgate_fence_writebacks_total", nil, 1},
		{"lockgate_waiters", nil, 7},
		{"lockgate_node_behind", []string{"node", "a:1"}, 0},
		{"lockgate_node_behind", []string{"node", "b:2"}, 1},
		{"lockgate_node_timeout_seconds", nil, 0.15},
	} {
		if v := value(t, m, c.name, c.labels...); v != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
}

// The exposition has lockgate's metrics and the runtime's, and no label
// that could carry a resource name.
func TestHandlerServesTheTextFormat(t *testing.T) {
	m := New()
	m.Waiters(func() int { return 0 })
	m.Behind([]string{"a:1"}, func() []bool { return []bool{true} })
	m.Request("acquire", "acquired", 201, time.Millisecond)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain") {
		t.Fatalf("%d %s", rec.Code, rec.Header().Get("Content-Type"))
	}
	for _, want := range []string{
		`lockgate_requests_total{op="acquire",outcome="acquired"} 1`,
		"# TYPE lockgate_request_duration_seconds histogram",
		"lockgate_waiters 0",
		`lockgate_node_behind{node="a:1"} 1`,
		"go_goroutines",
		"process_cpu_seconds_total",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("no %q in:\n%s", want, body)
		}
	}
	families, _ := m.reg.Gather()
	// version and revision are fixed for the process: one series.
	allowed := map[string]bool{"op": true, "outcome": true, "node": true, "kind": true, "le": true,
		"version": true, "revision": true}
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "lockgate_") {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if !allowed[l.GetName()] {
					t.Errorf("%s has label %q: only bounded labels are allowed", f.GetName(), l.GetName())
				}
			}
		}
	}
}

// lockgate_build_info names the build the Go toolchain recorded: a test
// binary records no VCS stamp, so its version is "(devel)".
func TestBuildInfo(t *testing.T) {
	m := New()
	version, revision := Build()
	if version == "" || revision == "" {
		t.Fatalf("Build() = %q, %q: both must be named", version, revision)
	}
	if v := value(t, m, "lockgate_build_info", "version", version, "revision", revision); v != 1 {
		t.Errorf("lockgate_build_info{version=%q,revision=%q} = %v, want 1", version, revision, v)
	}
}

func TestPermitsInUse(t *testing.T) {
	m := New()
	inUse := 0
	m.PermitsInUse(func() int { return inUse })
	inUse = 3
	if v := value(t, m, "lockgate_permits_in_use"); v != 3 {
		t.Errorf("lockgate_permits_in_use = %v, want 3", v)
	}
}

func TestWatchFiguresAreReadAtEveryScrape(t *testing.T) {
	m := New()
	watchers, sent, dropped := 3, int64(10), int64(1)
	m.Watch(func() int { return watchers }, func() int64 { return sent }, func() int64 { return dropped })
	for _, c := range []struct {
		name string
		want float64
	}{
		{"lockgate_watchers", 3},
		{"lockgate_watch_events_sent_total", 10},
		{"lockgate_watch_dropped_total", 1},
	} {
		if v := value(t, m, c.name); v != c.want {
			t.Errorf("%s = %v, want %v", c.name, v, c.want)
		}
	}
	watchers, sent = 0, 12
	if v := value(t, m, "lockgate_watchers"); v != 0 {
		t.Errorf("lockgate_watchers = %v after the watchers left, want 0", v)
	}
	if v := value(t, m, "lockgate_watch_events_sent_total"); v != 12 {
		t.Errorf("lockgate_watch_events_sent_total = %v, want 12", v)
	}
}
