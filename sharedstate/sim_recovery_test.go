package sharedstate

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// Recovery: a dependency that dies under traffic stays dead for
// recoveryDead, then answers again. How many probes reach it while it is
// dead, and how long after it recovered does the fleet send it full traffic
// again? Fusebox against per-instance breakers with the same thresholds, in
// the fleet simulation of TestSimDetectionAtFleetSpeed.

const (
	recoveryNodes = 8
	recoveryRate  = 2.0 // requests per node per second
	recoveryWarm  = 12 * time.Second
	recoveryDead  = 22 * time.Second
	recoveryAfter = 30 * time.Second // simulated after the recovery
)

type recoveryRun struct {
	probes  int           // probes sent while the dependency was dead
	refused float64       // first attempts refused after the recovery, in seconds of the fleet's traffic
	resumed time.Duration // from the recovery until every node's breaker is closed for good
	full    time.Duration // from the recovery until every node admits every first attempt for good
}

// fullyAdmits reports whether a snapshot admits every first attempt: the
// breakers closed, no override, nothing throttled.
func fullyAdmits(s *Snapshot) bool {
	return s != nil && s.State == Closed && s.LocalState == Closed && s.Override == OverrideNone && s.ThrottleProbability == 0
}

// simRecovery runs recoveryNodes nodes at recoveryRate each: healthy for
// recoveryWarm, dead for recoveryDead, healthy again for recoveryAfter.
func simRecovery(t *testing.T, seed uint64, dead time.Duration, fusebox bool, mutate func(p *Policy)) recoveryRun {
	opts := simOptions{nodes: recoveryNodes, gossip: true, flush: 50 * time.Millisecond, backoff: true}
	m := mutate
	if !fusebox {
		opts = simOptions{nodes: recoveryNodes, isolated: true, backoff: true}
		m = func(p *Policy) {
			if mutate != nil {
				mutate(p)
			}
			p.Breaker.Scope, p.Breaker.Confidence, p.Breaker.RampDuration = ScopeNode, 0, 0
		}
	}
	s := newSimWith(t, opts, seed, m)
	s.rate = recoveryRate
	deadAt := s.start.Add(recoveryWarm)
	upAt := deadAt.Add(dead)
	s.healthy = func(_ int, at time.Time) bool { return at.Before(deadAt) || !at.Before(upAt) }
	var lastClosed, lastFull time.Time // the last tick at which some node was not closed / not admitting all
	opened := false
	s.onTick = func(s *sim) {
		closed, full := true, true
		for i := range s.nodes {
			sn := s.nodes[i].Snapshot(dep)
			if sn != nil && (sn.State != Closed || sn.LocalState != Closed) {
				closed = false
				opened = true
			}
			if sn != nil && !fullyAdmits(sn) {
				full = false
			}
		}
		if !closed {
			lastClosed = s.now()
		}
		if !full {
			lastFull = s.now()
		}
	}
	s.runUntil(recoveryWarm + dead)
	probes := s.probeCalls
	rejectedBefore := sum(s.rejectedByNode)
	s.runUntil(recoveryWarm + dead + recoveryAfter)
	if !opened {
		t.Fatalf("seed %d (fusebox %v): no breaker opened", seed, fusebox)
	}
	end := s.start.Add(recoveryWarm + dead + recoveryAfter)
	if !lastFull.Before(end.Add(-simTick)) {
		t.Fatalf("seed %d (fusebox %v): not every node admits every first attempt %v after the recovery", seed, fusebox, recoveryAfter)
	}
	since := func(at time.Time) time.Duration { return max(0, at.Add(simTick).Sub(upAt)) }
	refused := float64(sum(s.rejectedByNode)-rejectedBefore) / (recoveryNodes * recoveryRate)
	return recoveryRun{probes: probes, refused: refused, resumed: since(lastClosed), full: since(lastFull)}
}

func sum(v []int) (n int) {
	for _, x := range v {
		n += x
	}
	return n
}

// meanOverPhases is the mean time until full traffic, and of traffic
// refused, over dead times of 16–31 s, one seed each: how long a fleet
// waits after a recovery depends on where the recovery falls in the probe
// cadence, which one dead time alone does not show.
func meanOverPhases(t *testing.T, fusebox bool, mutate func(p *Policy)) (full, refused float64) {
	const n = 16
	for i := range n {
		r := simRecovery(t, 400+uint64(i), 16*time.Second+time.Duration(i)*time.Second, fusebox, mutate)
		full += r.full.Seconds() / n
		refused += r.refused / n
	}
	return full, refused
}

// recoveryRow is one row of the recovery table of sharedstate/README.md: medians over seeds.
type recoveryRow struct {
	probes        int
	refused       float64
	resumed, full time.Duration
}

