package replay_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/coordinator/internal/history"
	"github.com/fusebox-dev/fusebox/coordinator/internal/history/historytest"
	"github.com/fusebox-dev/fusebox/coordinator/internal/replay"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

const dep = "shipping-api"

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// incidentPolicy opens after a second and doubles up to 4 s, so that a
// 5 s death is an open, two failed probes and a close.
func incidentPolicy() sharedstate.Policy {
	p := sharedstate.DefaultPolicy()
	p.Dependency = dep
	p.Breaker.OpenDuration = sharedstate.Duration(time.Second)
	p.Breaker.MaxOpenDuration = sharedstate.Duration(4 * time.Second)
	return p
}

// run simulates the fleet (3 nodes at rate calls/s each, dead from 12 s
// to 17 s) into a history and returns it with the fleet's records.
func run(t *testing.T, seed uint64, rate float64) (*history.History, *historytest.Fleet) {
	t.Helper()
	h := history.New(history.Config{})
	f := historytest.Run(t, h, historytest.Config{Dependency: dep, Nodes: 3, Seed: seed, Policy: incidentPolicy(),
		Rate:  func(int) float64 { return rate },
		Fails: func(_ int, el time.Duration) bool { return el >= 12*time.Second && el < 17*time.Second },
		Start: t0, Begin: 0, Retries: true}, 30*time.Second)
	return h, f
}

func input(t *testing.T, h *history.History, pol sharedstate.Policy) replay.Input {
	t.Helper()
	from, to := t0, t0.Add(30*time.Second)
	segs, err := h.Range(dep, from, to)
	if err != nil {
		t.Fatal(err)
	}
	cur := incidentPolicy()
	return replay.Input{Dependency: dep, Policy: pol, Fleet: &cur, Segments: segs, Records: h.Records(dep, from, to), From: from, To: to}
}

func describe(ts []replay.Transition) string {
	var b strings.Builder
	for _, t := range ts {
		fmt.Fprintf(&b, "%v %s (gen %d, %d opens)  ", t.At.Sub(t0).Round(time.Millisecond), t.State, t.Generation, t.OpenCount)
	}
	return b.String()
}

// TestReplayMatchesTheFleet: the fleet's own policy, replayed on the history
// the simulated fleet left, opens, reopens and closes as the fleet did: the
// same sequence of records, each within 500 ms (the history dates counts
// at the reading of the row that carried them, and a row superseded before
// its gossip round went out hands them to the next, up to 300 ms later;
// the replay steps in 100 ms slots).
func TestReplayMatchesTheFleet(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			h, fleet := run(t, seed, 50)
			res, err := replay.Run(input(t, h, incidentPolicy()))
			if err != nil {
				t.Fatal(err)
			}
			var real []replay.Transition
			for _, r := range fleet.Records {
				real = append(real, replay.Transition{At: r.Since, State: r.State, Generation: r.Generation, OpenCount: r.OpenCount})
			}
			t.Logf("fleet:  %s", describe(real))
			t.Logf("replay: %s", describe(res.Transitions))
			if len(real) < 3 {
				t.Fatalf("the fleet took %d records: the scenario needs an open, a failed probe and a close", len(real))
			}
			if len(res.Transitions) != len(real) {
				t.Fatalf("the replay took %d records, the fleet %d", len(res.Transitions), len(real))
			}
			for i := range real {
				a, b := real[i], res.Transitions[i]
				if a.State != b.State || a.OpenCount != b.OpenCount {
					t.Errorf("record %d: fleet %s (%d opens), replay %s (%d opens)", i, a.State, a.OpenCount, b.State, b.OpenCount)
				}
				if d := b.At.Sub(a.At); d < -500*time.Millisecond || d > 500*time.Millisecond {
					t.Errorf("record %d (%s): the replay is %v off the fleet", i, a.State, d)
				}
			}
			if res.Totals.Opens != 3 || res.Totals.Refused == 0 || res.Totals.FailedLetThrough == 0 {
				t.Errorf("totals %+v: want 3 opens, refusals and failures", res.Totals)
			}
		})
	}
}

