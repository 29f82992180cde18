package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// repo is the repository's root, from this module's directory.
const repo = "../../.."

var kustomizations = []string{"base", "overlays/redis"}

// memCopy copies deploy/kubernetes into an in-memory file system, under
// /k, so that a test can change a copy of the manifests.
func memCopy(t *testing.T) filesys.FileSystem {
	t.Helper()
	mem := filesys.MakeFsInMemory()
	root := filepath.Join(repo, "deploy", "kubernetes")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") && !strings.HasSuffix(path, ".conf") && !strings.HasSuffix(path, ".lua") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		return mem.WriteFile(filepath.Join("/k", rel), b)
	})
	if err != nil {
		t.Fatal(err)
	}
	return mem
}

func build(t *testing.T, dir string) []Object {
	t.Helper()
	objs, err := Build(filesys.MakeFsOnDisk(), filepath.Join("..", dir))
	if err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	return objs
}

func TestTheManifestsBuildAndDecodeStrictly(t *testing.T) {
	want := map[string]map[string]int{
		"base": {"Deployment": 1, "Service": 1, "PodDisruptionBudget": 1, "NetworkPolicy": 1, "Secret": 2},
		"overlays/redis": {"Deployment": 1, "Service": 4, "PodDisruptionBudget": 1, "NetworkPolicy": 2, "Secret": 2,
			"StatefulSet": 3, "ConfigMap": 1, "ServiceMonitor": 1, "PrometheusRule": 1},
	}
	for _, dir := range kustomizations {
		got := map[string]int{}
		for _, o := range build(t, dir) {
			got[o.Kind]++
		}
		if !reflect.DeepEqual(got, want[dir]) {
			t.Errorf("%s holds %v, want %v", dir, got, want[dir])
		}
	}
}

// TestAMisspeltFieldIsRefused changes one field's name in a copy of the
// manifests, for each kind of file, and expects the build to fail naming
// the field.
func TestAMisspeltFieldIsRefused(t *testing.T) {
	for _, tc := range []struct{ file, from, to string }{
		{"base/deployment.yaml", "readOnlyRootFilesystem: true", "readOnlyRootFileSystem: true"},
		{"base/deployment.yaml", "terminationGracePeriodSeconds:", "terminationGracePeriod:"},
		{"base/deployment.yaml", "failureThreshold: 3", "failureTreshold: 3"},
		{"base/service.yaml", "targetPort:", "targetport:"},
		{"base/poddisruptionbudget.yaml", "maxUnavailable:", "maxUnavailabe:"},
		{"base/networkpolicy.yaml", "policyTypes:", "policyType:"},
		{"overlays/redis/redis.yaml", "volumeClaimTemplates:", "volumeClaimTemplate:"},
		{"overlays/redis/servicemonitor.yaml", "interval: 15s", "intervall: 15s"},
		{"overlays/redis/prometheusrule.yaml", "for: 2m", "four: 2m"},
	} {
		t.Run(tc.to, func(t *testing.T) {
			mem := memCopy(t)
			path := filepath.Join("/k", tc.file)
			b, err := mem.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), tc.from) {
				t.Fatalf("%s has no %q", tc.file, tc.from)
			}
			if err := mem.WriteFile(path, []byte(strings.Replace(string(b), tc.from, tc.to, 1))); err != nil {
				t.Fatal(err)
			}
			if _, err := Build(mem, "/k/overlays/redis"); err != nil {
				if field := strings.TrimSuffix(tc.to[:strings.Index(tc.to, ":")], ":"); !strings.Contains(err.Error(), field) {
					t.Errorf("the error does not name %s: %v", field, err)
				}
				t.Logf("refused: %v", err)
			} else {
				t.Errorf("%s with %q instead of %q: built and decoded", tc.file, tc.to, tc.from)
			}
		})
	}
}

// gatewaySettings reads the flag and environment variable of every
// setting of the gateway from cmd/lockgate's sources: the composite
// literals of type setting (a package main cannot be imported).
func gatewaySettings(t *testing.T) map[string]string {
	t.Helper()
	dir := filepath.Join(repo, "cmd", "lockgate")
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	envToFlag := map[string]string{}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			cl, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			var elems [][]ast.Expr
			switch typ := cl.Type.(type) {
			case *ast.Ident:
				if typ.Name == "setting" {
					elems = append(elems, cl.Elts)
				}
			case *ast.ArrayType:
				if id, ok := typ.Elt.(*ast.Ident); ok && id.Name == "setting" {
					for _, e := range cl.Elts {
						if inner, ok := e.(*ast.CompositeLit); ok && inner.Type == nil {
							elems = append(elems, inner.Elts)
						}
					}
				}
			}
			for _, el := range elems {
				if len(el) < 2 {
					continue
				}
				flag, ok1 := el[0].(*ast.BasicLit)
				env, ok2 := el[1].(*ast.BasicLit)
				if ok1 && ok2 {
					f, _ := strconv.Unquote(flag.Value)
					e, _ := strconv.Unquote(env.Value)
					envToFlag[e] = f
				}
			}
			return true
		})
	}
	for _, must := range []string{"LOCKGATE_ADDR", "LOCKGATE_REDIS", "LOCKGATE_TLS_CERT", "LOCKGATE_SHUTDOWN_DELAY", "LOCKGATE_RATE_LIMIT"} {
		if envToFlag[must] == "" {
			t.Fatalf("%s not found among cmd/lockgate's settings (found %v): the parser lost its way", must, envToFlag)
		}
	}
	return envToFlag
}

