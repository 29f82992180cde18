package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockgate/lockgate/internal/testlog"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// badValues lists, for every setting, values that must stop the start.
// TestEveryBadValueNamesItsSetting fails when a setting has none, so a new
// setting needs a line here.
func badValues(t *testing.T) map[string][]string {
	dir := t.TempDir()
	garbled := filepath.Join(dir, "garbled")
	if err := os.WriteFile(garbled, []byte("not-a-valid-line\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("# no tokens\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return map[string][]string{
		"addr": {"localhost", "no-port-here", ":::"},
		"redis": {"http://h:6379", "redis://", "redis://h:1,redis://h:1", "h:6379", "redis://:pw@127.0.0.1:70000", "redis://h:0",
			"redis-sentinel://h:26379", "redis-sentinel://h:26379/m?addr=h2:99999", "redis-sentinel://h:26379/m?db=1",
			"redis-cluster://h:1/0", "redis-cluster://h:1?addr=h2:99999", "redis-cluster://h:1?db=1", "redis-cluster://h:1?addr=h2"},
		"redis-password-file":    {filepath.Join(dir, "absent"), dir, emptyFile(t, dir)},
		"node-timeout":           {"fast", "0s", "-5ms", "60ms" /* above half of the default -min-ttl 100ms */},
		"max-node-timeout":       {"slow", "-1s", "10ms" /* below -node-timeout */, "31m" /* above half of -max-ttl */},
		"drift-factor":           {"x", "0", "-0.1", "0.5"},
		"min-ttl":                {"1", "0s", "2h" /* above -max-ttl */, "60ms" /* below twice -node-timeout */},
		"max-ttl":                {"forever", "25h", "50ms" /* below -min-ttl */, "10s" /* below -default-ttl */},
		"default-ttl":            {"30", "2h" /* above -max-ttl */, "10ms" /* below -min-ttl */},
		"max-wait":               {"x", "0s", "6m"},
		"max-waiters":            {"0", "-1", "many"},
		"body-limit":             {"x", "10", "2000000"},
		"max-waiters-per-caller": {"-1", "many", "10001" /* above -max-waiters */},
		"max-watchers":           {"0", "-1", "many"},
		"stream-idle":            {"x", "0s", "-1s"},
		"shutdown-delay":         {"x", "-1s", "21s"},
		"watch-poll":             {"x", "0s", "-1s"},
		"ui":                     {"yes", "on", "2"},
		"log-level":              {"loud", "INFO", "trace"},
		"auth-file":              {filepath.Join(dir, "absent"), garbled, empty},
		"rate-limit":             {"fast", "-1", "2e6"},
		"rate-burst":             {"0", "x", "1.5"},
		"tls-cert":               {filepath.Join(dir, "absent"), garbled, dir},
		"tls-key":                {filepath.Join(dir, "absent"), garbled, dir},
		"tls-client-ca":          {filepath.Join(dir, "absent"), garbled, dir},

		"read-header-timeout": {"10", "0s", "-1s"},
		"read-body-timeout":   {"soon", "0s", "-1s"},
		"max-header-bytes":    {"x", "1023", "1048577", "-1"},
	}
}

func TestEveryBadValueNamesItsSetting(t *testing.T) {
	bad := badValues(t)
	for _, s := range settings {
		values := bad[s.flag]
		if len(values) == 0 {
			t.Errorf("setting -%s has no bad value in badValues: add some", s.flag)
		}
		for _, v := range values {
			for _, via := range []string{"flag", "env"} {
				t.Run(s.flag+"="+v+" by "+via, func(t *testing.T) {
					var args []string
					env := map[string]string{}
					if via == "flag" {
						args = []string{"-" + s.flag, v}
					} else {
						env[s.env] = v
					}
					_, err := parseConfig(args, envOf(env), io.Discard)
					var ce *configError
					if !errors.As(err, &ce) {
						t.Fatalf("err %v, want a *configError", err)
					}
					// Named as it was given: the flag, or the variable.
					msg := err.Error()
					named := strings.Contains(msg, "bad setting -"+s.flag+" ") && !strings.Contains(msg, s.env+"=")
					if via == "env" {
						named = strings.Contains(msg, "bad setting "+s.env+"=")
					}
					if ce.flag != s.flag || !named {
						t.Errorf("%q does not name the %s it was given by (-%s, %s)", msg, via, s.flag, s.env)
					}
				})
			}
		}
	}
	for name := range bad {
		if !hasSetting(name) {
			t.Errorf("badValues has %q, which is no setting", name)
		}
	}
}

// A value out of range is quoted as it was written, under the name it was
// given by (issue 45: -max-ttl 48h was reported as LOCKGATE_MAX_TTL="48h0m0s").
func TestAContradictionQuotesTheValueAsGiven(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"-max-ttl", "48h"}, nil, `bad setting -max-ttl "48h": must be at most 24h`},
		{nil, map[string]string{"LOCKGATE_MAX_TTL": "48h"}, `bad setting LOCKGATE_MAX_TTL="48h": must be at most 24h`},
		{[]string{"-min-ttl", "2h"}, nil, `bad setting -min-ttl "2h": is above -max-ttl 1h0m0s`},
	} {
		_, err := parseConfig(tc.args, envOf(tc.env), io.Discard)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%v %v: %v, want %q", tc.args, tc.env, err, tc.want)
		}
	}
}

