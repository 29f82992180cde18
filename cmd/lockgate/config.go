package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/lockgate/lockgate/auth"
	"github.com/lockgate/lockgate/lockcore/redisnode"
)

// config is the gateway's configuration. Every setting has a flag and a
// LOCKGATE_* environment variable; a flag given on the command line wins.
type config struct {
	Addr        string
	Redis       []string
	NodeTimeout time.Duration
	// MaxNodeTimeout is -max-node-timeout as given (0: the default of
	// lockcore.Options.MaxNodeTimeout).
	MaxNodeTimeout time.Duration
	DriftFactor    float64
	MinTTL         time.Duration
	MaxTTL         time.Duration
	DefaultTTL     time.Duration
	MaxWait        time.Duration
	MaxWaiters     int
	// MaxWatchers bounds long polls and event streams per replica
	// (watch.Options.MaxWatchers).
	MaxWatchers int
	// StreamIdle ends an event stream without events for that long
	// (handlers.Options.StreamIdle).
	StreamIdle time.Duration
	// WatchPoll is how often a prefix is listed, and a watched lock read
	// while its changes cannot all be heard announced (watch.Options.Poll).
	WatchPoll time.Duration
	// WaitersPerCaller is -max-waiters-per-caller as given (0: see
	// waiterShare).
	WaitersPerCaller int
	// ShutdownDelay is how long the gateway drains after SIGTERM before it
	// ends waits and stops (see run).
	ShutdownDelay time.Duration
	BodyLimit     int64
	LogLevel      string
	AuthFile      string
	tls           tlsSettings
	rateLimit     float64
	rateBurst     int
	// ui serves the read-only web page at /ui/ (handlers.Options.UI).
	ui bool

	// ReadHeaderTimeout, ReadBodyTimeout and MaxHeaderBytes bound how long
	// and how much the server reads of a request (see newServer).
	ReadHeaderTimeout time.Duration
	ReadBodyTimeout   time.Duration
	MaxHeaderBytes    int

	// tokens is the loaded -auth-file, nil when access control is off.
	tokens *auth.File
	// effective lists every setting's value (passwords masked) and where it
	// came from, in the order of settings, for the startup log line.
	effective []effective
	// unprotected is set by LOCKGATE_UNSAFE_NO_LOSS_PROTECTION=1 in a
	// build with the lockgate_unprotected tag (tests only, see
	// unprotectedMode).
	unprotected bool
	// redisPasswordFile is -redis-password-file, "" if unset.
	redisPasswordFile string
}

// effective is one setting as the gateway runs with it.
type effective struct {
	flag, value, source string // source: "flag", "env" or "default"
}

// setting is one configuration item: its flag, its environment variable,
// and how it parses.
type setting struct {
	flag, env, def, usage string
	set                   func(c *config, v string) error
}

func durationSetting(dst func(*config) *time.Duration) func(*config, string) error {
	return func(c *config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("not a duration like 50ms or 30s")
		}
		if d <= 0 {
			return fmt.Errorf("must be positive")
		}
		*dst(c) = d
		return nil
	}
}