// TestTheManifestsMatchTheBinarysFlags: every LOCKGATE_* variable of the
// gateway's container is a setting of cmd/lockgate, and every argument a
// flag; LOCKGATE_ADDR listens on the container's port; the probes ask
// /livez and /readyz, which openapi.yaml declares, on a port the
// container has; the Service and the ServiceMonitor reach that port; the
// drain fits in the grace period; the Redis URLs name the overlay's
// StatefulSets.
func TestTheManifestsMatchTheBinarysFlags(t *testing.T) {
	envToFlag := gatewaySettings(t)
	flags := map[string]bool{}
	for _, f := range envToFlag {
		flags[f] = true
	}
	spec, err := os.ReadFile(filepath.Join(repo, "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var contract struct {
		Paths map[string]any `json:"paths"`
	}
	if err := yaml.Unmarshal(spec, &contract); err != nil {
		t.Fatal(err)
	}

	objs := build(t, "overlays/redis")
	var deploy *appsv1.Deployment
	var svc *corev1.Service
	var monitor *monitoringv1.ServiceMonitor
	redisServices := map[string]bool{}
	for _, o := range objs {
		switch v := o.Value.(type) {
		case *appsv1.Deployment:
			deploy = v
		case *corev1.Service:
			if o.Name == "lockgate" {
				svc = v
			}
		case *monitoringv1.ServiceMonitor:
			monitor = v
		case *appsv1.StatefulSet:
			redisServices[v.Name+"-0."+v.Spec.ServiceName] = true
		}
	}
	if deploy == nil || svc == nil || monitor == nil {
		t.Fatal("the overlay lacks the gateway's Deployment, Service or ServiceMonitor")
	}
	pod := deploy.Spec.Template.Spec
	c := pod.Containers[0]
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	env := map[string]string{}
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, "LOCKGATE_") && envToFlag[e.Name] == "" {
			t.Errorf("env %s is no setting of cmd/lockgate", e.Name)
		}
		env[e.Name] = e.Value
	}
	for _, a := range append(append([]string{}, c.Command...), c.Args...) {
		if name, ok := strings.CutPrefix(a, "-"); ok && !flags[strings.SplitN(strings.TrimPrefix(name, "-"), "=", 2)[0]] {
			t.Errorf("argument %s is no flag of cmd/lockgate", a)
		}
	}
	_, port, err := net.SplitHostPort(env["LOCKGATE_ADDR"])
	if err != nil || port != strconv.Itoa(int(ports["https"])) {
		t.Errorf("LOCKGATE_ADDR %q does not listen on the container port https %d", env["LOCKGATE_ADDR"], ports["https"])
	}
	for name, probe := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
		if probe == nil || probe.HTTPGet == nil {
			t.Errorf("%s probe: none, or not an HTTP GET", name)
			continue
		}
		g := probe.HTTPGet
		if _, ok := contract.Paths[g.Path]; !ok {
			t.Errorf("%s probe asks %s, which openapi.yaml does not declare", name, g.Path)
		}
		if _, ok := ports[g.Port.StrVal]; !ok {
			t.Errorf("%s probe port %q is no container port", name, g.Port.String())
		}
		if (g.Scheme == corev1.URISchemeHTTPS) != (env["LOCKGATE_TLS_CERT"] != "") {
			t.Errorf("%s probe scheme %s with LOCKGATE_TLS_CERT %q", name, g.Scheme, env["LOCKGATE_TLS_CERT"])
		}
	}
	if c.LivenessProbe != nil && c.LivenessProbe.HTTPGet != nil && c.LivenessProbe.HTTPGet.Path != "/livez" {
		t.Errorf("the liveness probe asks %s: want /livez, which asks no lock node", c.LivenessProbe.HTTPGet.Path)
	}
	if c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil && c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("the readiness probe asks %s: want /readyz", c.ReadinessProbe.HTTPGet.Path)
	}
	for _, sp := range svc.Spec.Ports {
		if _, ok := ports[sp.TargetPort.StrVal]; !ok {
			t.Errorf("Service port %s targets %q, no container port", sp.Name, sp.TargetPort.String())
		}
	}
	for _, ep := range monitor.Spec.Endpoints {
		found := false
		for _, sp := range svc.Spec.Ports {
			found = found || sp.Name == ep.Port
		}
		if !found || (ep.Scheme != nil && (*ep.Scheme == "https") != (env["LOCKGATE_TLS_CERT"] != "")) {
			t.Errorf("ServiceMonitor endpoint port %q scheme %v: not the Service's port, or not its scheme", ep.Port, ep.Scheme)
		}
	}
	if !reflect.DeepEqual(monitor.Spec.Selector.MatchLabels, map[string]string{"app.kubernetes.io/name": "lockgate"}) ||
		svc.Labels["app.kubernetes.io/name"] != "lockgate" {
		t.Errorf("the ServiceMonitor selects %v, the Service is labelled %v", monitor.Spec.Selector.MatchLabels, svc.Labels)
	}
	// The gateway exits within 25s of SIGTERM whatever its delay (up to
	// 20s): the grace period must be longer.
	delay, err := time.ParseDuration(env["LOCKGATE_SHUTDOWN_DELAY"])
	grace := time.Duration(ptrOr(pod.TerminationGracePeriodSeconds, 30)) * time.Second
	if err != nil || delay > 20*time.Second || grace < 25*time.Second+time.Second {
		t.Errorf("LOCKGATE_SHUTDOWN_DELAY %q (at most 20s) and terminationGracePeriodSeconds %v (above the "+
			"gateway's 25s): the drain must fit in the grace period", env["LOCKGATE_SHUTDOWN_DELAY"], grace)
	}
	for _, u := range strings.Split(env["LOCKGATE_REDIS"], ",") {
		host, _, _ := net.SplitHostPort(strings.TrimPrefix(u, "redis://"))
		if !redisServices[host] {
			t.Errorf("LOCKGATE_REDIS names %s, no StatefulSet pod of the overlay (%v)", host, redisServices)
		}
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
		t.Error("the gateway must run as non-root with a read-only root file system")
	}
}

