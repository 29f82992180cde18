// Package metrics is lockgate's Prometheus instrumentation: request counts
// by operation and outcome, latency histograms, per-node call latency and
// errors, waiters, quorum failures and fencing write-backs.
//
// A *Metrics is a lockcore.Observer (set it as lockcore.Options.Observer),
// its Request method is a handlers.Options.OnRequest hook, and Handler serves
// everything at GET /metrics. No metric has a resource, lease or token label:
// every label takes a small, fixed set of values (operations, outcomes, and
// the configured node names), so the number of series stays bounded however
// many locks clients use.
package metrics

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lockgate/lockgate/lockcore"
)

// Metrics holds lockgate's collectors on their own registry. It is safe for
// concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	requests     *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	nodeDuration *prometheus.HistogramVec
	nodeErrors   *prometheus.CounterVec
	quorum       *prometheus.CounterVec
	fenced       prometheus.Counter
	nodeState    *prometheus.GaugeVec
	nodeRefusing *prometheus.GaugeVec
}

var (
	_ lockcore.Observer       = (*Metrics)(nil)
	_ lockcore.HealthObserver = (*Metrics)(nil)
)

// nodeStates are the states lockgate_node_state has a series for.
var nodeStates = []lockcore.NodeState{lockcore.NodeServing, lockcore.NodeUnreachable, lockcore.NodeRefusing,
	lockcore.NodeLost, lockcore.NodeQuarantined, lockcore.NodeUninitialized}

// NodeState implements lockcore.HealthObserver: lockgate_node_state is 1
// for node's new state and 0 for the others, and lockgate_node_refusing is
// 1 for the reason a refusing node gives (its other reasons are dropped).
func (m *Metrics) NodeState(node string, state lockcore.NodeState, reason string) {
	for _, s := range nodeStates {
		v := 0.0
		if s == state {
			v = 1
		}
		m.nodeState.WithLabelValues(node, string(s)).Set(v)
	}
	m.nodeRefusing.DeletePartialMatch(prometheus.Labels{"node": node})
	if state == lockcore.NodeRefusing {
		m.nodeRefusing.WithLabelValues(node, reason).Set(1)
	}
}

// Operations and outcomes known in advance: their series exist (at 0) from
// the start, so rate() and alerts work before the first occurrence.
var (
	lockOps    = []string{"acquire", "extend", "release", "inspect"}
	quorumOps  = []string{"acquire", "fence", "extend", "release", "inspect", "check", "repair"}
	preOutcome = map[string][]string{
		"acquire": {"acquired", "reentered", "taken", "timed_out", "no_quorum", "bad_request", "too_many_waiters"},
		"extend":  {"extended", "not_held", "held_by_other", "token_mismatch", "no_quorum", "bad_request"},
		"release": {"released", "not_held", "held_by_other", "token_mismatch", "no_quorum", "bad_request"},
	}
)

// New returns Metrics on a new registry that also carries the Go runtime and
// process collectors.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockgate_requests_total",
			Help: "HTTP requests by operation (acquire, extend, release, inspect, healthz, livez, readyz, openapi, metrics, ui, other) and outcome (acquired, reentered, taken, timed_out, no_quorum, bad_request, unauthorized, forbidden, ...).",
		}, []string{"op", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "lockgate_request_duration_seconds",
			Help:    "HTTP request latency by operation, from the first byte read to the answer written; an acquire that waits includes its wait.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}, []string{"op"}),
		nodeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "lockgate_node_call_duration_seconds",
			Help:    "Latency of each call to one lock node (Redis master) by node and operation (acquire, extend, release, handoff, fence, inspect, check), failed calls included.",
			Buckets: []float64{.0002, .0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1},
		}, []string{"node", "op"}),
		nodeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockgate_node_call_errors_total",
			Help: "Failed calls to one lock node by node, operation and kind: timeout (the per-node timeout ran out), canceled (the client left), error (anything else: refused, reset, script error).",
		}, []string{"node", "op", "kind"}),
		quorum: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockgate_quorum_failures_total",
			Help: "Operations that ended because fewer than a quorum of nodes answered, by operation (acquire, fence, extend, release, inspect, check, repair: a node repaired without a quorum of others in service).",
		}, []string{"op"}),
		nodeState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "lockgate_node_state",
			Help: "1 for the state each lock node is in, 0 for the others: serving, unreachable, refusing (answers but refuses writes), lost (lost data it acknowledged; being quarantined), quarantined (out of service until repaired), uninitialized.",
		}, []string{"node", "state"}),
		nodeRefusing: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "lockgate_node_refusing",
			Help: "1 while a lock node refuses writes, with why: out of memory (maxmemory reached), persistence failing (MISCONF), read-only replica.",
		}, []string{"node", "reason"}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lockgate_fence_writebacks_total",
			Help: "Acquisitions whose fencing token fewer than a quorum of nodes already had, so the gateway raised the other nodes' counters before answering.",
		}),
	}
	version, revision := Build()
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "lockgate_build_info",
		Help:        "Always 1; its labels name the gateway's build: version (the module version: a pseudo-version of the commit for go build in a git clone, \"(devel)\" when the build recorded no VCS stamp) and revision (the VCS commit, \"unknown\" when the build recorded none, \"-dirty\" appended when the tree had changes).",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision},
	})
	build.Set(1)
	m.reg.MustRegister(m.requests, m.duration, m.nodeDuration, m.nodeErrors, m.quorum, m.fenced, m.nodeState, m.nodeRefusing,
		build, collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, op := range lockOps {
		m.duration.WithLabelValues(op)
		for _, outcome := range preOutcome[op] {
			m.requests.WithLabelValues(op, outcome)
		}
	}
	for _, op := range quorumOps {
		m.quorum.WithLabelValues(op)
	}
	return m
}

