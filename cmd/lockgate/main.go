// Command lockgate is the lock gateway: an HTTP API for distributed locks
// with fencing tokens, running Redlock over independent Redis masters, or an
// embedded in-memory store when no Redis is configured.
//
//	go run ./cmd/lockgate                       # embedded store on 127.0.0.1:8080
//	go run ./cmd/lockgate -redis redis://127.0.0.1:6379,redis://127.0.0.1:6380,redis://127.0.0.1:6381
//
// Run with -h for every setting; each has a LOCKGATE_* environment variable.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/lockgate/lockgate/handlers"
	"github.com/lockgate/lockgate/internal/unprotected"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
	"github.com/lockgate/lockgate/lockcore/redisnode"
	"github.com/lockgate/lockgate/lockcore/semaphore"
	"github.com/lockgate/lockgate/lockcore/watch"
	"github.com/lockgate/lockgate/metrics"
	"github.com/lockgate/lockgate/ui"
)

func main() {
	// A first argument that is not a flag names a subcommand (or a typo of one).
	if len(os.Args) > 1 && !strings.HasPrefix(os.Args[1], "-") {
		os.Exit(subcommand(os.Args[1], os.Args[2:], os.Getenv, os.Stdout, os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr, nil); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "lockgate:", err)
		os.Exit(2)
	}
}

// run starts the gateway and serves until ctx ends, then drains and shuts
// down (see shutdown). ready, if not nil, is called with the listening
// address.
func run(ctx context.Context, args []string, getenv func(string) string, logOut io.Writer, ready func(addr string)) error {
	cfg, err := parseConfig(args, getenv, logOut)
	if err != nil {
		return err
	}
	level, _ := zerolog.ParseLevel(cfg.LogLevel)
	log := zerolog.New(logOut).Level(level).With().Timestamp().Str("service", "lockgate").Logger()
	// Before any Redis client exists: go-redis logs (failed dials of the
	// first PING) to its own plain-text logger until told otherwise.
	redis.SetLogger(redisLogger{log.With().Str("component", "go-redis").Logger()})
	logConfig(log, cfg)

	cfg.unprotected = unprotectedMode(getenv, log)
	nodes, closeNodes, err := openNodes(cfg, log)
	if err != nil {
		return err
	}
	defer closeNodes()
	m := metrics.New()
	locker, err := lockcore.New(nodes, &lockcore.Options{
		NodeTimeout: cfg.NodeTimeout, MaxNodeTimeout: cfg.MaxNodeTimeout, DriftFactor: cfg.DriftFactor,
		MinTTL: cfg.MinTTL, MaxTTL: cfg.MaxTTL, MaxWait: cfg.MaxWait, MaxWaiters: cfg.MaxWaiters,
		Observer: nodeLog{m, log},
	})
	if err != nil {
		return err
	}
	defer locker.Close() // on every return; the shutdown below closes it first
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.String()
	}
	m.Nodes(names, locker.Quorum())
	if len(cfg.Redis) > 0 {
		warnSilentNodes(ctx, nodes, locker.Quorum(), log)
	}
	m.Waiters(locker.Waiting)
	sems := semaphore.New(locker)
	m.PermitsInUse(sems.InUse)
	m.Behind(names, locker.Behind)
	m.NodeTimeout(locker.NodeTimeout)
	m.ServesAgain(names, func() []time.Time {
		reports := locker.NodeReports()
		out := make([]time.Time, len(reports))
		for i, r := range reports {
			out[i] = r.Until
		}
		return out
	})

	hub := watch.New(locker, &watch.Options{MaxWatchers: cfg.MaxWatchers, Poll: cfg.WatchPoll})
	defer hub.Close()
	m.Watch(hub.Watchers, hub.EventsSent, hub.Dropped)

	tp, err := tracing(ctx, getenv)
	if err != nil {
		return err
	}
	if tp != nil {
		log.Info().Msg("tracing on: spans exported over OTLP (OTEL_* environment)")
		defer func() {
			fctx, cancel := context.WithTimeout(context.Background(), traceFlush)
			defer cancel()
			_ = tp.Shutdown(fctx)
		}()
	}
	drain := handlers.NewDrain()
	hopts := &handlers.Options{
		Logger: &log, BodyLimit: cfg.BodyLimit, DefaultTTL: cfg.DefaultTTL,
		OnRequest: m.Request, Metrics: m.Handler(), WaitersPerCaller: cfg.waiterShare(),
		Watch: hub, StreamIdle: cfg.StreamIdle, Semaphores: sems, Drain: drain,
	}
	if tp != nil {
		hopts.Tracer = tp
	}
	if cfg.ui {
		hopts.UI = ui.Files()
	}
	if cfg.tls.clientCA != "" {
		hopts.Middleware = append(hopts.Middleware, requireClientCert)
	}
	stopHangup := wireOps(ctx, cfg, log, hopts)
	defer stopHangup()
	h, err := handlers.New(locker, hopts)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return listenError(cfg, err)
	}
	ln, scheme, err := serveTLS(ctx, cfg, log, ln)
	if err != nil {
		return err
	}
	srv := newServer(cfg, h)
	stopped := make(chan struct{})
	srv.RegisterOnShutdown(func() {
		// Shutdown has closed the listeners: no new request arrives.
		drain.EndStreams()
		locker.Close() // waits end: 503 shutting-down with Retry-After
		hub.Close()    // long polls end; streams have had their shutdown event
		close(stopped)
	})
	log.Info().Str("addr", ln.Addr().String()).Str("scheme", scheme).Int("nodes", len(nodes)).Int("quorum", locker.Quorum()).
		Dur("node_timeout", cfg.NodeTimeout).Dur("min_ttl", cfg.MinTTL).Dur("max_ttl", cfg.MaxTTL).
		Dur("max_wait", cfg.MaxWait).Msg("lockgate listening")
	if ready != nil {
		ready(ln.Addr().String())
	}

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	return shutdown(srv, drain, cfg.ShutdownDelay, errc, stopped, log)
}

