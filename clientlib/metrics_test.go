package clientlib

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

func TestMetrics(t *testing.T) {
	f := newFakeAgent(t)
	reg := prometheus.NewPedanticRegistry()
	c := agentClient(t, f, Config{Registerer: reg})
	dep := c.Dependency("shipping")
	for i := 0; i < 3; i++ {
		_ = dep.Do(context.Background(), Idempotent, func(context.Context, Attempt) error { return nil })
	}
	_ = dep.Do(context.Background(), Idempotent, func(ctx context.Context, a Attempt) error {
		if a.Number == 1 {
			return errUnavailable
		}
		return nil
	})
	f.push(snapshot("shipping", fuseboxv1.BreakerState_BREAKER_STATE_OPEN))
	sstest.Eventually(t, 10*time.Second, "the open snapshot", func() bool { return dep.Status().State == Open })
	_ = dep.Do(context.Background(), Idempotent, func(context.Context, Attempt) error { return nil })

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	want := `
# TYPE fusebox_client_agent_connected gauge
fusebox_client_agent_connected 1
# TYPE fusebox_client_attempts_total counter
fusebox_client_attempts_total{dependency="shipping",kind="first"} 4
fusebox_client_attempts_total{dependency="shipping",kind="retry"} 1
# TYPE fusebox_client_breaker_state gauge
fusebox_client_breaker_state{dependency="shipping",state="closed"} 0
fusebox_client_breaker_state{dependency="shipping",state="forced_closed"} 0
fusebox_client_breaker_state{dependency="shipping",state="forced_open"} 0
fusebox_client_breaker_state{dependency="shipping",state="half_open"} 0
fusebox_client_breaker_state{dependency="shipping",state="open"} 1
# TYPE fusebox_client_outcomes_total counter
fusebox_client_outcomes_total{dependency="shipping",outcome="failure"} 1
fusebox_client_outcomes_total{dependency="shipping",outcome="success"} 4
# TYPE fusebox_client_rejected_total counter
fusebox_client_rejected_total{dependency="shipping"} 1
`
	got := series(t, reg, "fusebox_client_agent_connected", "fusebox_client_attempts_total",
		"fusebox_client_outcomes_total", "fusebox_client_rejected_total", "fusebox_client_breaker_state")
	if strings.TrimSpace(got) != strings.TrimSpace(want) {
		t.Errorf("series:\n%s\nwant:\n%s", got, want)
	}

	// Two clients never share a series; a second one on the same registry
	// is refused; Close unregisters.
	if _, err := New(Config{NoAgent: true, Registerer: reg}); err == nil {
		t.Error("a second client registered on the same registry")
	}
	c.Close()
	if mfs, err := reg.Gather(); err != nil || len(mfs) != 0 {
		t.Errorf("%d families after Close (err %v), want 0", len(mfs), err)
	}
}

// series renders the named families as "# TYPE" lines and one
// "name{labels} value" line per series, in the registry's (sorted) order.
func series(t *testing.T, g prometheus.Gatherer, names ...string) string {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		if !slices.Contains(names, mf.GetName()) {
			continue
		}
		fmt.Fprintf(&b, "# TYPE %s %s\n", mf.GetName(), strings.ToLower(mf.GetType().String()))
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			if len(labels) > 0 {
				fmt.Fprintf(&b, "%s{%s} %g\n", mf.GetName(), strings.Join(labels, ","), v)
			} else {
				fmt.Fprintf(&b, "%s %g\n", mf.GetName(), v)
			}
		}
	}
	return b.String()
}
