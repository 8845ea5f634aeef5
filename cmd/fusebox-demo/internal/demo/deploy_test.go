package demo_test

import (
	"context"
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

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"sigs.k8s.io/yaml"

	"github.com/fusebox-dev/fusebox/cmd/fusebox-demo/internal/demo"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// deployDir is the repository's deploy/ directory, seen from this package.
const deployDir = "../../../../deploy"

// query is one PromQL expression of a dashboard and where it sits.
type query struct {
	where string // panel title, or "variable NAME"
	expr  string
}

// dashboardQueries returns every PromQL expression of a Grafana dashboard:
// the targets' "expr" fields, wherever panels nest them, and the
// label_values() of query variables.
func dashboardQueries(t *testing.T, path string) []query {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []query
	var walk func(v any, where string)
	walk = func(v any, where string) {
		switch v := v.(type) {
		case map[string]any:
			if title, ok := v["title"].(string); ok {
				where = title
			}
			if name, ok := v["name"].(string); ok && v["type"] == "query" {
				where = "variable " + name
			}
			for k, x := range v {
				s, isString := x.(string)
				switch {
				case k == "expr" && isString:
					out = append(out, query{where: where, expr: s})
				case (k == "query" || k == "definition") && isString && strings.Contains(s, "label_values("):
					out = append(out, query{where: where, expr: s})
				default:
					walk(x, where)
				}
			}
		case []any:
			for _, x := range v {
				walk(x, where)
			}
		}
	}
	walk(doc, filepath.Base(path))
	return out
}

var (
	promStrings  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	promVars     = regexp.MustCompile(`\$\{?\w+\}?`)
	promMatchers = regexp.MustCompile(`\{[^{}]*\}`)
	promRanges   = regexp.MustCompile(`\[[^\]]*\]`)
	promGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promNumbers  = regexp.MustCompile(`\b\d[\w.]*`)
	promIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	labelValues  = regexp.MustCompile(`label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)`)
	promKeywords = map[string]bool{"and": true, "or": true, "unless": true, "by": true, "without": true, "on": true,
		"ignoring": true, "group_left": true, "group_right": true, "offset": true, "bool": true, "inf": true, "nan": true}
)

// metricNames extracts the metric names a PromQL expression reads: the
// identifiers left once strings, Grafana variables, label matchers, range
// selectors, grouping clauses and numbers are removed, minus keywords and
// function names (an identifier followed by "(").
func metricNames(expr string) []string {
	if m := labelValues.FindStringSubmatch(expr); m != nil {
		return []string{m[1]}
	}
	s := promStrings.ReplaceAllString(expr, " ")
	s = promVars.ReplaceAllString(s, " ")
	for prev := ""; prev != s; { // matchers may hold nothing nested, but be safe
		prev = s
		s = promMatchers.ReplaceAllString(s, " ")
	}
	s = promRanges.ReplaceAllString(s, " ")
	s = promGrouping.ReplaceAllString(s, " ")
	s = promNumbers.ReplaceAllString(s, " ")
	var names []string
	for _, loc := range promIdent.FindAllStringIndex(s, -1) {
		id := s[loc[0]:loc[1]]
		rest := strings.TrimLeft(s[loc[1]:], " \t\n")
		if promKeywords[strings.ToLower(id)] || strings.HasPrefix(rest, "(") {
			continue
		}
		if !slices.Contains(names, id) {
			names = append(names, id)
		}
	}
	return names
}

func TestMetricNames(t *testing.T) {
	cases := []struct {
		expr string
		want []string
	}{
		{`fusebox_agent_sessions`, []string{"fusebox_agent_sessions"}},
		{`sum by (dependency, to) (increase(fusebox_agent_breaker_transitions_total{dependency=~"$dependency", origin="self"}[$__rate_interval]))`,
			[]string{"fusebox_agent_breaker_transitions_total"}},
		{`histogram_quantile(0.99, sum by (le, method) (rate(x_seconds_bucket[5m])))`, []string{"x_seconds_bucket"}},
		{`max by (d) (2 * a{s="open"}) + ignoring(s) b{s="half_open"} unless on (d) c or 4 * d_total`,
			[]string{"a", "b", "c", "d_total"}},
		{`sum(x) / clamp_min(sum(y) + sum(z), 1)`, []string{"x", "y", "z"}},
		{`label_values(fusebox_agent_breaker_state, dependency)`, []string{"fusebox_agent_breaker_state"}},
		{`rate(m{job="fusebox_agent_x"}[1m]) > 1e3`, []string{"m"}},
	}
	for _, c := range cases {
		if got := metricNames(c.expr); !slices.Equal(got, c.want) {
			t.Errorf("metricNames(%q) = %q, want %q", c.expr, got, c.want)
		}
	}
}

// scrape returns the metric names a /metrics endpoint exposes, with the
// series names of histograms and summaries (_bucket, _sum, _count).
func scrape(t *testing.T, url string, into map[string]string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	for name, mf := range mfs {
		if len(mf.GetMetric()) == 0 {
			continue
		}
		into[name] = url
		switch mf.GetType().String() {
		case "HISTOGRAM", "GAUGE_HISTOGRAM":
			into[name+"_bucket"], into[name+"_sum"], into[name+"_count"] = url, url, url
		case "SUMMARY":
			into[name+"_sum"], into[name+"_count"] = url, url
		}
	}
}

// TestGrafanaQueriesExportedMetrics checks that every metric the Grafana
// dashboards query is one the agents and the coordinator actually expose:
// it runs the demo until its breaker has moved, makes an admin request (a
// force-open, so override series exist too), scrapes every /metrics and
// compares.
func TestGrafanaQueriesExportedMetrics(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(deployDir, "grafana", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboard in %s/grafana: %v", deployDir, err)
	}
	queried := map[string][]string{} // metric → where it is queried
	for _, f := range files {
		qs := dashboardQueries(t, f)
		if len(qs) == 0 {
			t.Errorf("%s: no queries found", f)
		}
		for _, q := range qs {
			names := metricNames(q.expr)
			if len(names) == 0 {
				t.Errorf("%s, %q: no metric in %q", filepath.Base(f), q.where, q.expr)
			}
			for _, n := range names {
				queried[n] = append(queried[n], fmt.Sprintf("%s: %s", filepath.Base(f), q.where))
			}
		}
	}

	cfg := testConfig(t, 2*time.Second)
	d := startDemo(t, cfg)
	sstest.Eventually(t, 30*time.Second, "shipping-api to open on an agent", func() bool {
		for _, tr := range d.Summary().TransitionsOf(demo.ShippingAPI) {
			if tr.To == "open" {
				return true
			}
		}
		return false
	})
	forceOpen(t, d, demo.CatalogAPI)
	sstest.Eventually(t, 10*time.Second, "every agent to apply the override", func() bool {
		for _, a := range d.Agents() {
			if s := a.Engine().Snapshot(demo.CatalogAPI); s == nil || s.Override != sharedstate.ForcedOpen {
				return false
			}
		}
		return true
	})

	// A dashboard's request, so that the coordinator's HTTP series exist
	// (its first /metrics scrape is counted only after it is served).
	req, _ := http.NewRequest(http.MethodGet, "http://"+d.HTTPAddr()+"/api/v1/fleet", nil)
	req.Header.Set("Authorization", "Bearer "+d.AdminToken())
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Fatalf("GET /api/v1/fleet: %v", err)
	} else {
		resp.Body.Close()
	}

	// The coordinator counts a request after serving it, so the client may
	// see the answer before the series exists: wait for it.
	exposed := map[string]string{}
	sstest.Eventually(t, 10*time.Second, "the coordinator's HTTP series", func() bool {
		scrape(t, "http://"+d.HTTPAddr()+"/metrics", exposed)
		_, ok := exposed["fusebox_coordinator_http_requests_total"]
		return ok
	})
	for _, a := range d.Agents() {
		scrape(t, "http://"+a.HTTPAddr()+"/metrics", exposed)
	}
	var missing []string
	for name, where := range queried {
		if _, ok := exposed[name]; !ok {
			missing = append(missing, fmt.Sprintf("%s (queried by %s)", name, strings.Join(where, "; ")))
		}
	}
	slices.Sort(missing)
	for _, m := range missing {
		t.Errorf("the dashboard queries a metric nothing exposes: %s", m)
	}
	var unused []string
	for name := range exposed {
		used := false
		for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
			_, ok := queried[name+suffix]
			used = used || ok
		}
		if !used && strings.HasPrefix(name, "fusebox_") &&
			!strings.HasSuffix(name, "_bucket") && !strings.HasSuffix(name, "_sum") && !strings.HasSuffix(name, "_count") {
			unused = append(unused, name)
		}
	}
	slices.Sort(unused)
	t.Logf("%d metrics queried, %d missing; exposed but not on the dashboard: %s", len(queried), len(missing), strings.Join(unused, ", "))
}