func measureRecovery(t *testing.T, seeds int, fusebox bool, mutate func(p *Policy)) recoveryRow {
	var probes []int
	var resumed, full, refused []time.Duration
	for seed := range uint64(seeds) {
		r := simRecovery(t, 300+seed, recoveryDead, fusebox, mutate)
		probes, resumed, full = append(probes, r.probes), append(resumed, r.resumed), append(full, r.full)
		refused = append(refused, time.Duration(r.refused*float64(time.Second)))
	}
	return recoveryRow{probes: median(probes), refused: median(refused).Seconds(), resumed: median(resumed), full: median(full)}
}

type recoverySetting struct {
	name    string
	fusebox bool
	mutate  func(p *Policy)
}

// recoveryWith sets the open durations (openDuration = 0: the default's),
// the ramp and probeSuccessThreshold (0: the default's).
func recoveryWith(open, fleetMax, ramp time.Duration, successes int) func(p *Policy) {
	return func(p *Policy) {
		if open > 0 {
			p.Breaker.OpenDuration = Duration(open)
		}
		p.Breaker.FleetMaxOpenDuration, p.Breaker.RampDuration = Duration(fleetMax), Duration(ramp)
		if successes > 0 {
			p.Breaker.ProbeSuccessThreshold = successes
		}
	}
}

var (
	recoveryDefaults    = recoverySetting{"Fusebox, defaults (openDuration 2s, fleetMaxOpenDuration 2s, rampDuration 500ms)", true, nil}
	recoveryDoubling    = recoverySetting{"Fusebox, fleetMaxOpenDuration 2m (doubling up to maxOpenDuration), no ramp", true, recoveryWith(0, 2*time.Minute, 0, 0)}
	recoveryPerInstance = recoverySetting{"per-instance breakers (scope node, classic rule, no ramp)", false, nil}
	recoveryTable       = []recoverySetting{
		recoveryDefaults,
		{"Fusebox, defaults, no ramp", true, recoveryWith(0, 2*time.Second, 0, 0)},
		{"Fusebox, defaults, rampDuration 1s", true, recoveryWith(0, 2*time.Second, time.Second, 0)},
		{"Fusebox, openDuration 1s, fleetMaxOpenDuration 1s", true, recoveryWith(time.Second, time.Second, 500*time.Millisecond, 0)},
		{"Fusebox, openDuration 5s, fleetMaxOpenDuration 5s", true, recoveryWith(5*time.Second, 5*time.Second, 500*time.Millisecond, 0)},
		{"Fusebox, openDuration 1s, fleetMaxOpenDuration 5s (1s, 2s, 4s, 5s, …)", true, recoveryWith(time.Second, 5*time.Second, 500*time.Millisecond, 0)},
		{"Fusebox, defaults, probeSuccessThreshold 1, no ramp", true, recoveryWith(0, 2*time.Second, 0, 1)},
		recoveryDoubling,
		recoveryPerInstance,
		recoveryPerInstance5s,
	}
	recoveryPerInstance5s = recoverySetting{"per-instance breakers, openDuration 5s", false, recoveryWith(5*time.Second, 5*time.Second, 0, 0)}
)

