package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/oasdiff/yaml"
)

// The compose file and the Dockerfile sit at the top of the repository.
const (
	composeFile = "../../docker-compose.yml"
	dockerfile  = "../../Dockerfile"
)

type composeService struct {
	Image   string `json:"image"`
	Command any    `json:"command"`
	Build   *struct {
		Context string `json:"context"`
		Target  string `json:"target"`
	} `json:"build"`
	Environment any      `json:"environment"` // a map or a list of NAME=value
	Ports       []string `json:"ports"`
	Volumes     []string `json:"volumes"`
	Healthcheck *struct {
		Test []string `json:"test"`
	} `json:"healthcheck"`
	DependsOn map[string]struct {
		Condition string `json:"condition"`
	} `json:"depends_on"`
}

type composeDoc struct {
	Services map[string]composeService `json:"services"`
	Volumes  map[string]any            `json:"volumes"`
}

func loadCompose(t *testing.T) (composeDoc, string) {
	t.Helper()
	raw, err := os.ReadFile(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		t.Fatalf("docker-compose.yml is not YAML: %v", err)
	}
	var doc composeDoc
	if err := json.Unmarshal(js, &doc); err != nil {
		t.Fatalf("docker-compose.yml does not have the compose shape: %v", err)
	}
	return doc, string(raw)
}

// env returns a service's environment as a map.
func (s composeService) env(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	switch e := s.Environment.(type) {
	case nil:
	case map[string]any:
		for k, v := range e {
			out[k], _ = v.(string)
		}
	case []any:
		for _, kv := range e {
			k, v, _ := strings.Cut(kv.(string), "=")
			out[k] = v
		}
	default:
		t.Fatalf("environment of unexpected shape %T", e)
	}
	return out
}

// command returns a service's command as a list.
func (s composeService) command(t *testing.T) []string {
	t.Helper()
	switch c := s.Command.(type) {
	case []any:
		out := make([]string, len(c))
		for i, a := range c {
			out[i] = a.(string)
		}
		return out
	case string:
		return strings.Fields(c)
	}
	return nil
}

// redisSettings returns the "--name value" pairs of a redis-server command.
func redisSettings(t *testing.T, cmd []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for i := 1; i < len(cmd); i += 2 {
		if !strings.HasPrefix(cmd[i], "--") || i+1 >= len(cmd) {
			t.Fatalf("redis command %q: want redis-server followed by --name value pairs", cmd)
		}
		out[strings.TrimPrefix(cmd[i], "--")] = cmd[i+1]
	}
	return out
}

var (
	lockgateVar = regexp.MustCompile(`\bLOCKGATE_[A-Z0-9_]+`)
	fencedkvVar = regexp.MustCompile(`\bFENCEDKV_[A-Z0-9_]+`)
)

// Every LOCKGATE_* variable the compose file mentions, set or in a comment,
// is one the gateway reads.
func TestComposeSetsOnlyVariablesTheGatewayReads(t *testing.T) {
	doc, raw := loadCompose(t)
	known := map[string]bool{}
	for _, s := range settings {
		known[s.env] = true
	}
	for _, v := range lockgateVar.FindAllString(raw, -1) {
		if !known[v] {
			t.Errorf("docker-compose.yml mentions %s, which the gateway does not read", v)
		}
	}
	gw := doc.Services["lockgate"].env(t)
	if len(gw) == 0 {
		t.Fatal("the lockgate service sets no LOCKGATE_* variable")
	}
	for k := range gw {
		if !known[k] {
			t.Errorf("the lockgate service sets %s, which the gateway does not read", k)
		}
	}
	if _, err := parseConfig(nil, envOf(gw), io.Discard); err != nil {
		t.Errorf("the gateway refuses the compose file's settings: %v", err)
	}
	src, err := os.ReadFile("../fencedkv/config.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range fencedkvVar.FindAllString(raw, -1) {
		if !strings.Contains(string(src), `"`+v+`"`) {
			t.Errorf("docker-compose.yml mentions %s, which cmd/fencedkv does not read", v)
		}
	}
}