// Build names the running binary's build from what the Go toolchain
// recorded in it: the main module's version (a pseudo-version of the
// commit for go build in a git clone, "(devel)" when the build recorded no
// VCS stamp: go run, -buildvcs=false, a git worktree) and the VCS
// revision ("unknown" when none was recorded), with "-dirty" when the work
// tree had changes. The page shows the revision's first 12 hex digits,
// "+dirty" for "-dirty".
func Build() (version, revision string) {
	version, revision = "(devel)", "unknown"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return version, revision
	}
	if v := bi.Main.Version; v != "" {
		version = v
	}
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && revision != "unknown" {
		revision += "-dirty"
	}
	return version, revision
}

// Registry is the registry the collectors are on, for adding more.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves every metric in the Prometheus text exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Waiters exports, as the gauge lockgate_waiters, the number of acquires
// waiting for a held lock, read from waiting (e.g. (*lockcore.Redlock).Waiting)
// at every scrape. Call it at most once.
func (m *Metrics) Waiters(waiting func() int) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "lockgate_waiters",
		Help: "Acquire requests waiting for a held lock on this replica right now.",
	}, func() float64 { return float64(waiting()) }))
}

// PermitsInUse exports, as the gauge lockgate_permits_in_use, the
// semaphore permits granted or extended through this replica that are
// still held (not released through it, validity not run out), read from
// inUse (e.g. (*semaphore.Semaphores).InUse) at every scrape. Call it at
// most once.
func (m *Metrics) PermitsInUse(inUse func() int) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "lockgate_permits_in_use",
		Help: "Semaphore permits granted or extended through this replica and still held.",
	}, func() float64 { return float64(inUse()) }))
}

// Watch exports the watch hub's figures, read at every scrape: the gauge
// lockgate_watchers (long polls and event streams open now, from
// watchers), and the counters lockgate_watch_events_sent_total (events
// handed to watchers, from sent) and lockgate_watch_dropped_total
// (watchers dropped for reading too slowly, from dropped). Call it at most
// once.
func (m *Metrics) Watch(watchers func() int, sent, dropped func() int64) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "lockgate_watchers",
		Help: "Long polls and event streams open on this replica right now.",
	}, func() float64 { return float64(watchers()) }))
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "lockgate_watch_events_sent_total",
		Help: "Lock events handed to watchers on this replica.",
	}, func() float64 { return float64(sent()) }))
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "lockgate_watch_dropped_total",
		Help: "Watchers dropped for reading their events too slowly.",
	}, func() float64 { return float64(dropped()) }))
}

// Behind exports, as the gauge lockgate_node_behind, whether each node is
// behind (see (*lockcore.Redlock).Behind): behind is read at every scrape
// and must return one value per name, in the same order. Call it at most
// once.
func (m *Metrics) Behind(names []string, behind func() []bool) {
	for i, n := range names {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "lockgate_node_behind",
			Help:        "1 while a lock node is behind: it missed the grace of two calls in a row, and calls that a quorum of the other nodes decides do not wait for it until it answers one in time again.",
			ConstLabels: prometheus.Labels{"node": n},
		}, func() float64 {
			if b := behind(); i < len(b) && b[i] {
				return 1
			}
			return 0
		}))
	}
}