// TestReplayOfAnotherPolicy: a threshold the dead dependency's failure rate
// still meets opens too; one it cannot meet (minimumRequests larger than a
// window holds) never opens, refuses nothing and lets every failure through;
// shadow mode refuses nothing but counts what it would have.
func TestReplayOfAnotherPolicy(t *testing.T) {
	h, _ := run(t, 1, 50)
	cur := incidentPolicy()
	base, err := replay.Run(input(t, h, cur))
	if err != nil {
		t.Fatal(err)
	}

	never := incidentPolicy()
	never.Breaker.MinimumRequests = 100_000
	res, err := replay.Run(input(t, h, never))
	if err != nil {
		t.Fatal(err)
	}
	if res.Totals.Opens != 0 || res.Totals.Refused != 0 || res.Totals.FailedLetThrough <= base.Totals.FailedLetThrough {
		t.Errorf("minimumRequests 100000: %+v; want no open, no refusal, more failures than the current policy's %d",
			res.Totals, base.Totals.FailedLetThrough)
	}
	// 5 s dead at 3 × 50 calls/s: about 750 failed first attempts.
	if res.Totals.FailedLetThrough < 600 {
		t.Errorf("minimumRequests 100000 let %d failures through, want the whole death's", res.Totals.FailedLetThrough)
	}

	shadow := incidentPolicy()
	shadow.Breaker.Mode = sharedstate.ModeShadow
	res, err = replay.Run(input(t, h, shadow))
	if err != nil {
		t.Fatal(err)
	}
	if res.Totals.Refused != 0 || res.Totals.ShadowRefused == 0 || res.Totals.Opens == 0 {
		t.Errorf("shadow mode: %+v; want opens, nothing refused, would-be refusals counted", res.Totals)
	}

	// The comparison has one incident, with the fleet, the current policy
	// and the one that never opens side by side.
	real := replay.Reality(h.Records(dep, t0, t0.Add(30*time.Second)), cur.Breaker, t0, t0.Add(30*time.Second))
	fleetTs := replay.FleetTransitions(h.Records(dep, t0, t0.Add(30*time.Second)))
	nev, _ := replay.Run(input(t, h, never))
	cmp := replay.Compare(cur, real, fleetTs, base, nev, cur, never)
	if len(cmp.Incidents) != 1 {
		t.Fatalf("%d incidents, want 1: %+v", len(cmp.Incidents), cmp.Incidents)
	}
	inc := cmp.Incidents[0]
	if inc.Current.Opened.IsZero() || inc.Current.Closed.IsZero() || !inc.Proposed.Opened.IsZero() || inc.Fleet.Opened.IsZero() ||
		inc.Fleet.Opens != 3 || inc.Current.Opens != 3 {
		t.Errorf("incident %+v: want the fleet and the current policy open and closed, the proposed one never open", inc)
	}
	if !inc.Current.HasSecondsToOpen || inc.Current.SecondsToOpen > 1 {
		t.Errorf("current policy: %v s from over the threshold to open, want under a second", inc.Current.SecondsToOpen)
	}
	if d := inc.Current.OverThreshold.Sub(t0.Add(12 * time.Second)); d < -200*time.Millisecond || d > 600*time.Millisecond {
		t.Errorf("over the threshold at %v, the dependency died at 12s", inc.Current.OverThreshold.Sub(t0))
	}
}

// TestReplayIsDeterministic: the same input gives the same answer.
func TestReplayIsDeterministic(t *testing.T) {
	h, _ := run(t, 2, 30)
	a, err := replay.Run(input(t, h, incidentPolicy()))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := replay.Run(input(t, h, incidentPolicy()))
	if fmt.Sprint(a.Transitions, a.Totals) != fmt.Sprint(b.Transitions, b.Totals) {
		t.Fatalf("two replays differ:\n%v %+v\n%v %+v", a.Transitions, a.Totals, b.Transitions, b.Totals)
	}
}