func TestComposeTopology(t *testing.T) {
	doc, _ := loadCompose(t)
	redisNames := []string{"redis-1", "redis-2", "redis-3"}
	want := append(slices.Clone(redisNames), "lockgate", "fencedkv")
	for _, name := range want {
		if _, ok := doc.Services[name]; !ok {
			t.Errorf("no service %s", name)
		}
	}
	for name, s := range doc.Services {
		if s.Healthcheck == nil || len(s.Healthcheck.Test) == 0 {
			t.Errorf("%s has no health check", name)
		}
		for _, p := range s.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("%s publishes %q: publish on 127.0.0.1 only", name, p)
			}
		}
	}
	for _, name := range redisNames {
		s := doc.Services[name]
		rs := redisSettings(t, s.command(t))
		if rs["appendonly"] != "yes" {
			t.Errorf("%s: appendonly %q, want yes", name, rs["appendonly"])
		}
		if f := rs["appendfsync"]; f != "always" && f != "everysec" && f != "no" {
			t.Errorf("%s: appendfsync %q: choose one explicitly", name, f)
		}
		if rs["maxmemory-policy"] != "noeviction" {
			t.Errorf("%s: maxmemory-policy %q: eviction could drop a fencing counter", name, rs["maxmemory-policy"])
		}
		if !slices.ContainsFunc(s.Volumes, func(v string) bool { return strings.HasSuffix(v, ":/data") }) {
			t.Errorf("%s keeps its AOF in no volume: %v", name, s.Volumes)
		}
		if doc.Services["lockgate"].DependsOn[name].Condition != "service_healthy" {
			t.Errorf("lockgate does not wait for %s to be healthy", name)
		}
	}

	gw := doc.Services["lockgate"].env(t)
	urls := strings.Split(gw["LOCKGATE_REDIS"], ",")
	if len(urls) != len(redisNames) || len(urls)%2 == 0 {
		t.Errorf("LOCKGATE_REDIS names %d nodes, want the %d (odd) Redis services", len(urls), len(redisNames))
	}
	for i, u := range urls {
		if !strings.Contains(u, "//"+redisNames[i]+":") {
			t.Errorf("LOCKGATE_REDIS node %d is %q, want service %s", i, u, redisNames[i])
		}
	}
	if b := doc.Services["lockgate"].Build; b == nil || b.Target != "lockgate" {
		t.Errorf("lockgate is not built from the Dockerfile's lockgate target")
	}
	if b := doc.Services["fencedkv"].Build; b == nil || b.Target != "fencedkv" {
		t.Errorf("fencedkv is not built from the Dockerfile's fencedkv target")
	}

	df, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{" AS build", " AS lockgate", " AS fencedkv", "CGO_ENABLED=0", "USER nonroot", "./cmd/probe"} {
		if !strings.Contains(string(df), want) {
			t.Errorf("the Dockerfile lacks %q", want)
		}
	}
}

// loadComposeProject loads a compose file as Docker Compose does, with the
// Compose specification's own loader: schema validation, interpolation,
// merging of the x- anchors, and the consistency checks of
// "docker compose config". No docker binary or engine is needed.
func loadComposeProject(t *testing.T, file string) (*types.Project, error) {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{file}, cli.WithName("lockgate"), cli.WithEnv(nil),
		cli.WithConsistency(true), cli.WithResolvedPaths(false))
	if err != nil {
		return nil, err
	}
	return opts.LoadProject(context.Background())
}

// docker-compose.yml is valid Compose, as Compose itself reads it, and the
// environment Compose gives the gateway names only settings the gateway
// reads, with values it accepts.
func TestComposeConfigIsValid(t *testing.T) {
	project, err := loadComposeProject(t, composeFile)
	if err != nil {
		t.Fatalf("docker-compose.yml is not valid Compose: %v", err)
	}
	svc, ok := project.Services["lockgate"]
	if !ok {
		t.Fatal("no lockgate service")
	}
	known := map[string]bool{}
	for _, s := range settings {
		known[s.env] = true
	}
	env := map[string]string{}
	for k, v := range svc.Environment {
		if !strings.HasPrefix(k, "LOCKGATE_") || !known[k] {
			t.Errorf("Compose gives the gateway %s, which it does not read", k)
		}
		if v == nil {
			t.Errorf("Compose gives the gateway %s without a value", k)
			continue
		}
		env[k] = *v
	}
	if _, err := parseConfig(nil, envOf(env), io.Discard); err != nil {
		t.Errorf("the gateway refuses the environment Compose gives it: %v", err)
	}
}

// The loader refuses what "docker compose config" refuses, so the test above
// can fail.
func TestComposeValidationCatchesABrokenFile(t *testing.T) {
	raw, err := os.ReadFile(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, from, to string }{
		{"an unknown service key", "    stop_grace_period: 15s", "    stop_grace_period: 15s\n    restart_policy: always"},
		{"a dependency on a missing service", "      redis-3: {condition: service_healthy}\n    healthcheck:", "      redis-4: {condition: service_healthy}\n    healthcheck:"},
		{"a port that is not one", `ports: ["127.0.0.1:8080:8080"]`, `ports: ["127.0.0.1:eighty:8080"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			broken := strings.Replace(string(raw), tc.from, tc.to, 1)
			if broken == string(raw) {
				t.Fatalf("%q is not in docker-compose.yml", tc.from)
			}
			file := filepath.Join(t.TempDir(), "docker-compose.yml")
			if err := os.WriteFile(file, []byte(broken), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := loadComposeProject(t, file); err == nil {
				t.Errorf("the loader accepts a file with %s", tc.name)
			}
		})
	}
}