var settings = []setting{
	{"addr", "LOCKGATE_ADDR", "127.0.0.1:8080", "listen address (host:port)", func(c *config, v string) error {
		if _, _, err := net.SplitHostPort(v); err != nil {
			return fmt.Errorf("not a host:port address")
		}
		c.Addr = v
		return nil
	}},
	{"redis", "LOCKGATE_REDIS", "", "comma-separated URLs of independent Redis nodes: redis://host:port or rediss://host:port, a Sentinel-managed primary redis-sentinel://host:port/mastername?addr=host:port, or a Redis Cluster redis-cluster://host:port?addr=host:port; empty: embedded in-memory store", func(c *config, v string) error {
		c.Redis = nil
		for _, u := range strings.Split(v, ",") {
			u = strings.TrimSpace(u)
			if u == "" {
				continue
			}
			if err := checkRedisURL(u); err != nil {
				return err
			}
			c.Redis = append(c.Redis, u)
		}
		seen := map[string]bool{}
		for _, u := range c.Redis {
			pu, _ := url.Parse(u)
			key := pu.Host + pu.Path
			if seen[key] {
				return fmt.Errorf("%s is listed twice; Redlock needs independent nodes", key)
			}
			seen[key] = true
		}
		return nil
	}},
	{"redis-password-file", "LOCKGATE_REDIS_PASSWORD_FILE", "", "file holding the Redis password, for every -redis URL without one (keeps it off the command line)", func(c *config, v string) error {
		c.redisPasswordFile = v
		if v == "" {
			return nil
		}
		if len(c.Redis) == 0 {
			return fmt.Errorf("is set but -redis (LOCKGATE_REDIS) is empty")
		}
		b, err := os.ReadFile(v)
		if err != nil {
			return err
		}
		pw := strings.TrimRight(string(b), "\r\n")
		if pw == "" {
			return fmt.Errorf("%s is empty", v)
		}
		for i, raw := range c.Redis {
			u, _ := url.Parse(raw) // parsed by -redis already
			if _, has := u.User.Password(); has {
				continue
			}
			u.User = url.UserPassword(u.User.Username(), pw)
			c.Redis[i] = u.String()
		}
		return nil
	}},
	{"node-timeout", "LOCKGATE_NODE_TIMEOUT", "50ms", "bound on each call to one Redis node", durationSetting(func(c *config) *time.Duration { return &c.NodeTimeout })},
	{"max-node-timeout", "LOCKGATE_MAX_NODE_TIMEOUT", "0", "most a call to one Redis node is ever given: when a majority of nodes answers slower than -node-timeout (a busy CPU), the bound follows them up to this, so that load slows calls rather than failing them; 0: ten times -node-timeout, at most half of -max-ttl; equal to -node-timeout: a fixed bound", func(c *config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("not a duration like 500ms or 1s")
		}
		if d < 0 {
			return fmt.Errorf("must be positive, or 0 for ten times -node-timeout")
		}
		c.MaxNodeTimeout = d
		return nil
	}},
	{"drift-factor", "LOCKGATE_DRIFT_FACTOR", "0.01", "share of the TTL set aside for clock drift (plus 2ms)", func(c *config, v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 || f >= 0.5 {
			return fmt.Errorf("must be a number above 0 and below 0.5")
		}
		c.DriftFactor = f
		return nil
	}},
	{"min-ttl", "LOCKGATE_MIN_TTL", "100ms", "smallest lock TTL a client may ask for", durationSetting(func(c *config) *time.Duration { return &c.MinTTL })},
	{"max-ttl", "LOCKGATE_MAX_TTL", "1h", "largest lock TTL a client may ask for (at most 24h)", durationSetting(func(c *config) *time.Duration { return &c.MaxTTL })},
	{"default-ttl", "LOCKGATE_DEFAULT_TTL", "30s", "TTL of an acquire without ttl_ms", durationSetting(func(c *config) *time.Duration { return &c.DefaultTTL })},
	{"max-wait", "LOCKGATE_MAX_WAIT", "5m", "largest wait_ms a client may ask for (at most 5m)", durationSetting(func(c *config) *time.Duration { return &c.MaxWait })},
	{"max-waiters", "LOCKGATE_MAX_WAITERS", "10000", "waiting acquires per replica before 429", func(c *config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("must be a whole number ≥ 1")
		}
		c.MaxWaiters = n
		return nil
	}},
	{"max-watchers", "LOCKGATE_MAX_WATCHERS", "1000", "long polls and event streams (GET /locks/{resource} with wait_ms or Accept: text/event-stream) per replica before 429", func(c *config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("must be a whole number ≥ 1")
		}
		c.MaxWatchers = n
		return nil
	}},
	{"watch-poll", "LOCKGATE_WATCH_POLL", "1s", "how often a prefix event stream lists its prefix, and how often a watched lock is read while its replica cannot hear every release and acquisition from the nodes' announcements (too few nodes announce, or could be subscribed to); a watched lock whose changes are announced is never polled", durationSetting(func(c *config) *time.Duration { return &c.WatchPoll })},
	{"stream-idle", "LOCKGATE_STREAM_IDLE", "5m", "an event stream without an event for this long ends (the client connects again)", durationSetting(func(c *config) *time.Duration { return &c.StreamIdle })},
	{"max-waiters-per-caller", "LOCKGATE_MAX_WAITERS_PER_CALLER", "0", "waiting acquires one caller (token name, client certificate, else IP address) may have on a replica before 429, within -max-waiters; 0: a quarter of -max-waiters", func(c *config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("must be a whole number ≥ 0 (0: a quarter of -max-waiters)")
		}
		c.WaitersPerCaller = n
		return nil
	}},
	{"body-limit", "LOCKGATE_BODY_LIMIT", "16384", "largest request body in bytes before 413", func(c *config, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 256 || n > 1<<20 {
			return fmt.Errorf("must be a whole number of bytes from 256 to 1048576")
		}
		c.BodyLimit = n
		return nil
	}},
	{"read-header-timeout", "LOCKGATE_READ_HEADER_TIMEOUT", "10s", "time a client has to send a request's headers before the connection is closed", durationSetting(func(c *config) *time.Duration { return &c.ReadHeaderTimeout })},
	{"read-body-timeout", "LOCKGATE_READ_BODY_TIMEOUT", "5s", "time a client has to send a request's body before 400 and a closed connection (a wait_ms is not counted)", durationSetting(func(c *config) *time.Duration { return &c.ReadBodyTimeout })},
	{"max-header-bytes", "LOCKGATE_MAX_HEADER_BYTES", "16384", "largest request line and headers in bytes before 431", func(c *config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1024 || n > 1<<20 {
			return fmt.Errorf("must be a whole number of bytes from 1024 to 1048576")
		}
		c.MaxHeaderBytes = n
		return nil
	}},
	{"ui", "LOCKGATE_UI", "true", "serve the read-only web page of held locks and node states at /ui/ (true or false); it shows only what GET /locks and /metrics answer", func(c *config, v string) error {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("must be true or false")
		}
		c.ui = on
		return nil
	}},
	{"shutdown-delay", "LOCKGATE_SHUTDOWN_DELAY", "5s", "after SIGTERM, how long /readyz answers 503 while the gateway still serves, so that load balancers stop sending it requests; then waits end with 503 and requests in flight finish (at most 20s, so that the gateway exits within 30s of SIGTERM; 0: at once)", func(c *config, v string) error {
		d, err := time.ParseDuration(v)
		switch {
		case err != nil:
			return fmt.Errorf("not a duration like 5s or 0s")
		case d < 0 || d > maxShutdownDelay:
			return fmt.Errorf("must be from 0s to %v", maxShutdownDelay)
		}
		c.ShutdownDelay = d
		return nil
	}},
	{"log-level", "LOCKGATE_LOG_LEVEL", "info", "debug, info, warn or error", func(c *config, v string) error {
		switch v {
		case "debug", "info", "warn", "error":
			c.LogLevel = v
			return nil
		}
		return fmt.Errorf("must be debug, info, warn or error")
	}},
	{"auth-file", "LOCKGATE_AUTH_FILE", "", "file of bearer tokens, each allowed some methods on some resource-name prefixes (format: docs/operations.md); empty: no access control", func(c *config, v string) error {
		c.AuthFile, c.tokens = v, nil
		if v == "" {
			return nil
		}
		p, err := auth.Open(v)
		if err != nil {
			return err
		}
		c.tokens = p
		return nil
	}},
}