// NodeTimeout exports, as the gauge lockgate_node_timeout_seconds, the
// bound a node call is given at the moment of the scrape (see
// (*lockcore.Redlock).NodeTimeout): -node-timeout while the nodes answer
// quickly, up to -max-node-timeout while a quorum of them answers slower.
// Call it at most once.
func (m *Metrics) NodeTimeout(timeout func() time.Duration) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "lockgate_node_timeout_seconds",
		Help: "The bound a call to one lock node is given now: -node-timeout while the nodes answer quickly, following the latency of a quorum of them up to -max-node-timeout when they answer slower.",
	}, func() float64 { return timeout().Seconds() }))
}

// ServesAgain exports, as the gauge
// lockgate_node_serves_again_timestamp_seconds, when each node out of
// service is expected to serve again (Unix seconds: the end of its
// quarantine, or about two checks ahead while it recovers from the other
// nodes; see (*lockcore.Redlock).NodeReports), 0 while it serves or when
// nothing tells. until is read at every scrape and must return one value
// per name, in the same order (the zero time: 0). Call it at most once.
func (m *Metrics) ServesAgain(names []string, until func() []time.Time) {
	for i, n := range names {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "lockgate_node_serves_again_timestamp_seconds",
			Help:        "When a lock node out of service is expected to serve again, in Unix seconds (the end of its quarantine, or shortly while it recovers from the other nodes); 0 while it serves or when unknown.",
			ConstLabels: prometheus.Labels{"node": n},
		}, func() float64 {
			if u := until(); i < len(u) && !u[i].IsZero() {
				return float64(u[i].UnixMilli()) / 1000
			}
			return 0
		}))
	}
}

// Nodes exports the configured node count and quorum as the gauges
// lockgate_nodes and lockgate_quorum, each node's place in names (their
// configured order, from 0) as lockgate_node_index, and creates the
// per-node series at 0 so that a node that never fails still has an error
// counter to alert on. The index ties a node's name to its entry in the
// nodes of a /readyz 503, which are in the same order and unnamed. Call it
// at most once.
func (m *Metrics) Nodes(names []string, quorum int) {
	nodes := prometheus.NewGauge(prometheus.GaugeOpts{Name: "lockgate_nodes", Help: "Lock nodes (Redis masters) configured."})
	q := prometheus.NewGauge(prometheus.GaugeOpts{Name: "lockgate_quorum", Help: "Nodes that must agree: nodes/2+1."})
	index := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "lockgate_node_index",
		Help: "Each lock node's place in the configured list (-redis), from 0: its index in the nodes member of a /readyz 503, which names no node.",
	}, []string{"node"})
	nodes.Set(float64(len(names)))
	q.Set(float64(quorum))
	m.reg.MustRegister(nodes, q, index)
	for i, n := range names {
		index.WithLabelValues(n).Set(float64(i))
		for _, op := range []string{"acquire", "release", "check"} {
			for _, kind := range []string{"timeout", "error"} {
				m.nodeErrors.WithLabelValues(n, op, kind)
			}
		}
	}
}

// Request records one HTTP request: the operation it was for, its outcome,
// the status answered and how long it took. It is the shape of
// handlers.Options.OnRequest.
func (m *Metrics) Request(op, outcome string, status int, d time.Duration) {
	if outcome == "" {
		outcome = outcomeOf(status)
	}
	m.requests.WithLabelValues(op, outcome).Inc()
	m.duration.WithLabelValues(op).Observe(d.Seconds())
}

// outcomeOf names the outcome of a request that recorded none.
func outcomeOf(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "unauthorized"
	case status == http.StatusForbidden:
		return "forbidden"
	case status >= 200 && status < 400:
		return "ok"
	case status >= 400 && status < 500:
		return "client_error_" + strconv.Itoa(status)
	default:
		return "server_error"
	}
}

// NodeCall records one call to one node (lockcore.Observer).
func (m *Metrics) NodeCall(node, op string, d time.Duration, err error) {
	m.nodeDuration.WithLabelValues(node, op).Observe(d.Seconds())
	if err != nil {
		m.nodeErrors.WithLabelValues(node, op, errorKind(err)).Inc()
	}
}

// errorKind sorts a node error into timeout, canceled or error.
func errorKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	default:
		return "error"
	}
}

// QuorumFailed counts an operation that found no quorum (lockcore.Observer).
func (m *Metrics) QuorumFailed(op string) { m.quorum.WithLabelValues(op).Inc() }

// Fenced counts a fencing write-back (lockcore.Observer).
func (m *Metrics) Fenced() { m.fenced.Inc() }
