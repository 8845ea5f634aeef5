package membership

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/lab/fleet"
	"github.com/fusebox-dev/fusebox/agent/lab/fleet/fleettest"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// series finds the value of name{labels} in families.
func series(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	f, ok := fams[name]
	if !ok {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if got[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		}
	}
	return 0, false
}

// /metrics passes promlint and carries the important series; /healthz and
// /readyz answer.
func TestMetricsEndpoint(t *testing.T) {
	f := start(t, 2, false, func(_ int, c *agent.Config) {
		c.HTTPAddr = "127.0.0.1:0"
		c.Proxy.Addr = "127.0.0.1:0" // its metrics too
	})
	a := f.Agent(0)
	const dep = "search"
	for i := range 2 {
		fleettest.Report(t, f.Client(i), dep, 0, 10)
	}
	sstest.Eventually(t, 10*time.Second, "breaker open", func() bool {
		s := a.Engine().Snapshot(dep)
		return s != nil && s.Generation > 0
	})
	base := "http://" + a.HTTPAddr()
	sstest.Eventually(t, 10*time.Second, "ready", a.Ready)
	// The metrics are read once: wait for what they must show to have
	// happened (agent 0 may learn of the open from agent 1's direct send
	// before its own first broadcast round went out).
	sstest.Eventually(t, 10*time.Second, "agent 0 sent gossip messages", func() bool {
		return a.Gossip().Stats().BytesOut["message"] > 0
	})
	if code, body := get(t, base+"/healthz"); code != 200 || !strings.Contains(body, "ok") {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, body := get(t, base+"/readyz"); code != 200 {
		t.Errorf("/readyz: %d %q", code, body)
	}

	code, body := get(t, base+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	problems, err := promlint.New(strings.NewReader(body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name   string
		labels map[string]string
		check  func(float64) bool
	}{
		{"fusebox_agent_ready", nil, func(v float64) bool { return v == 1 }},
		{"fusebox_agent_info", map[string]string{"node": fleet.Name(0), "zone": "z1", "version": agent.Version}, func(v float64) bool { return v == 1 }},
		{"fusebox_agent_members", map[string]string{"role": "agent", "state": "alive"}, func(v float64) bool { return v == 2 }},
		{"fusebox_agent_local_calls_total", map[string]string{"dependency": dep, "kind": "failures"}, func(v float64) bool { return v == 10 }},
		{"fusebox_agent_fleet_calls_total", map[string]string{"dependency": dep, "kind": "failures"}, func(v float64) bool { return v >= 10 }},
		{"fusebox_agent_breaker_state", map[string]string{"dependency": dep, "state": "closed"}, func(v float64) bool { return v == 0 }},
		{"fusebox_agent_breaker_transitions_total", map[string]string{"dependency": dep, "to": "open"}, func(v float64) bool { return v >= 1 }},
		{"fusebox_agent_outcomes_total", map[string]string{"source": "report"}, func(v float64) bool { return v == 10 }},
		{"fusebox_agent_gossip_bytes_total", map[string]string{"direction": "out", "kind": "message"}, func(v float64) bool { return v > 0 }},
		{"fusebox_agent_gossip_messages_total", map[string]string{"direction": "in", "kind": "push_pull"}, func(v float64) bool { return v >= 1 }},
		{"fusebox_agent_gossip_dropped_total", map[string]string{"reason": "malformed"}, func(v float64) bool { return v == 0 }},
		{"fusebox_agent_dependencies", nil, func(v float64) bool { return v == 1 }},
		{"fusebox_agent_dependencies_max", nil, func(v float64) bool { return v == agent.DefaultMaxDependencies }},
		{"fusebox_agent_sessions", nil, func(v float64) bool { return v == 0 }},
		{"fusebox_agent_policy_source", map[string]string{"source": "default"}, func(v float64) bool { return v == 1 }},
		{"fusebox_agent_retry_budget", map[string]string{"dependency": dep}, func(v float64) bool { return v > 0 }},
	}
	for _, w := range want {
		v, ok := series(fams, w.name, w.labels)
		if !ok || !w.check(v) {
			t.Errorf("%s%v = %v (present %v)", w.name, w.labels, v, ok)
		}
	}
	// The documented metric list matches the code.
	var names []string
	for _, d := range agent.MetricDocs() {
		names = append(names, d.Name)
	}
	for _, name := range names {
		if _, ok := fams[name]; !ok && !strings.HasSuffix(name, "_override") && !strings.Contains(name, "etcd") &&
			name != "fusebox_agent_decisions_total" && name != "fusebox_agent_sessions_opened_total" &&
			name != "fusebox_agent_snapshots_pushed_total" && name != "fusebox_agent_dependencies_refused_total" &&
			name != "fusebox_agent_policies_rejected_total" && name != "fusebox_agent_cache_write_errors_total" &&
			name != "fusebox_agent_gossip_unknown_version_frames_total" && name != "fusebox_agent_gossip_bad_signatures_total" {
			t.Errorf("documented metric %s not exposed", name)
		}
	}
	for name := range fams {
		if strings.HasPrefix(name, "fusebox_agent_") && !slices.Contains(names, name) {
			t.Errorf("exposed metric %s is not in MetricDocs", name)
		}
	}
}