// TestSimRecovery: 8 nodes × 2 requests/s, the dependency dead for 22 s and
// then healthy, medians of 5 seeds. While it is dead the fleet sends at
// most half the probes per-instance breakers send; after it recovered, the
// fleet is back to full traffic within 2.5 s, through the ramp, in a third
// of the time per-instance breakers or a doubling open duration take.
// FUSEBOX_SIM_TABLE=1 prints sharedstate/README.md's recovery table.
func TestSimRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet simulation")
	}
	const seeds = 5
	if os.Getenv("FUSEBOX_SIM_TABLE") != "" {
		rows := []string{"| setting | probes while dead | closed after the recovery | full traffic after the recovery | traffic refused after the recovery | full traffic after the recovery, dead 16–31 s (mean) |",
			"| --- | --- | --- | --- | --- | --- |"}
		for _, st := range recoveryTable {
			r := measureRecovery(t, seeds, st.fusebox, st.mutate)
			mf, mr := meanOverPhases(t, st.fusebox, st.mutate)
			rows = append(rows, fmt.Sprintf("| %s | %d | %.1f s | %.1f s | %.1f s | %.1f s (%.1f s refused) |",
				st.name, r.probes, r.resumed.Seconds(), r.full.Seconds(), r.refused, mf, mr))
		}
		t.Logf("README table (dead 22 s: medians of %d seeds):\n%s", seeds, strings.Join(rows, "\n"))
		return
	}
	got := map[string]recoveryRow{}
	for _, st := range []recoverySetting{recoveryDefaults, recoveryDoubling, recoveryPerInstance, recoveryPerInstance5s} {
		r := measureRecovery(t, seeds, st.fusebox, st.mutate)
		got[st.name] = r
		t.Logf("%s: %d probes while dead; closed %.1f s and full traffic %.1f s after the recovery; %.1f s of traffic refused after it",
			st.name, r.probes, r.resumed.Seconds(), r.full.Seconds(), r.refused)
	}
	fb, dbl, pi := got[recoveryDefaults.name], got[recoveryDoubling.name], got[recoveryPerInstance.name]
	ramp := DefaultPolicy().Breaker.RampDuration.Std()
	// Per-instance breakers as configured here, and with the open duration
	// per-instance breakers are often given, which probes less.
	if pi5 := got[recoveryPerInstance5s.name]; fb.probes == 0 || 2*fb.probes > min(pi.probes, pi5.probes) {
		t.Errorf("Fusebox sent %d probes while the dependency was dead, per-instance breakers %d (openDuration 5s: %d): want at least one, and at most half", fb.probes, pi.probes, pi5.probes)
	}
	if fb.full > 2500*time.Millisecond || 3*fb.full > dbl.full || 3*fb.full > pi.full {
		t.Errorf("Fusebox back to full traffic %v after the recovery (doubling %v, per-instance %v): want ≤ 2.5s and a third of both", fb.full, dbl.full, pi.full)
	}
	if fb.full < fb.resumed+ramp-simTick || fb.full > fb.resumed+ramp+2*simTick {
		t.Errorf("Fusebox closed %v and full traffic %v after the recovery: want the %v ramp between", fb.resumed, fb.full, ramp)
	}
	if 3*fb.refused > pi.refused || 3*fb.refused > dbl.refused {
		t.Errorf("Fusebox refused %.1f s of traffic after the recovery (doubling %.1f s, per-instance %.1f s): want a third of both at most", fb.refused, dbl.refused, pi.refused)
	}
}

// A dependency slow throughout: every call answers, after 300 ms, against
// the slow-call rule of the demo's policy (80% of calls at least 200 ms).
// How many of the callers' requests still reach it after the breaker first
// tripped? Fusebox judges a slow probe as failed, so it reopens on every
// probe; per-instance breakers likewise, each on its own.
const (
	slowNodes    = 8
	slowRate     = 2.0
	slowDuration = 120 * time.Second
)

type slowRun struct {
	share float64 // calls that reached it / callers' requests, after the first trip
	trips int     // closes followed by a new trip (Fusebox: records)
}

func simSlowDependency(t *testing.T, seed uint64, fusebox bool, mutate func(p *Policy)) slowRun {
	slowRule := func(p *Policy) {
		p.Breaker.SlowCallRateThreshold = 0.8
		p.Breaker.SlowCallDuration = Duration(200 * time.Millisecond)
		if mutate != nil {
			mutate(p)
		}
	}
	opts := simOptions{nodes: slowNodes, gossip: true, flush: 50 * time.Millisecond, backoff: true}
	m := slowRule
	if !fusebox {
		opts = simOptions{nodes: slowNodes, isolated: true, backoff: true}
		m = func(p *Policy) {
			slowRule(p)
			p.Breaker.Scope, p.Breaker.Confidence, p.Breaker.RampDuration = ScopeNode, 0, 0
		}
	}
	s := newSimWith(t, opts, seed, m)
	s.rate = slowRate
	s.healthy = func(int, time.Time) bool { return true }
	s.slow = func(int, time.Time) bool { return true } // every call takes simProbeRTT (300 ms)
	demand := func() int { return s.firstCalls + s.probeCalls + sum(s.rejectedByNode) }
	var calls0, demand0 int
	tripped := false
	s.onTick = func(s *sim) {
		if tripped {
			return
		}
		for i := range s.nodes {
			if sn := s.nodes[i].Snapshot(dep); sn != nil && (sn.State != Closed || sn.LocalState != Closed) {
				tripped, calls0, demand0 = true, s.calls, demand()
				return
			}
		}
	}
	s.runUntil(slowDuration)
	if !tripped {
		t.Fatalf("seed %d (fusebox %v): the slow dependency never tripped a breaker", seed, fusebox)
	}
	closes := 0
	for _, r := range s.proposals {
		if r.State == Closed {
			closes++
		}
	}
	return slowRun{share: float64(s.calls-calls0) / float64(max(1, demand()-demand0)), trips: closes}
}

