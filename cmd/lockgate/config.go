package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// config is the gateway's configuration. Every setting has a flag and a
// LOCKGATE_* environment variable; a flag given on the command line wins.
type config struct {
	Addr        string
	Redis       []string
	NodeTimeout time.Duration
	DriftFactor float64
	MinTTL      time.Duration
	MaxTTL      time.Duration
	DefaultTTL  time.Duration
	MaxWait     time.Duration
	MaxWaiters  int
	BodyLimit   int64
	LogLevel    string
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
	{"redis", "LOCKGATE_REDIS", "", "comma-separated redis:// or rediss:// URLs of independent Redis masters; empty: embedded in-memory store", func(c *config, v string) error {
		c.Redis = nil
		for _, u := range strings.Split(v, ",") {
			u = strings.TrimSpace(u)
			if u == "" {
				continue
			}
			pu, err := url.Parse(u)
			if err != nil || (pu.Scheme != "redis" && pu.Scheme != "rediss") || pu.Host == "" {
				return fmt.Errorf("%q is not a redis://host:port or rediss://host:port URL", redactURL(u))
			}
			c.Redis = append(c.Redis, u)
		}
		seen := map[string]bool{}
		for _, u := range c.Redis {
			pu, _ := url.Parse(u)
			if seen[pu.Host] {
				return fmt.Errorf("%s is listed twice; Redlock needs independent nodes", pu.Host)
			}
			seen[pu.Host] = true
		}
		return nil
	}},
	{"node-timeout", "LOCKGATE_NODE_TIMEOUT", "50ms", "bound on each call to one Redis node", durationSetting(func(c *config) *time.Duration { return &c.NodeTimeout })},
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
	{"body-limit", "LOCKGATE_BODY_LIMIT", "16384", "largest request body in bytes before 413", func(c *config, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 256 || n > 1<<20 {
			return fmt.Errorf("must be a whole number of bytes from 256 to 1048576")
		}
		c.BodyLimit = n
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
}

// configError names the setting at fault.
type configError struct {
	flag, env, value string
	err              error
}

func (e *configError) Error() string {
	return fmt.Sprintf("bad setting -%s (%s=%q): %v", e.flag, e.env, e.value, e.err)
}

// parseConfig reads flags from args and LOCKGATE_* variables from getenv.
func parseConfig(args []string, getenv func(string) string, usage io.Writer) (*config, error) {
	fs := flag.NewFlagSet("lockgate", flag.ContinueOnError)
	fs.SetOutput(usage)
	vals := make([]*string, len(settings))
	for i, s := range settings {
		vals[i] = fs.String(s.flag, s.def, s.usage+" (env "+s.env+")")
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (settings are flags like -redis URL)", fs.Arg(0))
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })

	c := &config{}
	for i, s := range settings {
		v := *vals[i]
		if ev := getenv(s.env); ev != "" && !given[s.flag] {
			v = ev
		}
		if err := s.set(c, v); err != nil {
			shown := v
			if s.flag == "redis" {
				shown = redactURLs(v)
			}
			return nil, &configError{flag: s.flag, env: s.env, value: shown, err: err}
		}
	}
	return c, c.check()
}

// check catches settings that contradict each other.
func (c *config) check() error {
	bad := func(flag, env string, v any, format string, args ...any) error {
		return &configError{flag: flag, env: env, value: fmt.Sprint(v), err: fmt.Errorf(format, args...)}
	}
	switch {
	case c.MaxTTL > 24*time.Hour:
		return bad("max-ttl", "LOCKGATE_MAX_TTL", c.MaxTTL, "must be at most 24h")
	case c.MinTTL > c.MaxTTL:
		return bad("min-ttl", "LOCKGATE_MIN_TTL", c.MinTTL, "is above -max-ttl %v", c.MaxTTL)
	case c.DefaultTTL < c.MinTTL || c.DefaultTTL > c.MaxTTL:
		return bad("default-ttl", "LOCKGATE_DEFAULT_TTL", c.DefaultTTL, "must lie between -min-ttl %v and -max-ttl %v", c.MinTTL, c.MaxTTL)
	case c.MaxWait > 5*time.Minute:
		return bad("max-wait", "LOCKGATE_MAX_WAIT", c.MaxWait, "must be at most 5m (the API's wait_ms limit)")
	case c.NodeTimeout*2 > c.MinTTL:
		return bad("node-timeout", "LOCKGATE_NODE_TIMEOUT", c.NodeTimeout, "must be at most half of -min-ttl %v, or too little validity is left", c.MinTTL)
	}
	return nil
}

// redactURL hides a Redis URL's password.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		if err != nil {
			return "(unparseable URL)"
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