// configError names the setting at fault as it was given: the flag, or
// the variable, or, for a default, the flag with its variable unset.
type configError struct {
	flag, env, value string
	source           string // "flag", "env" or "default", as in effective
	err              error
}

func (e *configError) Error() string {
	switch e.source {
	case "flag":
		return fmt.Sprintf("bad setting -%s %q: %v", e.flag, e.value, e.err)
	case "env":
		return fmt.Sprintf("bad setting %s=%q: %v", e.env, e.value, e.err)
	}
	return fmt.Sprintf("bad setting -%s (default %q, %s unset): %v", e.flag, e.value, e.env, e.err)
}

// parseConfig reads flags from args and LOCKGATE_* variables from getenv.
func parseConfig(args []string, getenv func(string) string, usage io.Writer) (*config, error) {
	fs := flag.NewFlagSet("lockgate", flag.ContinueOnError)
	fs.SetOutput(usage)
	fs.Usage = func() { printUsage(fs.Output()) }
	vals := make([]*string, len(settings))
	for i, s := range settings {
		vals[i] = fs.String(s.flag, s.def, s.usage+" (env "+s.env+")")
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q: the gateway's settings are flags like -redis URL, "+
			"and the subcommands (run, acquire, extend, release, status) come first (lockgate -h)", fs.Arg(0))
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })

	c := &config{}
	for i, s := range settings {
		v, source := *vals[i], "default"
		if given[s.flag] {
			source = "flag"
		} else if ev := getenv(s.env); ev != "" {
			v, source = ev, "env"
		}
		shown := v
		if s.flag == "redis" {
			shown = redactURLs(v)
		}
		if err := s.set(c, v); err != nil {
			return nil, &configError{flag: s.flag, env: s.env, value: shown, source: source, err: err}
		}
		c.effective = append(c.effective, effective{flag: s.flag, value: shown, source: source})
	}
	return c, c.check()
}

