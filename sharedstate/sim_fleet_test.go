package sharedstate

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// Detection at fleet speed (sharedstate/DESIGN.md, "Transitions"): the fleet simulation
// with memberlist-like gossip and clientlib-like 50 ms count flushes,
// against per-instance breakers with the same thresholds (classic rule,
// scope node, nothing shared).

const (
	deathRate = 2.0              // requests per node per second
	deathWarm = 12 * time.Second // healthy traffic before the death: a full window
)

type deathRun struct {
	wasted int           // calls that reached the dead dependency until every node rejected
	took   time.Duration // from the death until every node rejected
	why    string        // the reason of the first open record (Fusebox)
}

// simDeath runs n nodes at deathRate each, healthy for warm, then dead, and
// measures the calls made from the death until every node rejects first
// attempts.
func simDeath(t *testing.T, n int, seed uint64, fusebox bool, warm time.Duration) deathRun {
	opts := simOptions{nodes: n, gossip: true, flush: 50 * time.Millisecond, backoff: true}
	mutate := func(p *Policy) {}
	if !fusebox {
		opts = simOptions{nodes: n, isolated: true, backoff: true}
		mutate = func(p *Policy) { p.Breaker.Scope, p.Breaker.Confidence = ScopeNode, 0 }
	}
	s := newSimWith(t, opts, seed, mutate)
	s.rate = deathRate
	deadAt := s.start.Add(warm)
	s.healthy = func(_ int, at time.Time) bool { return at.Before(deadAt) }
	s.runUntil(warm)
	before := s.calls
	for s.now().Before(deadAt.Add(30 * time.Second)) {
		s.step()
		all := true
		for i := range s.nodes {
			if s.nodes[i].Snapshot(dep).DecideFirst().Verdict != Reject {
				all = false
				break
			}
		}
		if all {
			run := deathRun{wasted: s.calls - before, took: s.now().Sub(deadAt)}
			if len(s.proposals) > 0 {
				run.why = s.proposals[0].Reason + fmt.Sprintf(" [first open %v after the death, %d calls]", s.firstOpenAt.Sub(deadAt), s.callsBeforeFirstOpen-before)
			}
			return run
		}
	}
	t.Fatalf("%d nodes (fusebox %v, seed %d): not every node rejects 30 s after the death", n, fusebox, seed)
	return deathRun{}
}

// deathRow is one row of the detection table of sharedstate/README.md: medians over seeds.
type deathRow struct {
	nodes                int
	fusebox, perInstance int
	fuseboxTook, perTook time.Duration
}

func (r deathRow) ratio() float64 { return float64(r.perInstance) / float64(max(1, r.fusebox)) }

func median[T int | time.Duration](v []T) T {
	slices.Sort(v)
	return v[len(v)/2]
}

func measureDeath(t *testing.T, n int, seeds int, warm time.Duration) deathRow {
	var fb, pi []int
	var fbT, piT []time.Duration
	for seed := range uint64(seeds) {
		f := simDeath(t, n, 100+seed, true, warm)
		p := simDeath(t, n, 100+seed, false, warm)
		if seed == 0 {
			t.Logf("%d nodes, seed 100: first open: %s", n, f.why)
		}
		fb, fbT = append(fb, f.wasted), append(fbT, f.took)
		pi, piT = append(pi, p.wasted), append(piT, p.took)
	}
	return deathRow{nodes: n, fusebox: median(fb), perInstance: median(pi), fuseboxTook: median(fbT), perTook: median(piT)}
}

