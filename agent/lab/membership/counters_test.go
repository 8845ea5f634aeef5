package membership

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/lab/fleet/fleettest"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// countKinds are the kind labels of an agent's call counters.
var countKinds = []string{"first_attempts", "retries", "successes", "failures", "slow_calls", "rejected"}

// sample is one scrape of one counter.
type sample struct {
	at time.Time
	v  float64
}

// promIncrease is Prometheus's increase() over samples spanning the whole
// range (the first and last at its boundaries: nothing to extrapolate):
// the sum of the rises, a fall being a counter reset from zero, which it
// also reports.
func promIncrease(ss []sample) (inc float64, reset bool) {
	for i := 1; i < len(ss); i++ {
		if d := ss[i].v - ss[i-1].v; d >= 0 {
			inc += d
		} else {
			inc, reset = inc+ss[i].v, true
		}
	}
	return inc, reset
}

// TestCallCountersMetricRate: a Prometheus user's rate() over an agent's
// fusebox_agent_local_calls_total is the rate of the calls its clients
// reported, and over fusebox_agent_fleet_calls_total, on either agent, the
// rate of the calls both agents' clients reported: scraped every 100 ms
// while the clients of two agents report a known number of calls of every
// kind over two seconds, each series' increase over the scrapes, as
// Prometheus computes it, is exactly the calls made, and none went back.
func TestCallCountersMetricRate(t *testing.T) {
	f := start(t, 2, false, func(_ int, c *agent.Config) { c.HTTPAddr = "127.0.0.1:0" })
	const dep = "ledger-api"
	agents := []*agent.Agent{f.Agent(0), f.Agent(1)}
	report := func(i int, o fuseboxv1.Outcome, n uint32) {
		t.Helper()
		if _, err := f.Client(i).Report(fleettest.Ctx(t, 5*time.Second), &fuseboxv1.ReportRequest{Outcomes: []*fuseboxv1.OutcomeReport{{
			Dependency: dep, Kind: fuseboxv1.AttemptKind_ATTEMPT_KIND_FIRST, Outcome: o, Count: n}}}); err != nil {
			t.Fatal(err)
		}
	}
	// The series exist, and each agent holds the other's row, before the
	// range (what a node counted before an agent took the dependency up is
	// that agent's baseline).
	for i := range agents {
		report(i, fuseboxv1.Outcome_OUTCOME_SUCCESS, 1)
	}
	sstest.Eventually(t, 10*time.Second, "each agent to hold the other's row", func() bool {
		return len(agents[0].Engine().Rows(dep)) == 2 && len(agents[1].Engine().Rows(dep)) == 2
	})
	samples := map[string][]sample{} // agent/metric/kind
	scrape := func() {
		for i, ag := range agents {
			_, body := get(t, "http://"+ag.HTTPAddr()+"/metrics")
			parser := expfmt.NewTextParser(model.UTF8Validation)
			fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"local_calls_total", "fleet_calls_total"} {
				for _, k := range countKinds {
					if v, ok := series(fams, "fusebox_agent_"+name, map[string]string{"dependency": dep, "kind": k}); ok {
						key := strconv.Itoa(i) + "/" + name + "/" + k
						samples[key] = append(samples[key], sample{time.Now(), v})
					}
				}
			}
		}
	}
	last := func(key string) float64 { s := samples[key]; return s[len(s)-1].v - s[0].v }
	scrape()
	// Agent 0's clients: 10 successes a round, a failure every other, a
	// slow failure and a rejection every seventh; agent 1's: 5 successes.
	made := map[string]float64{}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for i := range 20 {
		<-tick.C
		report(0, fuseboxv1.Outcome_OUTCOME_SUCCESS, 10)
		report(1, fuseboxv1.Outcome_OUTCOME_SUCCESS, 5)
		made["0/first_attempts"] += 10
		made["0/successes"] += 10
		made["1/first_attempts"] += 5
		made["1/successes"] += 5
		if i%2 == 0 {
			report(0, fuseboxv1.Outcome_OUTCOME_FAILURE, 1)
			made["0/first_attempts"]++
			made["0/failures"]++
		}
		if i%7 == 0 {
			report(0, fuseboxv1.Outcome_OUTCOME_TIMEOUT, 1) // a slow failure
			report(0, fuseboxv1.Outcome_OUTCOME_REJECTED, 1)
			for _, k := range []string{"first_attempts", "failures", "slow_calls", "rejected"} {
				made["0/"+k]++
			}
		}
		scrape()
	}
	total := made["0/first_attempts"] + made["1/first_attempts"]
	sstest.Eventually(t, 10*time.Second, "both agents' fleet counters to hold every call", func() bool {
		scrape()
		return last("0/fleet_calls_total/first_attempts") == total && last("1/fleet_calls_total/first_attempts") == total
	})
	for _, ag := range []string{"0", "1"} {
		for _, k := range countKinds {
			for name, want := range map[string]float64{"local_calls_total": made[ag+"/"+k], "fleet_calls_total": made["0/"+k] + made["1/"+k]} {
				ss := samples[ag+"/"+name+"/"+k]
				inc, reset := promIncrease(ss)
				rate := inc / ss[len(ss)-1].at.Sub(ss[0].at).Seconds() // rate() over the same range
				if reset || inc != want {
					t.Errorf("agent %s: fusebox_agent_%s{kind=%q}: increase %v (rate %.1f/s; went back: %v), want %v", ag, name, k, inc, rate, reset, want)
				}
			}
		}
	}
}