// waiterShare is each caller's share of the replica's waiters:
// -max-waiters-per-caller, or a quarter of -max-waiters (at least 1) when
// it is 0, so that one caller never holds every waiting slot.
func (c *config) waiterShare() int {
	if c.WaitersPerCaller > 0 {
		return c.WaitersPerCaller
	}
	return max(c.MaxWaiters/4, 1)
}

// check catches settings that contradict each other. The error names the
// setting the operator gave (a flag or a variable) rather than one left at
// its default, and says which other setting it contradicts.
func (c *config) check() error {
	given := map[string]bool{}
	envOf := map[string]string{}
	for _, s := range settings {
		envOf[s.flag] = s.env
	}
	as := map[string]effective{}
	for _, e := range c.effective {
		given[e.flag] = e.source != "default"
		as[e.flag] = e
	}
	// bad names flag as it was given, with the value as written there.
	bad := func(flag string, v any, format string, args ...any) error {
		e, ok := as[flag]
		if !ok {
			e = effective{value: fmt.Sprint(v), source: "default"}
		}
		return &configError{flag: flag, env: envOf[flag], value: e.value, source: e.source, err: fmt.Errorf(format, args...)}
	}
	// conflict blames a unless only b was given.
	conflict := func(a string, av any, aWhy string, b string, bv any, bWhy string) error {
		if given[b] && !given[a] {
			return bad(b, bv, bWhy, a, av)
		}
		return bad(a, av, aWhy, b, bv)
	}
	switch {
	case c.MaxTTL > 24*time.Hour:
		return bad("max-ttl", c.MaxTTL, "must be at most 24h")
	case c.MaxWait > 5*time.Minute:
		return bad("max-wait", c.MaxWait, "must be at most 5m (the API's wait_ms limit)")
	case c.MinTTL > c.MaxTTL:
		return conflict("min-ttl", c.MinTTL, "is above -%s %v", "max-ttl", c.MaxTTL, "is below -%s %v")
	case c.DefaultTTL < c.MinTTL:
		return conflict("default-ttl", c.DefaultTTL, "is below -%s %v", "min-ttl", c.MinTTL, "is above -%s %v")
	case c.DefaultTTL > c.MaxTTL:
		return conflict("default-ttl", c.DefaultTTL, "is above -%s %v", "max-ttl", c.MaxTTL, "is below -%s %v")
	case c.WaitersPerCaller > c.MaxWaiters:
		return conflict("max-waiters-per-caller", c.WaitersPerCaller, "is above -%s %v",
			"max-waiters", c.MaxWaiters, "is below -%s %v")
	case c.NodeTimeout*2 > c.MinTTL:
		return conflict("node-timeout", c.NodeTimeout, "must be at most half of -%s %v, or too little validity is left",
			"min-ttl", c.MinTTL, "must be at least twice -%s %v, or too little validity is left")
	case c.MaxNodeTimeout != 0 && c.MaxNodeTimeout < c.NodeTimeout:
		return conflict("max-node-timeout", c.MaxNodeTimeout, "is below -%s %v (equal keeps the bound fixed)",
			"node-timeout", c.NodeTimeout, "is above -%s %v")
	case c.MaxNodeTimeout*2 > c.MaxTTL:
		return conflict("max-node-timeout", c.MaxNodeTimeout, "must be at most half of -%s %v, or too little validity is left",
			"max-ttl", c.MaxTTL, "must be at least twice -%s %v, or too little validity is left")
	}
	return nil
}