func hasSetting(flag string) bool {
	for _, s := range settings {
		if s.flag == flag {
			return true
		}
	}
	return false
}

func TestGoodValues(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		check func(*config) bool
	}{
		{"the defaults", nil, nil, func(c *config) bool {
			return c.Addr == "127.0.0.1:8080" && len(c.Redis) == 0 && c.NodeTimeout == 50*time.Millisecond && c.MaxNodeTimeout == 0 &&
				c.DriftFactor == 0.01 && c.MinTTL == 100*time.Millisecond && c.MaxTTL == time.Hour &&
				c.DefaultTTL == 30*time.Second && c.MaxWait == 5*time.Minute && c.MaxWaiters == 10000 &&
				c.BodyLimit == 16384 && c.LogLevel == "info" && c.AuthFile == "" && c.tokens == nil &&
				c.ReadHeaderTimeout == 10*time.Second && c.ReadBodyTimeout == 5*time.Second && c.MaxHeaderBytes == 16384
		}},
		{"an environment variable replaces the default", nil, map[string]string{"LOCKGATE_NODE_TIMEOUT": "20ms"},
			func(c *config) bool { return c.NodeTimeout == 20*time.Millisecond }},
		{"a flag wins over the environment", []string{"-node-timeout", "30ms"}, map[string]string{"LOCKGATE_NODE_TIMEOUT": "20ms"},
			func(c *config) bool { return c.NodeTimeout == 30*time.Millisecond }},
		{"a maximum node timeout from the environment", nil, map[string]string{"LOCKGATE_MAX_NODE_TIMEOUT": "2s"},
			func(c *config) bool { return c.MaxNodeTimeout == 2*time.Second }},
		{"a maximum node timeout equal to the node timeout: a fixed bound", []string{"-max-node-timeout", "50ms"}, nil,
			func(c *config) bool { return c.MaxNodeTimeout == c.NodeTimeout }},
		{"Redis URLs may carry a password and TLS", []string{"-redis", " redis://:pw@a:1, rediss://user:pw@b:2/0 ,redis://c:3"}, nil,
			func(c *config) bool {
				return len(c.Redis) == 3 && c.Redis[0] == "redis://:pw@a:1" && c.Redis[1] == "rediss://user:pw@b:2/0"
			}},
		{"a node may be a Sentinel-managed primary", []string{"-redis", "redis-sentinel://s1:26379/node-a?addr=s2:26379,redis://b:2,redis://c:3"}, nil,
			func(c *config) bool {
				return len(c.Redis) == 3 && c.Redis[0] == "redis-sentinel://s1:26379/node-a?addr=s2:26379"
			}},
		{"a node may be a Redis Cluster", []string{"-redis", "redis-cluster://a1:7000?addr=a2:7001&addr=a3:7002,redis://b:2,rediss-cluster://c1:7000"}, nil,
			func(c *config) bool {
				return len(c.Redis) == 3 && c.Redis[0] == "redis-cluster://a1:7000?addr=a2:7001&addr=a3:7002" &&
					c.Redis[2] == "rediss-cluster://c1:7000"
			}},
		{"a password file fills in the URLs without a password", []string{"-redis", "redis://a:1,rediss://user@b:2/0,redis://:own@c:3",
			"-redis-password-file", passwordFile(t, "s3cret pw\n")}, nil,
			func(c *config) bool {
				return len(c.Redis) == 3 && c.Redis[0] == "redis://:s3cret%20pw@a:1" && c.Redis[1] == "rediss://user:s3cret%20pw@b:2/0" &&
					c.Redis[2] == "redis://:own@c:3" && !strings.Contains(fmt.Sprint(c.effective), "s3cret")
			}},
		{"every tuning setting is settable", []string{"-drift-factor", "0.02", "-min-ttl", "200ms", "-max-ttl", "2h",
			"-default-ttl", "1m", "-max-wait", "1m", "-max-waiters", "5", "-body-limit", "4096", "-log-level", "debug",
			"-read-header-timeout", "3s", "-read-body-timeout", "2s", "-max-header-bytes", "4096", "-ui", "false"}, nil,
			func(c *config) bool {
				return c.DriftFactor == 0.02 && c.MinTTL == 200*time.Millisecond && c.MaxTTL == 2*time.Hour &&
					c.DefaultTTL == time.Minute && c.MaxWait == time.Minute && c.MaxWaiters == 5 &&
					c.BodyLimit == 4096 && c.LogLevel == "debug" &&
					c.ReadHeaderTimeout == 3*time.Second && c.ReadBodyTimeout == 2*time.Second && c.MaxHeaderBytes == 4096 &&
					!c.ui
			}},
		{"the page is on by default", nil, nil, func(c *config) bool { return c.ui }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseConfig(tt.args, envOf(tt.env), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(c) {
				t.Errorf("unexpected config %+v", c)
			}
		})
	}
}