// shutdown drains the gateway and stops it, within shutdownBudget:
//
//  1. /readyz answers 503 at once and responses carry Connection: close,
//     so that load balancers (a Kubernetes Service, whose endpoints are
//     removed asynchronously) stop sending requests and clients connect
//     again elsewhere; everything else is served as before, for delay;
//  2. then the listeners close, waits end with 503 shutting-down and
//     Retry-After, event streams end with a shutdown event, long polls
//     with 503, and requests in flight finish.
//
// No lock is released: a client's lease is its own, renewed through
// another replica. stopped is closed once the OnShutdown hook has ended
// the waits and streams.
func shutdown(srv *http.Server, drain *handlers.Drain, delay time.Duration, errc <-chan error, stopped <-chan struct{}, log zerolog.Logger) error {
	drain.Begin()
	log.Info().Dur("shutdown_delay", delay).Msg("draining: /readyz answers 503, requests are still served")
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case err := <-errc:
		return err
	case <-t.C:
	}
	log.Info().Msg("shutting down: ending waits and event streams, finishing requests in flight")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownBudget-delay)
	defer cancel()
	err := srv.Shutdown(sctx)
	<-stopped
	if err != nil {
		_ = srv.Close()
		return fmt.Errorf("shutdown: requests still in flight after %v: %w", shutdownBudget, err)
	}
	log.Info().Msg("stopped")
	return nil
}

// openNodes returns one node per Redis URL, or the embedded in-memory node.
func openNodes(cfg *config, log zerolog.Logger) ([]lockcore.Node, func(), error) {
	if len(cfg.Redis) == 0 {
		log.Warn().Msg("no Redis configured (-redis / LOCKGATE_REDIS): using the embedded in-memory lock store; " +
			"locks live in this process only and are lost when it exits; fencing tokens start from the clock, so they keep growing across restarts")
		// Tokens start from the wall clock (see lockcore.ClockFloor), so
		// that a restarted gateway never hands out a token it gave before.
		n := memnode.New(&memnode.Options{Name: "embedded", Floor: lockcore.ClockFloor(time.Now())})
		return []lockcore.Node{n}, n.Close, nil
	}
	var nodes []lockcore.Node
	var rn []interface{ Close() error }
	closeAll := func() {
		for _, n := range rn {
			_ = n.Close()
		}
	}
	for _, u := range cfg.Redis {
		n, err := openNode(u)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("bad setting -redis (LOCKGATE_REDIS): %s: %w", redactURL(u), err)
		}
		if un, ok := n.(interface{ Unprotect(unprotected.Key) }); ok && cfg.unprotected {
			un.Unprotect(unprotected.Key{}) // a Cluster node is always protected
		}
		nodes = append(nodes, n)
		rn = append(rn, n)
	}
	if len(nodes)%2 == 0 {
		log.Warn().Int("nodes", len(nodes)).Msg(evenNodesWarning(len(nodes)))
	}
	log.Info().Int("nodes", len(nodes)).Int("quorum", len(nodes)/2+1).Msg("Redlock over independent Redis masters")
	return nodes, closeAll, nil
}