// redactURL hides a Redis URL's password.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		if err != nil {
			return maskURL(raw)
		}
		return raw
	}
	return u.Redacted()
}

func redactURLs(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		parts[i] = redactURL(strings.TrimSpace(p))
	}
	return strings.Join(parts, ",")
}

// checkRedisURL checks one node's URL: redis:// or rediss:// with a host
// and a port in range, a redis-sentinel:// (rediss-sentinel://) URL that
// redisnode.ParseSentinelURL reads, each Sentinel's port in range, or a
// redis-cluster:// (rediss-cluster://) URL that redisnode.ParseClusterURL
// reads, each seed's port in range.
func checkRedisURL(u string) error {
	pu, err := url.Parse(u)
	var check func(string) error
	known := false
	if err == nil && pu.Host != "" {
		check, known = schemeChecks[pu.Scheme]
	}
	if !known {
		return fmt.Errorf("%q is not a redis://host:port, rediss://host:port, redis-sentinel://host:port/mastername or redis-cluster://host:port URL", redactURL(u))
	}
	if check != nil {
		if err := check(u); err != nil {
			return fmt.Errorf("%s: %w", redactURL(u), err)
		}
	}
	if err := checkPort(pu); err != nil {
		return fmt.Errorf("%s: %w", redactURL(u), err)
	}
	return nil
}

// schemeChecks are the node URL schemes -redis takes, each with what it
// checks beyond a host and a port in range (nil: nothing).
var schemeChecks = map[string]func(string) error{
	"redis": nil, "rediss": nil,
	"redis-sentinel": checkSentinelURL, "rediss-sentinel": checkSentinelURL,
	"redis-cluster": checkClusterURL, "rediss-cluster": checkClusterURL,
}

// checkSentinelURL checks a redis-sentinel:// URL: redisnode.ParseSentinelURL
// reads it, and every Sentinel's port is in range.
func checkSentinelURL(u string) error {
	fo, err := redisnode.ParseSentinelURL(u)
	if err != nil {
		return err
	}
	for _, a := range fo.SentinelAddrs[1:] {
		if err := checkPort(&url.URL{Host: a}); err != nil {
			return err
		}
	}
	return nil
}

// checkClusterURL checks a redis-cluster:// URL: redisnode.ParseClusterURL
// reads it, and every seed's port is in range.
func checkClusterURL(u string) error {
	co, err := redisnode.ParseClusterURL(u)
	if err != nil {
		return err
	}
	for _, a := range co.Addrs[1:] {
		if err := checkPort(&url.URL{Host: a}); err != nil {
			return err
		}
	}
	return nil
}

// checkPort refuses a port url.Parse lets through but no dial can use
// (url.Parse checks only that it is digits): 0 or above 65535. No port
// means Redis's 6379.
func checkPort(u *url.URL) error {
	p := u.Port()
	if p == "" {
		return nil
	}
	if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %s is not from 1 to 65535", p)
	}
	return nil
}