// TestSimSlowDependency: against a dependency slow throughout, at most 10%
// of the callers' requests reach it after the first trip (medians of 5
// seeds), and the fleet's breaker never closes on slow probes.
func TestSimSlowDependency(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet simulation")
	}
	const seeds = 5
	measure := func(fusebox bool, mutate func(p *Policy)) (share float64, closes int) {
		var shares []time.Duration // in ppm, for median
		for seed := range uint64(seeds) {
			r := simSlowDependency(t, 500+seed, fusebox, mutate)
			shares = append(shares, time.Duration(r.share*1e6))
			closes += r.trips
		}
		return float64(median(shares)) / 1e6, closes
	}
	if os.Getenv("FUSEBOX_SIM_TABLE") != "" {
		rows := []string{"| setting | requests that reach it after the first trip |", "| --- | --- |"}
		for _, st := range []recoverySetting{
			recoveryDefaults,
			{"Fusebox, openDuration 1s, fleetMaxOpenDuration 1s", true, recoveryWith(time.Second, time.Second, 500*time.Millisecond, 0)},
			{"Fusebox, openDuration 5s, fleetMaxOpenDuration 5s", true, recoveryWith(5*time.Second, 5*time.Second, 500*time.Millisecond, 0)},
			recoveryPerInstance,
			recoveryPerInstance5s,
		} {
			share, _ := measure(st.fusebox, st.mutate)
			rows = append(rows, fmt.Sprintf("| %s | %.1f%% |", st.name, 100*share))
		}
		t.Logf("README table (slow throughout: medians of %d seeds):\n%s", seeds, strings.Join(rows, "\n"))
		return
	}
	share, closes := measure(true, nil)
	t.Logf("defaults: %.1f%% of the requests after the first trip reached it; %d closes", 100*share, closes)
	if share > 0.10 {
		t.Errorf("%.1f%% of the requests after the first trip reached the slow dependency, want at most 10%%", 100*share)
	}
	if closes != 0 {
		t.Errorf("the breaker closed %d times on a dependency slow throughout", closes)
	}
}

// TestSimSlowProbesKeepTheBreakerOpen: a dependency that answers every call
// successfully but at 1.5× slowCallDuration trips the breaker on its
// slow-call rate (the demo's policy: 80% slow calls over 200ms); half-open
// judges probes by the same rule, so slow probes reopen it instead of
// closing it, and it closes only once the dependency is fast again.
func TestSimSlowProbesKeepTheBreakerOpen(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet simulation")
	}
	s := newSimWith(t, simOptions{nodes: 8, gossip: true, flush: 50 * time.Millisecond, backoff: true}, 7, func(p *Policy) {
		p.Breaker.SlowCallRateThreshold = 0.8
		p.Breaker.SlowCallDuration = Duration(200 * time.Millisecond)
		p.Breaker.OpenDuration, p.Breaker.FleetMaxOpenDuration = Duration(2*time.Second), Duration(2*time.Second)
	})
	s.rate = 5
	slowFrom, slowTo := s.start.Add(12*time.Second), s.start.Add(42*time.Second)
	s.healthy = func(int, time.Time) bool { return true }
	// Every call of the slow phase takes 300ms, 1.5 × slowCallDuration.
	s.slow = func(_ int, at time.Time) bool { return !at.Before(slowFrom) && at.Before(slowTo) }
	s.runUntil(12 * time.Second)
	probesBefore := s.probeCalls
	s.runUntil(42 * time.Second)
	slowProbes := s.probeCalls - probesBefore
	s.runUntil(60 * time.Second)

	var opens, slowReopens, closes int
	var closedAt time.Time
	for _, r := range s.proposals {
		switch {
		case r.State == Closed:
			closes++
			if r.Since.Before(slowTo) {
				t.Errorf("closed at %v, in the slow phase (%v–%v): %s", r.Since.Sub(s.start), slowFrom.Sub(s.start), slowTo.Sub(s.start), r.Reason)
			}
			closedAt = r.Since
		case r.OpenCount == 1:
			opens++
		case strings.HasPrefix(r.Reason, "probe slow"):
			slowReopens++
		}
	}
	t.Logf("slow phase: %d trip(s), %d probes, %d reopened by a slow probe; closed %v after the slow phase", opens, slowProbes, slowReopens, closedAt.Sub(slowTo))
	if opens == 0 {
		t.Fatal("the breaker never opened on the slow calls")
	}
	if slowProbes == 0 || slowReopens == 0 {
		t.Errorf("%d probes and %d slow-probe reopens in the slow phase: half-open was not exercised", slowProbes, slowReopens)
	}
	if closes == 0 || closedAt.Before(slowTo) {
		t.Errorf("did not close after the slow phase (%d closes)", closes)
	}
	if st := s.states(); st[Closed] != len(s.nodes) {
		t.Errorf("states at the end: %v, want all closed", st)
	}
}