// BenchmarkReplay is an hour of 1 s slots of a busy dependency (3 nodes,
// 1,000 calls a second, a failure every tenth call).
func BenchmarkReplay(b *testing.B) {
	slots := make([]history.Slot, 3600)
	for i := range slots {
		slots[i] = history.Slot{FirstAttempts: 1000, Successes: 900, Failures: 100, ActiveNodes: 7, FailingNodes: 7}
	}
	in := replay.Input{Dependency: dep, Policy: incidentPolicy(), From: t0, To: t0.Add(time.Hour),
		Segments: []history.Segment{{From: t0, Step: time.Second, Slots: slots}}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := replay.Run(in); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReplayMostlyIdle is an hour of 1 s slots then 15 minutes of
// 100 ms ones, with traffic in the last minute only: quiet stretches cost
// no ticks.
func BenchmarkReplayMostlyIdle(b *testing.B) {
	coarse := make([]history.Slot, 2700)
	fine := make([]history.Slot, 9000)
	for i := len(fine) - 600; i < len(fine); i++ {
		fine[i] = history.Slot{FirstAttempts: 10, Successes: 9, Failures: 1, ActiveNodes: 3, FailingNodes: 1}
	}
	fineFrom := t0.Add(45 * time.Minute)
	in := replay.Input{Dependency: dep, Policy: incidentPolicy(), From: t0, To: t0.Add(time.Hour),
		Segments: []history.Segment{{From: t0, Step: time.Second, Slots: coarse}, {From: fineFrom, Step: 100 * time.Millisecond, Slots: fine}}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := replay.Run(in); err != nil {
			b.Fatal(err)
		}
	}
}

// TestReplayCannotCloseWhereTheFleetStayedOpen is coordinator/README.md's
// what-if walkthrough: the fleet's policy trips on slow calls (80% of calls
// at least slowCallDuration), the dependency fails from 12 s to 17 s, then
// answers slowly until 22 s. The fleet's breaker opens on the failures and
// stays open through the slow stretch, its slow probes failing. A proposed
// policy that no longer trips on slow calls (slowCallRateThreshold 1) would
// have taken a slow probe as a success, but the replay knows the slow
// stretch only from the fleet's probes, and counts them as the reopens they
// caused: the proposed policy, too, reopens on "probe failed" until the
// dependency is fast again, and closes only then.
func TestReplayCannotCloseWhereTheFleetStayedOpen(t *testing.T) {
	fleetPol := incidentPolicy()
	fleetPol.Breaker.SlowCallRateThreshold = 0.8
	fleetPol.Breaker.SlowCallDuration = sharedstate.Duration(200 * time.Millisecond)
	h := history.New(history.Config{})
	f := historytest.Run(t, h, historytest.Config{Dependency: dep, Nodes: 3, Seed: 4, Policy: fleetPol,
		Rate:  func(int) float64 { return 50 },
		Fails: func(_ int, el time.Duration) bool { return el >= 12*time.Second && el < 17*time.Second },
		Slow:  func(_ int, el time.Duration) bool { return el >= 17*time.Second && el < 22*time.Second },
		Start: t0, Retries: true}, 30*time.Second)
	slowReopens := 0
	for _, r := range f.Records {
		if strings.HasPrefix(r.Reason, "probe slow") {
			slowReopens++
		}
	}
	if slowReopens == 0 {
		t.Fatalf("the fleet never reopened on a slow probe: the scenario needs its breaker open through the slow stretch")
	}

	proposed := fleetPol
	proposed.Breaker.FailureRateThreshold = 0.9
	proposed.Breaker.SlowCallRateThreshold = 1
	in := input(t, h, proposed)
	in.Fleet = &fleetPol
	res, err := replay.Run(in)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("proposed: %s", describe(res.Transitions))
	var opened, closed time.Duration
	for _, tr := range res.Transitions {
		el := tr.At.Sub(t0)
		switch {
		case tr.State == sharedstate.Open && opened == 0:
			opened = el
		case tr.State == sharedstate.Closed && opened > 0 && closed == 0:
			closed = el
		}
		if strings.HasPrefix(tr.Reason, "probe slow") {
			t.Errorf("at %v the proposed policy reopened on %q: it does not trip on slow calls", el, tr.Reason)
		}
	}
	if opened < 12*time.Second || opened > 17*time.Second {
		t.Errorf("the proposed policy opened at %v, want during the failures (12s to 17s)", opened)
	}
	if closed < 22*time.Second {
		t.Errorf("the proposed policy closed at %v, before the slow stretch ended at 22s: the replay no longer counts the fleet's open stretch as failed (update coordinator/README.md's walkthrough)", closed)
	}
}
