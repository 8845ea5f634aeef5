package proxy

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate"
)

// TestRampRefusalsAreNamed: in the ramp after a close the proxy refuses
// part of the first attempts, with Fusebox-Rejected: ramp and the reason
// label ramp, never as throttled (the throttle is off).
func TestRampRefusalsAreNamed(t *testing.T) {
	clock := sharedstate.NewManualClock(time.Now())
	var fail atomic.Bool
	fail.Store(true)
	up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		if fail.Load() {
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
	le, err := NewLocalEngine(sharedstate.EngineConfig{Node: "node-1", Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	eng := le.Engine
	pol := testPolicy()
	pol.Breaker.ProbeSuccessThreshold = 1
	pol.Breaker.Scope = sharedstate.ScopeNode // the node is its own prober
	pol.Breaker.RampDuration = sharedstate.Duration(time.Minute)
	pol.Breaker.RampStart = 0.1 // 90% refused at the close
	if err := eng.SetDefaultPolicy(pol); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, nil, func(c *Config) { c.Engine = le })
	h.eng = eng
	dep := hostOf(up)
	for range 5 {
		h.get(up.URL + "/")
	}
	h.window(dep, "5 failures", func(c sharedstate.Counts) bool { return c.Failures >= 5 })
	eng.Tick()
	if s := eng.Snapshot(dep); s.State != sharedstate.Open {
		t.Fatalf("state %v, want open", s.State)
	}
	clock.Advance(31 * time.Second)
	eng.Tick()
	fail.Store(false)
	if resp := h.get(up.URL + "/"); resp.StatusCode != 200 || resp.Header.Get(HeaderProbe) != "1" {
		t.Fatalf("the probe: %d %q", resp.StatusCode, resp.Header.Get(HeaderRejected))
	}
	eng.Tick()
	if s := eng.Snapshot(dep); s.State != sharedstate.Closed || s.RampProbability < 0.8 {
		t.Fatalf("after the probe: %+v, want closed and ramping", s)
	}
	refused := 0
	for range 20 {
		resp := h.get(up.URL + "/")
		switch {
		case resp.StatusCode == 200:
		case resp.StatusCode == 503 && resp.Header.Get(HeaderRejected) == "ramp":
			refused++
		default:
			t.Fatalf("in the ramp: %d %s=%q, want 200 or 503 ramp", resp.StatusCode, HeaderRejected, resp.Header.Get(HeaderRejected))
		}
	}
	if refused == 0 {
		t.Fatal("no request refused by a ramp refusing 90%")
	}
	if got := h.counter("fusebox_agent_proxy_rejected_total", "reason", "ramp"); got != float64(refused) {
		t.Errorf("rejected_total{ramp} = %v, want %d", got, refused)
	}
	if got := h.counter("fusebox_agent_proxy_rejected_total", "reason", "throttled"); got != 0 {
		t.Errorf("rejected_total{throttled} = %v, want 0", got)
	}
}