// forceOpen forces dep open through the coordinator's Admin API, with the
// demo's admin token.
func forceOpen(t *testing.T, d *demo.Demo, dep string) {
	t.Helper()
	conn, err := grpc.NewClient(d.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(bearer(d.AdminToken())))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := fuseboxv1.NewAdminClient(conn).ForceOpen(ctx, &fuseboxv1.SetOverrideRequest{
		Dependency: dep, Reason: "deploy test", Actor: "deploy_test"}); err != nil {
		t.Fatalf("ForceOpen(%s): %v", dep, err)
	}
}

// bearer is a per-RPC credential carrying a bearer token over an insecure
// loopback connection.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

// TestPrometheusConfig checks the scrape config: agents on :7951,
// coordinators on :7070, at /metrics.
func TestPrometheusConfig(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(deployDir, "prometheus", "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		ScrapeConfigs []struct {
			JobName       string `json:"job_name"`
			MetricsPath   string `json:"metrics_path"`
			StaticConfigs []struct {
				Targets []string `json:"targets"`
			} `json:"static_configs"`
		} `json:"scrape_configs"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil { // the fields not in cfg are ignored
		t.Fatalf("prometheus.yml: %v", err)
	}
	ports := map[string]string{"fusebox-agent": ":7951", "fusebox-coordinator": ":7070"}
	for _, sc := range cfg.ScrapeConfigs {
		port, ok := ports[sc.JobName]
		if !ok {
			continue
		}
		delete(ports, sc.JobName)
		if sc.MetricsPath != "" && sc.MetricsPath != "/metrics" {
			t.Errorf("job %s: metrics_path %q, want /metrics", sc.JobName, sc.MetricsPath)
		}
		n := 0
		for _, s := range sc.StaticConfigs {
			for _, target := range s.Targets {
				n++
				if !strings.HasSuffix(target, port) {
					t.Errorf("job %s: target %q, want port %s", sc.JobName, target, port)
				}
			}
		}
		if n == 0 {
			t.Errorf("job %s: no targets", sc.JobName)
		}
	}
	for job := range ports {
		t.Errorf("prometheus.yml has no job %s", job)
	}
}
