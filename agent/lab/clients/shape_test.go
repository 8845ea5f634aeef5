package clients

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/clientlib"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// gaugeOf reads one series of a's metrics (NaN-free: -1 when absent).
func gaugeOf(t *testing.T, a *agent.Agent, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := a.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue metric
				}
			}
			return gaugeValue(m)
		}
	}
	return -1
}

func gaugeValue(m *dto.Metric) float64 { return m.GetGauge().GetValue() }

// Throttling and the concurrency limit through real agents and clients:
// the limit is shared by node and by process, in-flight counts reach the
// agents and travel between them, and failures on both nodes make the
// fleet's throttle refuse first attempts with ErrThrottled.
func TestShapeThroughRealAgents(t *testing.T) {
	w := newWorld(t, 2)
	const name = "shaped-api"
	w.putPolicy(t, name, `{"dependency": "shaped-api",
		"breaker": {"minimumRequests": 1000000},
		"throttle": {"enabled": true, "k": 1.5, "minRequests": 10},
		"concurrency": {"maxInFlight": 8}}`, func(p sharedstate.Policy) bool {
		return p.Throttle.Enabled && p.Concurrency.MaxInFlight == 8
	})
	a0, a1 := w.agents[0], w.agents[1]
	dep := func(a *agent.Agent, svc string) *clientlib.Dependency {
		return newClient(t, a, svc, func(c *clientlib.Config) { c.Dependencies = []string{name} }).Dependency(name)
	}
	x, y, z := dep(a0, "svc-x"), dep(a0, "svc-y"), dep(a1, "svc-z")
	fromAgent(t, x, y, z)

	t.Run("the node's share is split among the agent's clients", func(t *testing.T) {
		sstest.Eventually(t, 10*time.Second, "process shares of the node shares", func() bool {
			s0, s1 := a0.Engine().Snapshot(name), a1.Engine().Snapshot(name)
			if s0 == nil || s1 == nil || s0.ConcurrencyLimit == 0 || s1.ConcurrencyLimit == 0 {
				return false
			}
			return x.ConcurrencyLimit() == int64(max(1, s0.ConcurrencyLimit/2)) &&
				y.ConcurrencyLimit() == int64(max(1, s0.ConcurrencyLimit/2)) &&
				z.ConcurrencyLimit() == int64(s1.ConcurrencyLimit)
		})
	})

	t.Run("in-flight counts reach the agent and the fleet", func(t *testing.T) {
		var dones []func(clientlib.Outcome)
		for _, d := range []*clientlib.Dependency{x, y, z} {
			done, err := d.Allow(clientlib.First)
			if err != nil {
				t.Fatalf("Allow: %v", err)
			}
			dones = append(dones, done)
		}
		sstest.Eventually(t, 10*time.Second, "2 in flight on agent-0, 3 in the fleet on both", func() bool {
			s0, ok0 := a0.Engine().Shape(name)
			s1, ok1 := a1.Engine().Shape(name)
			return ok0 && ok1 && s0.NodeInFlight == 2 && s1.NodeInFlight == 1 && s0.InFlight == 3 && s1.InFlight == 3
		})
		if v := gaugeOf(t, a0, "fusebox_agent_in_flight", map[string]string{"dependency": name, "scope": "fleet"}); v != 3 {
			t.Errorf("fusebox_agent_in_flight{scope=fleet} = %v, want 3", v)
		}
		if v := gaugeOf(t, a0, "fusebox_agent_concurrency_limit", map[string]string{"dependency": name}); v < 1 {
			t.Errorf("fusebox_agent_concurrency_limit = %v, want a share ≥ 1", v)
		}
		for _, done := range dones {
			done(clientlib.Success)
		}
		sstest.Eventually(t, 10*time.Second, "nothing in flight any more", func() bool {
			s0, _ := a0.Engine().Shape(name)
			return s0.NodeInFlight == 0 && s0.InFlight == 0
		})
	})

	t.Run("failures on both nodes throttle first attempts", func(t *testing.T) {
		for _, d := range []*clientlib.Dependency{x, z} {
			for range 10 {
				err := d.Do(context.Background(), clientlib.NonRetryable, func(context.Context, clientlib.Attempt) error { return errBoom })
				if !errors.Is(err, errBoom) && !errors.Is(err, clientlib.ErrThrottled) {
					t.Fatalf("Do: %v", err)
				}
			}
		}
		// The clients draw 0 (zeroRandom): any probability above 0 refuses.
		sstest.Eventually(t, 10*time.Second, "a throttled first attempt on both nodes", func() bool {
			for _, d := range []*clientlib.Dependency{y, z} {
				done, err := d.Allow(clientlib.First)
				if err == nil {
					done(clientlib.Success)
					return false
				}
				if !errors.Is(err, clientlib.ErrThrottled) || !errors.Is(err, clientlib.ErrOpen) {
					t.Fatalf("Allow: %v, want ErrThrottled", err)
				}
			}
			return true
		})
		p := gaugeOf(t, a1, "fusebox_agent_throttle_probability", map[string]string{"dependency": name})
		if !(p > 0 && p < 1) {
			t.Errorf("fusebox_agent_throttle_probability = %v, want in (0,1)", p)
		}
		if s := a1.Engine().Snapshot(name); s.State != sharedstate.Closed || s.ThrottleProbability == 0 {
			t.Errorf("snapshot %+v: want a closed breaker with a throttle probability", s)
		}
		if got := fmt.Sprint(z.Status().State); got != "closed" {
			t.Errorf("the breaker is %s: throttling happens while it is closed", got)
		}
	})
}