// openNode opens one Redlock node: a Redis Cluster for a redis-cluster://
// URL (always protected against data loss), a single server or a
// Sentinel-managed primary otherwise.
func openNode(u string) (interface {
	lockcore.Node
	Close() error
}, error) {
	if redisnode.IsClusterURL(u) {
		return redisnode.NewCluster(u)
	}
	return redisnode.New(u)
}

// unprotectedEnv turns off the detection of nodes that lost data, in a
// gateway built with the lockgate_unprotected tag only (unprotectedBuild):
// the fault-injection suite builds one to show what the protection
// prevents. A production build never reads it.
const unprotectedEnv = "LOCKGATE_UNSAFE_NO_LOSS_PROTECTION"

// unprotectedMode reports whether this gateway runs with the protection
// off: a build with the lockgate_unprotected tag and unprotectedEnv set to
// 1. It warns loudly when it does.
func unprotectedMode(getenv func(string) string, log zerolog.Logger) bool {
	if !unprotectedBuild || getenv(unprotectedEnv) != "1" {
		return false
	}
	log.Warn().Str("env", unprotectedEnv).Msg("UNSAFE: data-loss protection is off; a node that loses its data " +
		"can make fencing tokens repeat or go back. For fault-injection tests only")
	return true
}

// nodeLog is the Observer the gateway gives lockcore: the metrics, and a
// log line whenever a node's state changes, naming the cause.
type nodeLog struct {
	*metrics.Metrics
	log zerolog.Logger
}

// NodeState implements lockcore.HealthObserver.
func (o nodeLog) NodeState(node string, state lockcore.NodeState, reason string) {
	o.Metrics.NodeState(node, state, reason)
	ev := o.log.Warn()
	if state == lockcore.NodeServing {
		ev = o.log.Info()
	}
	ev = ev.Str("node", node).Str("state", string(state))
	if reason != "" {
		ev = ev.Str("reason", reason)
	}
	ev.Msg(nodeStateMessages[state])
}

var nodeStateMessages = map[lockcore.NodeState]string{
	lockcore.NodeServing:       "lock node serving",
	lockcore.NodeUnreachable:   "lock node not answering its check",
	lockcore.NodeRefusing:      "lock node refuses writes: it does not count towards the quorum",
	lockcore.NodeLost:          "lock node found restarted or without data it had acknowledged (reason says which): out of service while it is recovered",
	lockcore.NodeQuarantined:   "lock node quarantined: out of service until repaired, after the largest TTL",
	lockcore.NodeUninitialized: "lock node holds no lockgate data yet",
}

// evenNodesWarning explains why n (even) nodes are a poor choice.
func evenNodesWarning(n int) string {
	q := n/2 + 1
	return fmt.Sprintf("even number of Redis nodes: %d nodes need a majority of %d, so they tolerate %d failed node(s), "+
		"the same as %d nodes, while one more node can fail; and a network split into two halves of %d leaves "+
		"neither half a majority; use an odd number (%d or %d)", n, q, n-q, n-1, n/2, n-1, n+1)
}

// logConfig logs the effective configuration once, passwords masked, and
// what it means for access control.
func logConfig(log zerolog.Logger, cfg *config) {
	shown := zerolog.Dict()
	var fromFlags, fromEnv []string
	for _, e := range cfg.effective {
		shown = shown.Str(e.flag, e.value)
		switch e.source {
		case "flag":
			fromFlags = append(fromFlags, e.flag)
		case "env":
			fromEnv = append(fromEnv, e.flag)
		}
	}
	log.Info().Dict("settings", shown).Strs("from_flags", fromFlags).Strs("from_env", fromEnv).
		Msg("configuration")
	if f := cfg.redisPasswordFile; f != "" {
		if fi, err := os.Stat(f); err == nil && fi.Mode().Perm()&0o077 != 0 {
			log.Warn().Str("redis_password_file", f).Str("mode", fi.Mode().Perm().String()).
				Msg("the Redis password file is readable by other users of this machine; chmod 600 it")
		}
	}
	if cfg.tokens != nil {
		log.Info().Str("auth_file", cfg.AuthFile).Int("tokens", cfg.tokens.Policy().Len()).
			Msg("access control on: /locks needs a bearer token from the auth file")
		warnReadableAuthFile(log, cfg.AuthFile)
		warnOpenPrefixes(log, cfg.AuthFile, cfg.tokens.Policy())
		return
	}
	ev := log.Info()
	if host, _, _ := net.SplitHostPort(cfg.Addr); !isLoopback(host) {
		ev = log.Warn()
	}
	ev.Str("addr", cfg.Addr).Msg("access control off (-auth-file / LOCKGATE_AUTH_FILE unset): " +
		"anyone who reaches the address can take and release any lock")
}

// isLoopback reports whether host is localhost or a loopback IP.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