// TestSimDetectionAtFleetSpeed: a dependency dies after a full window of
// healthy traffic at 2 requests/s per node; the fleet must stop calling it
// with ≥ 3× fewer wasted calls than per-instance breakers at 8 nodes, ≥ 6×
// at 24 and ≥ 10× at 50. FUSEBOX_SIM_TABLE=1 also runs 200 nodes and the
// cold start, and prints sharedstate/README.md's table.
func TestSimDetectionAtFleetSpeed(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet simulation")
	}
	table := os.Getenv("FUSEBOX_SIM_TABLE") != ""
	sizes := []struct {
		nodes  int
		target float64
	}{{8, 3}, {24, 6}, {50, 10}}
	if table {
		sizes = append(sizes, struct {
			nodes  int
			target float64
		}{200, 10})
	}
	seeds := 3
	if table {
		seeds = 5
	}
	var rows []string
	for _, sz := range sizes {
		r := measureDeath(t, sz.nodes, seeds, deathWarm)
		t.Logf("dies under traffic, %d × 2 rps: Fusebox %d calls (%v), per-instance %d (%v): %.1f×",
			sz.nodes, r.fusebox, r.fuseboxTook, r.perInstance, r.perTook, r.ratio())
		rows = append(rows, fmt.Sprintf("| dies under traffic | %d × 2 rps | %d (%.2f s) | %d (%.1f s) | %.1f× |",
			sz.nodes, r.fusebox, r.fuseboxTook.Seconds(), r.perInstance, r.perTook.Seconds(), r.ratio()))
		if r.ratio() < sz.target {
			t.Errorf("%d nodes: Fusebox wasted %d calls, per-instance breakers %d: %.1f×, want ≥ %.0f×",
				sz.nodes, r.fusebox, r.perInstance, r.ratio(), sz.target)
		}
	}
	if table {
		for _, n := range []int{8, 50} {
			r := measureDeath(t, n, seeds, 0)
			rows = append(rows, fmt.Sprintf("| cold start (dead from the first call) | %d × 2 rps | %d (%.2f s) | %d (%.1f s) | %.1f× |",
				n, r.fusebox, r.fuseboxTook.Seconds(), r.perInstance, r.perTook.Seconds(), r.ratio()))
		}
		t.Logf("README table (medians of %d seeds):\n%s", seeds, strings.Join(rows, "\n"))
	}
}

// falseTrips runs n nodes at rate requests/s each against a dependency
// failing a fraction p of calls at random, from a cold start, for d, and
// returns the fleet open proposals, the ticks at which a node's own breaker
// was open, and the urgent rows sent.
func falseTrips(t *testing.T, n int, rate, p float64, d time.Duration, seed uint64) (opens, localOpenTicks, urgent int) {
	s := newSimWith(t, simOptions{nodes: n, gossip: true, flush: 50 * time.Millisecond, backoff: true}, seed, nil)
	s.rate = rate
	s.healthy = func(int, time.Time) bool { return s.rng.Float64() >= p }
	s.onTick = func(s *sim) {
		for i := range s.nodes {
			if s.snap(i).LocalState != Closed {
				localOpenTicks++
			}
		}
	}
	s.runUntil(d)
	for _, r := range s.proposals {
		if r.State == Open {
			opens++
			t.Logf("%d nodes, seed %d: false trip at %v: %s", n, seed, r.Since.Sub(s.start), r.Reason)
		}
	}
	return opens, localOpenTicks, s.urgentSent
}

// TestSimNoFalseTripsBelowThreshold: a dependency failing 30% of calls
// against the default 50% threshold is never opened, at any horizon, fleet
// or node-local, from a cold start. FUSEBOX_SIM_TABLE=1 runs it for hours
// of simulated traffic and prints the rate for sharedstate/README.md.
func TestSimNoFalseTripsBelowThreshold(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet simulation")
	}
	d, seeds := 2*time.Minute, 1
	if raceEnabled {
		d = 20 * time.Second
	}
	if os.Getenv("FUSEBOX_SIM_TABLE") != "" {
		d, seeds = 10*time.Minute, 3
	}
	for _, c := range []struct {
		nodes int
		rate  float64
	}{{8, 5}, {50, 2}} {
		var opens, local, urgent int
		for seed := range uint64(seeds) {
			o, l, u := falseTrips(t, c.nodes, c.rate, 0.3, d, 200+seed)
			opens, local, urgent = opens+o, local+l, urgent+u
		}
		hours := d.Hours() * float64(seeds)
		t.Logf("%d nodes × %.0f rps, 30%% failures, %.2f h of traffic: %d fleet trips, %d node-local open ticks, %.0f urgent rows/s fleet-wide",
			c.nodes, c.rate, hours, opens, local, float64(urgent)/(hours*3600))
		if opens != 0 || local != 0 {
			t.Errorf("%d nodes: %d fleet trips and %d node-local open ticks at 30%% failures against a 50%% threshold", c.nodes, opens, local)
		}
	}
}