// TestTheRedisNodesHaveTheRequiredSettings: redis.conf, which every
// StatefulSet mounts, has the settings docs/operations.md requires.
func TestTheRedisNodesHaveTheRequiredSettings(t *testing.T) {
	b, err := os.ReadFile("../overlays/redis/redis.conf")
	if err != nil {
		t.Fatal(err)
	}
	conf := map[string]string{}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) == 2 && !strings.HasPrefix(f[0], "#") {
			conf[f[0]] = f[1]
		}
	}
	for k, v := range map[string]string{"appendonly": "yes", "appendfsync": "always", "save": `""`, "maxmemory-policy": "noeviction",
		"repl-backlog-ttl": "0", "enable-debug-command": "no"} {
		if conf[k] != v {
			t.Errorf("redis.conf: %s %q, want %q", k, conf[k], v)
		}
	}
	for _, o := range build(t, "overlays/redis") {
		if s, ok := o.Value.(*appsv1.StatefulSet); ok {
			c := s.Spec.Template.Spec.Containers[0]
			if !reflect.DeepEqual(c.Args, []string{"/etc/redis/redis.conf"}) || len(s.Spec.Template.Spec.Volumes) == 0 ||
				s.Spec.Template.Spec.Volumes[0].ConfigMap == nil || !strings.HasPrefix(s.Spec.Template.Spec.Volumes[0].ConfigMap.Name, "redis-config") {
				t.Errorf("StatefulSet %s does not run redis-server on redis.conf from redis-config", s.Name)
			}
			if *s.Spec.Replicas != 1 {
				t.Errorf("StatefulSet %s: %d replicas; each node is one independent master", s.Name, *s.Spec.Replicas)
			}
		}
	}
}

// TestThePrometheusRuleIsTheAlertRules: the PrometheusRule's spec is
// deploy/prometheus/alerts.yml, which promtool checks and tests.
func TestThePrometheusRuleIsTheAlertRules(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repo, "deploy", "prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	var want monitoringv1.PrometheusRuleSpec
	if err := Decode(j, &want); err != nil {
		t.Fatal(err)
	}
	for _, o := range build(t, "overlays/redis") {
		if r, ok := o.Value.(*monitoringv1.PrometheusRule); ok {
			if !reflect.DeepEqual(r.Spec, want) {
				t.Errorf("the PrometheusRule's spec differs from deploy/prometheus/alerts.yml: indent that file under spec:")
			}
			if len(want.Groups) == 0 || len(want.Groups[0].Rules) == 0 {
				t.Error("no rules")
			}
			return
		}
	}
	t.Error("no PrometheusRule")
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
