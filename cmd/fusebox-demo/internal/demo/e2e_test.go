package demo_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/cmd/fusebox-demo/internal/demo"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// TestFailureCycle runs the demo headless through one cycle of 4s phases
// (and half a healthy phase after it) and checks the fleet behaviour the
// demo is there to show:
//
//   - the breaker of shipping-api opens on all three agents while it fails;
//   - half-open lets at most halfOpenProbes probes reach it at once,
//     fleet-wide, counted at the dependency itself;
//   - it closes on every agent once shipping-api answers fast again (never
//     while it fails, nor while it answers slower than slowCallDuration:
//     half-open judges a slow probe as a failed one), and ends closed;
//   - the retries made during the outage stay within the fleet retry budget;
//   - the service behind agent-c's egress proxy counts in agent-c's window.
func TestFailureCycle(t *testing.T) {
	const phase = 4 * time.Second
	cfg := testConfig(t, phase)
	cfg.Duration = 4*phase + phase/2
	d := startDemo(t, cfg)
	rec := d.RecordCounts()
	pol := d.Policy()

	ctx, cancel := context.WithTimeout(context.Background(), cfg.Duration+30*time.Second)
	defer cancel()
	sum, err := d.Wait(ctx)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	failing := d.Phase(0, demo.Failing)
	slow := d.Phase(0, demo.Slow)
	recovering := d.Phase(0, demo.Recovering)
	trs := sum.TransitionsOf(demo.ShippingAPI)
	agents := d.Agents()

	t.Run("opens on every agent while failing", func(t *testing.T) {
		for _, a := range agents {
			var at time.Time
			for _, tr := range trs {
				if tr.Agent == a.Name() && tr.To == "open" && !tr.At.Before(failing.Start) && tr.At.Before(failing.End) {
					at = tr.At
					break
				}
			}
			if at.IsZero() {
				t.Errorf("%s: the breaker did not open during the failing phase %s–%s; transitions: %v",
					a.Name(), failing.Start.Format("15:04:05.000"), failing.End.Format("15:04:05.000"), trs)
				continue
			}
			t.Logf("%s: open %.2fs into the failing phase", a.Name(), at.Sub(failing.Start).Seconds())
		}
	})

	t.Run("a service behind the egress proxy is part of the fleet", func(t *testing.T) {
		// returns@agent-c links no clientlib: its calls went through
		// agent-c's proxy into agent-c's window.
		var n float64
		mfs, err := agents[2].Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "fusebox_agent_outcomes_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "source" && l.GetValue() == "proxy" {
						n += m.GetCounter().GetValue()
					}
				}
			}
		}
		if n == 0 {
			t.Errorf("%s counted no outcome from its egress proxy", agents[2].Name())
		}
		t.Logf("%s: %.0f outcomes through its egress proxy", agents[2].Name(), n)
	})

	t.Run("half-open admits at most halfOpenProbes probes fleet-wide", func(t *testing.T) {
		p := d.Probes(demo.ShippingAPI)
		if p.Requests == 0 {
			t.Fatalf("no probe reached %s: half-open never admitted one (transitions %v)", demo.ShippingAPI, trs)
		}
		if p.MaxConcurrent > pol.Breaker.HalfOpenProbes {
			t.Errorf("%d probes at %s at once, want at most halfOpenProbes = %d (3 agents, 3 services)",
				p.MaxConcurrent, demo.ShippingAPI, pol.Breaker.HalfOpenProbes)
		}
		t.Logf("%d probes in all, at most %d at once (halfOpenProbes %d); clients' local probe decisions: %d",
			p.Requests, p.MaxConcurrent, pol.Breaker.HalfOpenProbes, sum.AgentFallbacks["acquire_probe"])
	})

	t.Run("closes after recovery", func(t *testing.T) {
		// It stays open (or half-open) through the slow phase, whose
		// probes answer after 300ms against the policy's 200ms
		// slowCallDuration and fail by the slow-call rule, and closes in
		// the recovering phase; it ends closed.
		for _, a := range agents {
			var last demo.Transition
			for _, tr := range trs {
				if tr.Agent != a.Name() {
					continue
				}
				last = tr
				if tr.To == "closed" && !tr.At.Before(failing.Start) && tr.At.Before(failing.End) {
					t.Errorf("%s: closed while %s was failing: %v", a.Name(), demo.ShippingAPI, tr)
				}
				if tr.To == "closed" && !tr.At.Before(slow.Start) && tr.At.Before(slow.End) {
					t.Errorf("%s: closed while %s answered slowly: %v", a.Name(), demo.ShippingAPI, tr)
				}
			}
			if last.To != "closed" || last.At.Before(failing.End) {
				t.Errorf("%s: last transition %v, want one to closed after the outage", a.Name(), last)
				continue
			}
			if s := a.Engine().Snapshot(demo.ShippingAPI); s == nil || s.State != sharedstate.Closed {
				t.Errorf("%s: breaker at the end: %+v, want closed", a.Name(), s)
			}
			t.Logf("%s: closed for good %.2fs after the outage ended (the recovering phase began %.2fs after it)",
				a.Name(), last.At.Sub(failing.End).Seconds(), recovering.Start.Sub(failing.End).Seconds())
		}
	})

	t.Run("retries during the outage stay within the budget", func(t *testing.T) {
		// The budget is per window W: retries in any W ≤ max(floor, ratio ×
		// first attempts in that W) ≤ floor + ratio × first attempts, with
		// floor = minRetriesPerSecond × W. An agent admits retries only
		// while its breaker is closed (open and half-open refuse them), so
		// the outage's retries fall between its start and the moment the
		// last agent stopped being closed: a span S covered by ceil(S/W)
		// windows (one, in practice), starting no earlier than W before the
		// outage. Hence
		//
		//   retries ≤ ratio × firstAttempts(start−W, end] + floor × ceil(S/W) + slack.
		//
		// Slack: an agent admits a retry while its count is below its
		// fractional share, so each may go one over per window (3 ×
		// ceil(S/W)); the counters are sampled every 100ms (2 more); and a
		// retry the client decided locally because its agent did not answer
		// within AgentWait is outside the fleet budget by design (counted
		// exactly, by the clients' fallback metric).
		w := pol.Breaker.Window.Std()
		var stopped time.Time // when the last agent stopped admitting retries
		for _, a := range agents {
			for _, tr := range trs {
				if tr.Agent == a.Name() && tr.To != "closed" && !tr.At.Before(failing.Start) && tr.At.Before(failing.End) {
					stopped = later(stopped, tr.At)
					break
				}
			}
		}
		if stopped.IsZero() {
			t.Fatal("no agent stopped admitting retries during the outage")
		}
		span := stopped.Sub(failing.Start) + 100*time.Millisecond // + the watcher's and the sampler's resolution
		windows := math.Ceil(span.Seconds() / w.Seconds())
		out := rec.Between(demo.ShippingAPI, failing.Start, failing.End)
		fa := rec.Between(demo.ShippingAPI, failing.Start.Add(-w), failing.End).FirstAttempts
		b := pol.Retry.Budget
		floor := b.MinRetriesPerSecond * w.Seconds()
		local := float64(sum.AgentFallbacks["acquire_retry"])
		slack := 3*windows + 2 + local
		bound := b.Ratio*float64(fa) + floor*windows + slack
		t.Logf("outage: %d first attempts (%d counting the window before it), %d retries within %.2fs, %d calls denied a retry by the budget; bound %.1f = %.2f × %d + %.1f × %.0f + slack %.0f (local retry decisions: %.0f)",
			out.FirstAttempts, fa, out.Retries, span.Seconds(), out.BudgetDenied, bound, b.Ratio, fa, floor, windows, slack, local)
		if float64(out.Retries) > bound {
			t.Errorf("%d retries during the outage, over the budget's bound %.1f", out.Retries, bound)
		}
		// Without the budget every failed first attempt before the trip
		// would retry maxAttempts-1 times: check that the budget, not luck,
		// kept the retries down.
		if out.BudgetDenied == 0 {
			t.Errorf("the budget denied no retry during the outage (%d first attempts, %d retries): nothing was tested",
				out.FirstAttempts, out.Retries)
		}
	})
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
