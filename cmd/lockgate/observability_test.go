package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/oasdiff/yaml"

	"github.com/lockgate/lockgate/internal/redistest"
)

// The dashboard, the alert rules and their unit tests (deploy/).
const (
	dashboardFile  = "../../deploy/grafana/lockgate.json"
	alertsFile     = "../../deploy/prometheus/alerts.yml"
	alertTestsFile = "../../deploy/prometheus/alerts_test.yml"
	promConfigFile = "../../deploy/prometheus/prometheus.yml"
)

// dashboardQueries returns every PromQL expression of a Grafana dashboard:
// the panels' targets (rows' nested panels too) and the template
// variables' queries (but a data source variable's, which names a plugin).
func dashboardQueries(t *testing.T, raw []byte) []string {
	t.Helper()
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	var out []string
	var walk func(v any, key string)
	walk = func(v any, key string) {
		switch v := v.(type) {
		case map[string]any:
			if v["type"] == "datasource" {
				return
			}
			for k, x := range v {
				walk(x, k)
			}
		case []any:
			for _, x := range v {
				walk(x, key)
			}
		case string:
			if key == "expr" || key == "query" || key == "definition" {
				out = append(out, v)
			}
		}
	}
	walk(doc, "")
	return out
}

// alertRules returns the alert names and expressions of a rules file.
func alertRules(t *testing.T, raw []byte) (names, exprs []string) {
	t.Helper()
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		t.Fatalf("the rules are not YAML: %v", err)
	}
	var doc struct {
		Groups []struct {
			Rules []struct {
				Alert, Record, Expr string
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := json.Unmarshal(js, &doc); err != nil {
		t.Fatalf("the rules do not have the rules-file shape: %v", err)
	}
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				names = append(names, r.Alert)
			}
			exprs = append(exprs, r.Expr)
		}
	}
	return names, exprs
}

var (
	// Grafana's variables ($instance, ${datasource}, $__rate_interval).
	grafanaVar = regexp.MustCompile(`\$\{[^}]*\}|\$\w+`)
	// label_values(metric, label): only the metric is a series name.
	labelValues = regexp.MustCompile(`label_values\(\s*([^,()]*?)\s*,\s*\w+\s*\)`)
	// Quoted strings, label matchers and ranges hold no metric name.
	promStrings  = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	promMatchers = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	// Label lists of aggregations and vector matching.
	promLabelLists = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promIdent      = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	promKeywords   = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true,
		"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
		"inf": true, "nan": true, "atan2": true}
)

// metricNames returns the metric names an expression reads: identifiers
// that are not functions (followed by "("), keywords, label names or parts
// of numbers and durations.
func metricNames(expr string) []string {
	e := grafanaVar.ReplaceAllString(expr, "")
	e = labelValues.ReplaceAllString(e, "$1")
	e = promStrings.ReplaceAllString(e, `""`)
	e = promMatchers.ReplaceAllString(e, " ")
	e = promLabelLists.ReplaceAllString(e, " ")
	var names []string
	for _, loc := range promIdent.FindAllStringIndex(e, -1) {
		id := e[loc[0]:loc[1]]
		if loc[0] > 0 && (e[loc[0]-1] >= '0' && e[loc[0]-1] <= '9' || e[loc[0]-1] == '.') {
			continue // 5m, 1e3, 0.5e-3
		}
		if rest := strings.TrimLeft(e[loc[1]:], " \t\n"); strings.HasPrefix(rest, "(") {
			continue // a function
		}
		if promKeywords[strings.ToLower(id)] {
			continue
		}
		names = append(names, id)
	}
	return names
}

// unknownMetrics lists, once each and sorted, the metric names of exprs
// that exposed lacks.
func unknownMetrics(exprs []string, exposed map[string]bool) []string {
	var out []string
	for _, e := range exprs {
		for _, n := range metricNames(e) {
			if !exposed[n] && !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	slices.Sort(out)
	return out
}

// exposedNames reads the metric names of a /metrics page: every sample's
// name, and for each family its TYPE's names (a histogram's _bucket, _sum
// and _count).
func exposedNames(page string) map[string]bool {
	out := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(page))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			switch f[3] {
			case "histogram":
				out[f[2]+"_bucket"], out[f[2]+"_sum"], out[f[2]+"_count"] = true, true, true
			case "summary":
				out[f[2]], out[f[2]+"_sum"], out[f[2]+"_count"] = true, true, true
			default:
				out[f[2]] = true
			}
			continue
		}
		if line == "" || line[0] == '#' {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			out[line[:i]] = true
		}
	}
	return out
}