func TestEffectiveConfigMasksPasswordsAndNamesSources(t *testing.T) {
	c, err := parseConfig([]string{"-redis", "redis://:hunter2-pw@a:1,rediss://u:hunter2-pw@b:2,redis://c:3"},
		envOf(map[string]string{"LOCKGATE_LOG_LEVEL": "warn", "LOCKGATE_REDIS": "redis://ignored:1"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]effective{}
	for _, e := range c.effective {
		got[e.flag] = e
	}
	if len(got) != len(settings) {
		t.Errorf("%d settings shown, want all %d", len(got), len(settings))
	}
	want := map[string]effective{
		"redis":     {"redis", "redis://:xxxxx@a:1,rediss://u:xxxxx@b:2,redis://c:3", "flag"},
		"log-level": {"log-level", "warn", "env"},
		"addr":      {"addr", "127.0.0.1:8080", "default"},
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s shown as %+v, want %+v", k, got[k], w)
		}
	}
}

func TestBadRedisURLErrorsHidePasswords(t *testing.T) {
	for _, v := range []string{
		"redis://:hunter2-pw@a:1,http://:hunter2-pw@b:2",
		"redis://:hunter2-pw@a:1,redis://:hunter2-pw@a:1",
		"redis://:hunter2-pw%zz@a:1",
		"redis://:hunter2-pw@127.0.0.1:70000",
	} {
		_, err := parseConfig([]string{"-redis", v}, envOf(nil), io.Discard)
		if err == nil {
			t.Fatalf("%q was accepted", v)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("the error shows the password: %v", err)
		}
	}
}

func TestHelpListsEverySettingAndItsVariable(t *testing.T) {
	var out strings.Builder
	_, err := parseConfig([]string{"-h"}, envOf(nil), &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err %v, want flag.ErrHelp", err)
	}
	for _, s := range settings {
		if !strings.Contains(out.String(), "-"+s.flag) || !strings.Contains(out.String(), s.env) {
			t.Errorf("-h does not show -%s and %s", s.flag, s.env)
		}
	}
}

func TestPositionalArgumentsAreRefused(t *testing.T) {
	if _, err := parseConfig([]string{"serve"}, envOf(nil), io.Discard); err == nil || !strings.Contains(err.Error(), `"serve"`) {
		t.Errorf("err %v", err)
	}
}

func emptyFile(t *testing.T, dir string) string {
	f := filepath.Join(dir, "empty-password")
	if err := os.WriteFile(f, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func passwordFile(t *testing.T, content string) string {
	f := filepath.Join(t.TempDir(), "redis-password")
	if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// A Redis password file others may read is warned about at start.
func TestAReadableRedisPasswordFileIsWarnedAbout(t *testing.T) {
	for _, tc := range []struct {
		mode os.FileMode
		warn bool
	}{{0o600, false}, {0o640, true}, {0o644, true}} {
		f := passwordFile(t, "pw\n")
		if err := os.Chmod(f, tc.mode); err != nil {
			t.Fatal(err)
		}
		cfg, err := parseConfig([]string{"-redis", "redis://127.0.0.1:1", "-redis-password-file", f}, envOf(nil), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		var buf testlog.Buffer
		logConfig(zerolog.New(&buf), cfg)
		if got := strings.Contains(buf.String(), "Redis password file is readable"); got != tc.warn {
			t.Errorf("mode %v: warned %v, want %v:\n%s", tc.mode, got, tc.warn, buf.String())
		}
		if strings.Contains(buf.String(), "pw\"") {
			t.Errorf("the log shows the password:\n%s", buf.String())
		}
	}
}
