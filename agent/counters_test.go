package agent

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// sample is one scrape of one counter.
type sample struct {
	at time.Time
	v  float64
}

// promIncrease is Prometheus's increase() over samples that span the
// whole range (the first and last at its boundaries, so nothing is
// extrapolated): the sum of the rises, a fall being a counter reset from
// zero. It also reports whether the series ever fell.
func promIncrease(ss []sample) (inc float64, reset bool) {
	for i := 1; i < len(ss); i++ {
		if d := ss[i].v - ss[i-1].v; d >= 0 {
			inc += d
		} else {
			inc += ss[i].v
			reset = true
		}
	}
	return inc, reset
}

// promRate is rate() over the same samples: increase / range.
func promRate(ss []sample) float64 {
	inc, _ := promIncrease(ss)
	return inc / ss[len(ss)-1].at.Sub(ss[0].at).Seconds()
}

// scrapeCalls reads an agent's /metrics: name{dependency=dep, kind} for
// every kind.
func scrapeCalls(t *testing.T, a *Agent, name, dep string) map[string]float64 {
	t.Helper()
	code, body := get(t, "http://"+a.HTTPAddr()+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, k := range countKinds {
		if v, ok := series(fams, name, map[string]string{"dependency": dep, "kind": k}); ok {
			out[k] = v
		}
	}
	return out
}

// TestCallCountersMetricRate: a Prometheus user's rate() over an agent's
// fusebox_agent_local_calls_total is the rate of the calls its clients
// reported, and over fusebox_agent_fleet_calls_total, on either agent, the
// rate of the calls both agents' clients reported: each scraped every 100 ms
// while two agents' clients report a known number of calls (first attempts,
// successes, failures, slow calls, rejections) over about two seconds, the
// increase between the first and the last scrape, as Prometheus computes
// it, is exactly the calls made, and no series ever went back.
func TestCallCountersMetricRate(t *testing.T) {
	f := newFleet(t, 2, false)
	const dep = "ledger-api"
	a, b := f.agents[0].Agent, f.agents[1].Agent
	report := func(ag *Agent, o fuseboxv1.Outcome, n uint32) {
		t.Helper()
		kind := fuseboxv1.AttemptKind_ATTEMPT_KIND_FIRST
		if _, err := dial(t, ag).Report(ctxT(t, 5*time.Second), &fuseboxv1.ReportRequest{Outcomes: []*fuseboxv1.OutcomeReport{{
			Dependency: dep, Kind: kind, Outcome: o, Count: n}}}); err != nil {
			t.Fatal(err)
		}
	}
	// One call on each, and each agent holding the other's row: the series
	// exist before the range (what a node counted before an agent took up
	// the dependency is that agent's baseline).
	report(a, fuseboxv1.Outcome_OUTCOME_SUCCESS, 1)
	report(b, fuseboxv1.Outcome_OUTCOME_SUCCESS, 1)
	sstest.Eventually(t, 10*time.Second, "each agent to hold the other's row", func() bool {
		return len(a.eng.Rows(dep)) == 2 && len(b.eng.Rows(dep)) == 2
	})
	fleetFirst := func(ag *Agent) float64 {
		return scrapeCalls(t, ag, "fusebox_agent_fleet_calls_total", dep)["first_attempts"]
	}

	type key struct {
		agent *Agent
		name  string
	}
	scrapes := map[key]map[string][]sample{}
	scrape := func() {
		for _, ag := range []*Agent{a, b} {
			for _, name := range []string{"fusebox_agent_local_calls_total", "fusebox_agent_fleet_calls_total"} {
				k := key{ag, name}
				if scrapes[k] == nil {
					scrapes[k] = map[string][]sample{}
				}
				now := time.Now()
				for kind, v := range scrapeCalls(t, ag, name, dep) {
					scrapes[k][kind] = append(scrapes[k][kind], sample{now, v})
				}
			}
		}
	}
	scrape()
	// a's clients: 200 successes, 10 failures (3 slow), 4 rejections; b's:
	// 100 successes; in 20 rounds of 100 ms.
	made := map[*Agent]map[string]float64{a: {}, b: {}}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for i := range 20 {
		<-tick.C
		report(a, fuseboxv1.Outcome_OUTCOME_SUCCESS, 10)
		report(b, fuseboxv1.Outcome_OUTCOME_SUCCESS, 5)
		made[a]["first_attempts"] += 10
		made[a]["successes"] += 10
		made[b]["first_attempts"] += 5
		made[b]["successes"] += 5
		if i%2 == 0 {
			report(a, fuseboxv1.Outcome_OUTCOME_FAILURE, 1)
			made[a]["first_attempts"]++
			made[a]["failures"]++
		}
		if i%7 == 0 {
			report(a, fuseboxv1.Outcome_OUTCOME_TIMEOUT, 1) // a slow failure
			report(a, fuseboxv1.Outcome_OUTCOME_REJECTED, 1)
			made[a]["first_attempts"]++
			made[a]["failures"]++
			made[a]["slow_calls"]++
			made[a]["rejected"]++
		}
		scrape()
	}
	total := made[a]["first_attempts"] + made[b]["first_attempts"]
	sstest.Eventually(t, 10*time.Second, "both agents' fleet counters to hold every call", func() bool {
		return fleetFirst(a) == scrapes[key{a, "fusebox_agent_fleet_calls_total"}]["first_attempts"][0].v+total &&
			fleetFirst(b) == scrapes[key{b, "fusebox_agent_fleet_calls_total"}]["first_attempts"][0].v+total
	})
	scrape()

	for _, ag := range []*Agent{a, b} {
		for _, name := range []string{"fusebox_agent_local_calls_total", "fusebox_agent_fleet_calls_total"} {
			for _, kind := range countKinds {
				want := made[ag][kind]
				if name == "fusebox_agent_fleet_calls_total" {
					want = made[a][kind] + made[b][kind]
				}
				ss := scrapes[key{ag, name}][kind]
				where := fmt.Sprintf("%s: %s{kind=%q}", ag.cfg.Name, name, kind)
				if len(ss) < 2 {
					if want != 0 {
						t.Errorf("%s: %d scrapes", where, len(ss))
					}
					continue
				}
				inc, reset := promIncrease(ss)
				if reset || inc != want {
					t.Errorf("%s: increase %v (went back: %v), want %v", where, inc, reset, want)
				}
				el := ss[len(ss)-1].at.Sub(ss[0].at)
				if r := promRate(ss); r*el.Seconds() < want-1e-6 || r*el.Seconds() > want+1e-6 {
					t.Errorf("%s: rate %.2f/s over %v, want %v calls", where, r, el, want)
				}
			}
		}
	}
}