// The extraction finds metric names where PromQL puts them and nothing
// else, and a name the gateway does not export is reported.
func TestMetricNamesInPromQL(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`sum by (outcome) (rate(lockgate_requests_total{instance=~"$instance",op="acquire"}[$__rate_interval]))`, []string{"lockgate_requests_total"}},
		{`histogram_quantile(0.99, sum by (node, le) (rate(lockgate_node_call_duration_seconds_bucket[5m]))) > 0.025`, []string{"lockgate_node_call_duration_seconds_bucket"}},
		{`a_total / on (instance) group_left(node) b offset 5m > bool 1e3`, []string{"a_total", "b"}},
		{`min_over_time(x[5m:1m]) and ignoring (le) y unless z or w`, []string{"x", "y", "z", "w"}},
		{`label_values(lockgate_build_info, instance)`, []string{"lockgate_build_info"}},
		{"absent(lockgate_nodes{job=\"a{b}\"})", []string{"lockgate_nodes"}},
		{`count(up{le="and"}) by (job)`, []string{"up"}},
	} {
		if got := metricNames(tc.expr); !slices.Equal(got, tc.want) {
			t.Errorf("metricNames(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
	exposed := map[string]bool{"lockgate_requests_total": true}
	got := unknownMetrics([]string{`rate(lockgate_requests_total[5m])`, `rate(lockgate_bogus_total[5m]) / lockgate_requests_total`}, exposed)
	if !slices.Equal(got, []string{"lockgate_bogus_total"}) {
		t.Errorf("unknownMetrics reports %q, want [lockgate_bogus_total]", got)
	}
}

// Every metric name in the Grafana dashboard and the alert rules is one a
// real gateway serves on /metrics. The gateway runs on three redis-server
// nodes, one of them filled to maxmemory: lockgate_node_refusing has a
// series (and so a name on the page) only while a node refuses writes.
func TestDashboardAndAlertsUseOnlyExportedMetrics(t *testing.T) {
	nodes := redistest.StartN(t, 3, nil)
	g := startGateway(t, []string{"-redis", redisURLs(nodes)}, nil)
	g.eventually(t, "/readyz", http.StatusOK)

	fill(t, nodes[0])
	var exposed map[string]bool
	// The node is found refusing by the guard's check or by a write it
	// refuses: keep writing.
	for i, deadline := 0, time.Now().Add(15*time.Second); ; i++ {
		g.do(t, http.MethodPut, fmt.Sprintf("/locks/filling-%d", i), `{"ttl_ms":60000}`)
		exposed = exposedNames(g.do(t, http.MethodGet, "/metrics", "").body)
		if exposed["lockgate_node_refusing"] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no lockgate_node_refusing series 15s after filling a node")
		}
	}

	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	exprs := dashboardQueries(t, raw)
	rules, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	_, ruleExprs := alertRules(t, rules)
	if len(exprs) < 10 || len(ruleExprs) < 5 {
		t.Fatalf("found %d dashboard queries and %d rule expressions: the files were not read", len(exprs), len(ruleExprs))
	}
	used := map[string]bool{}
	for _, e := range append(exprs, ruleExprs...) {
		for _, n := range metricNames(e) {
			used[n] = true
		}
	}
	// What the issue asks the dashboard to cover, by the metric that shows it.
	for _, n := range []string{"lockgate_requests_total", "lockgate_request_duration_seconds_bucket", "lockgate_waiters",
		"lockgate_node_call_duration_seconds_count", "lockgate_node_state", "lockgate_node_behind", "lockgate_node_refusing"} {
		if !used[n] {
			t.Errorf("neither the dashboard nor the alerts use %s", n)
		}
	}
	if missing := unknownMetrics(exprs, exposed); len(missing) > 0 {
		t.Errorf("the dashboard uses metrics the gateway does not export: %q", missing)
	}
	if missing := unknownMetrics(ruleExprs, exposed); len(missing) > 0 {
		t.Errorf("the alert rules use metrics the gateway does not export: %q", missing)
	}
}

// Every alert of alerts.yml has a unit test in alerts_test.yml that
// expects it to fire (promtool, run by .ci/run, checks the tests pass).
func TestEveryAlertHasAUnitTest(t *testing.T) {
	rules, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	names, _ := alertRules(t, rules)
	raw, err := os.ReadFile(alertTestsFile)
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		RuleFiles []string `json:"rule_files"`
		Tests     []struct {
			AlertRuleTest []struct {
				Alertname string           `json:"alertname"`
				ExpAlerts []map[string]any `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := json.Unmarshal(js, &doc); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(doc.RuleFiles, filepath.Base(alertsFile)) {
		t.Errorf("alerts_test.yml tests %q, not alerts.yml", doc.RuleFiles)
	}
	fires := map[string]bool{}
	for _, tc := range doc.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			}
		}
	}
	if len(names) == 0 {
		t.Fatal("no alert in alerts.yml")
	}
	for _, n := range names {
		if !fires[n] {
			t.Errorf("no unit test expects alert %s to fire", n)
		}
	}
}

// docker-compose's observability profile is valid Compose, starts
// Prometheus and Grafana only when asked for, mounts files that exist, and
// points Prometheus at the gateway's port with the alert rules loaded.
func TestComposeObservabilityProfile(t *testing.T) {
	project, err := loadComposeProject(t, composeFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"prometheus", "grafana"} {
		if _, on := project.Services[s]; on {
			t.Errorf("%s runs without the observability profile", s)
		}
	}
	opts, err := cli.NewProjectOptions([]string{composeFile}, cli.WithName("lockgate"), cli.WithEnv(nil),
		cli.WithConsistency(true), cli.WithResolvedPaths(false), cli.WithProfiles([]string{"observability"}))
	if err != nil {
		t.Fatal(err)
	}
	project, err = opts.LoadProject(t.Context())
	if err != nil {
		t.Fatalf("docker-compose.yml with the observability profile is not valid Compose: %v", err)
	}
	mounts := map[string]string{} // container path -> file in the repository
	for _, name := range []string{"prometheus", "grafana"} {
		svc, ok := project.Services[name]
		if !ok {
			t.Fatalf("the observability profile has no %s service", name)
		}
		for _, v := range svc.Volumes {
			if v.Type != "bind" {
				continue
			}
			src := filepath.Join("../..", v.Source)
			if _, err := os.Stat(src); err != nil {
				t.Errorf("%s mounts %s, which is not in the repository: %v", name, v.Source, err)
			}
			if !v.ReadOnly {
				t.Errorf("%s mounts %s writable", name, v.Source)
			}
			mounts[v.Target] = src
		}
	}

	cfg, err := os.ReadFile(promConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var prom struct {
		RuleFiles     []string `json:"rule_files"`
		ScrapeConfigs []struct {
			StaticConfigs []struct {
				Targets []string `json:"targets"`
			} `json:"static_configs"`
		} `json:"scrape_configs"`
	}
	if err := json.Unmarshal(js, &prom); err != nil {
		t.Fatal(err)
	}
	if mounts["/etc/prometheus/prometheus.yml"] != promConfigFile {
		t.Errorf("prometheus does not run with %s", promConfigFile)
	}
	if len(prom.RuleFiles) != 1 || mounts[prom.RuleFiles[0]] != alertsFile {
		t.Errorf("prometheus loads rules %q, want the mounted %s", prom.RuleFiles, alertsFile)
	}
	addr := project.Services["lockgate"].Environment["LOCKGATE_ADDR"]
	if addr == nil {
		t.Fatal("the lockgate service sets no LOCKGATE_ADDR")
	}
	_, port, _ := strings.Cut(*addr, ":")
	want := "lockgate:" + port
	var targets []string
	for _, sc := range prom.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			targets = append(targets, st.Targets...)
		}
	}
	if !slices.Contains(targets, want) {
		t.Errorf("prometheus scrapes %q, want %s (the gateway's LOCKGATE_ADDR port)", targets, want)
	}
	dash := mounts["/etc/grafana/dashboards/lockgate.json"]
	if dash != dashboardFile {
		t.Errorf("grafana does not mount %s", dashboardFile)
	}
	prov, err := os.ReadFile("../../deploy/grafana/provisioning/dashboards/lockgate.yml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(prov), "path: /etc/grafana/dashboards\n") {
		t.Errorf("grafana's dashboard provider does not read /etc/grafana/dashboards")
	}
}

// The dashboard is one Grafana can load as provisioned: a uid, unique
// panel ids, panels inside the 24-column grid, and every query on the
// dashboard's Prometheus data source variable with a refId of its own.
func TestDashboardShape(t *testing.T) {
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	type target struct {
		RefID      string         `json:"refId"`
		Expr       string         `json:"expr"`
		Datasource map[string]any `json:"datasource"`
	}
	var d struct {
		UID    string `json:"uid"`
		Title  string `json:"title"`
		Panels []struct {
			ID      int    `json:"id"`
			Type    string `json:"type"`
			Title   string `json:"title"`
			GridPos struct {
				X, Y, W, H int
			} `json:"gridPos"`
			Targets []target `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name, Type string
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.Title == "" || len(d.Panels) == 0 {
		t.Fatalf("uid %q, title %q, %d panels", d.UID, d.Title, len(d.Panels))
	}
	if !slices.ContainsFunc(d.Templating.List, func(v struct{ Name, Type string }) bool {
		return v.Name == "datasource" && v.Type == "datasource"
	}) {
		t.Error("no datasource variable: the queries name ${datasource}")
	}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X < 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q is outside the grid: %+v", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("panel %q: refId %q empty or twice", p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
			if tg.Expr == "" || tg.Datasource["uid"] != "${datasource}" {
				t.Errorf("panel %q query %s: expr %q on data source %v", p.Title, tg.RefID, tg.Expr, tg.Datasource)
			}
		}
	}
}
