package sharedstate

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// halfOpenEngine returns a lone engine under policy mutate whose breaker
// (the fleet's, or for scope node its own) tripped at t0 and is half-open
// now, with a probe admitted.
func halfOpenEngine(t *testing.T, mutate func(p *Policy)) (*Engine, *ManualClock) {
	t.Helper()
	clock := NewManualClock(t0)
	pol := policyWith(mutate)
	e := newTestEngine(t, "a", "", clock, func(c *EngineConfig) { c.DefaultPolicy = pol })
	record(t, e, dep, FirstAttempt, Failure, 20)
	e.Tick()
	if s := e.Snapshot(dep); s.State == Closed && s.LocalState == Closed {
		t.Fatalf("did not open: %+v", s)
	}
	clock.Advance(pol.Breaker.OpenDuration.Std())
	e.Tick()
	if d := e.AcquireProbe(dep); d != allowProbe {
		t.Fatalf("AcquireProbe = %v, want allow-as-probe", d)
	}
	return e, clock
}

// TestProbeOutcomeJudgesByTheClosedRules: half-open judges a probe as the
// closed breaker judges a call. A slow success fails the probe when slow
// calls can trip the breaker (slowCallRateThreshold < 1, or the classic
// rule), for the fleet's breaker and for a node's own breaker alike.
func TestProbeOutcomeJudgesByTheClosedRules(t *testing.T) {
	slowRule := func(p *Policy) { p.Breaker.SlowCallRateThreshold = 0.8 }
	noSlowRule := func(p *Policy) {} // threshold 1 with a confidence bound: slow calls never trip
	classic := func(p *Policy) { p.Breaker.Confidence = 0 }
	for _, tc := range []struct {
		name    string
		policy  func(p *Policy)
		outcome Outcome
		fails   bool
		why     string
	}{
		{"success", slowRule, Success, false, ""},
		{"failure", noSlowRule, Failure, true, "probe failed"},
		{"slow failure", noSlowRule, SlowFailure, true, "probe failed"},
		{"slow success, slow-call threshold 0.8", slowRule, Slow, true, "probe slow (at least slowCallDuration 2s, slow-call rate threshold 0.80)"},
		{"slow success, slow-call threshold 1 with a confidence bound", noSlowRule, Slow, false, ""},
		{"slow success, slow-call threshold 1, classic rule", classic, Slow, true, "probe slow"},
	} {
		for _, scope := range []Scope{ScopeFleet, ScopeNode} {
			t.Run(fmt.Sprintf("%s, scope %s", tc.name, scope), func(t *testing.T) {
				e, _ := halfOpenEngine(t, func(p *Policy) {
					tc.policy(p)
					p.Breaker.Scope = scope
				})
				rec, proposed := e.ProbeOutcome(dep, tc.outcome)
				s := e.Snapshot(dep)
				state := s.State
				if scope != ScopeNode {
					if proposed != tc.fails {
						t.Fatalf("ProbeOutcome(%v) proposed %v (%+v), want %v", tc.outcome, proposed, rec, tc.fails)
					}
					if tc.fails && (rec.State != Open || rec.OpenCount != 2 || !strings.HasPrefix(rec.Reason, tc.why)) {
						t.Fatalf("reopen %+v, want open, openCount 2, reason %q", rec, tc.why)
					}
				} else if proposed {
					t.Fatalf("a node's own breaker proposed a record: %+v", rec)
				}
				want := HalfOpen // a success counts; the breaker needs two more
				if tc.fails {
					want = Open
				}
				if state != want {
					t.Fatalf("after a %v probe: state %v, want %v (%+v)", tc.outcome, state, want, s)
				}
			})
		}
	}
	t.Run("a slow probe never counts towards the close", func(t *testing.T) {
		e, clock := halfOpenEngine(t, slowRule)
		for i := range 2 {
			if _, ok := e.ProbeOutcome(dep, Success); ok {
				t.Fatalf("success %d closed the breaker", i+1)
			}
			if d := e.AcquireProbe(dep); d != allowProbe {
				t.Fatalf("probe %d: %v", i+2, d)
			}
		}
		rec, ok := e.ProbeOutcome(dep, Slow) // would have been the third success
		if !ok || rec.State != Open {
			t.Fatalf("third probe slow: %v %+v, want a reopen", ok, rec)
		}
		clock.Advance(5 * time.Second)
		e.Tick()
		if d := e.AcquireProbe(dep); d != allowProbe {
			t.Fatal(d)
		}
		if _, ok := e.ProbeOutcome(dep, Rejected); ok {
			t.Fatal("Rejected is not a probe's outcome and must be ignored")
		}
		if _, ok := e.ProbeResult(dep, true); ok {
			t.Fatal("the probe after the reopen closed at once: the successes before it counted")
		}
	})
}

// TestProbeTurnsAreStaggered: the holder ranked k probes only k ×
// probeStagger into the round ((probeTimeout − perAttemptTimeout) /
// halfOpenProbes, 1.5s by default), so a first holder's failed probe reopens
// the breaker before the second one sends its own.
func TestProbeTurnsAreStaggered(t *testing.T) {
	clock := NewManualClock(t0)
	names := []string{"a", "b", "c", "d"}
	var es []*Engine
	for _, n := range names {
		es = append(es, newTestEngine(t, n, "", clock, nil))
	}
	share := func() { gossipAll(es) }
	for _, e := range es {
		record(t, e, dep, FirstAttempt, Failure, 10)
	}
	share()
	var rec BreakerRecord
	for _, e := range es {
		if props := e.Tick(); len(props) > 0 {
			rec = props[0]
		}
	}
	for _, e := range es {
		e.ApplyRecord(rec)
	}
	if rec.State != Open {
		t.Fatalf("no trip: %+v", rec)
	}
	clock.Set(rec.HalfOpenAt(DefaultPolicy().Breaker))
	for _, e := range es {
		record(t, e, dep, FirstAttempt, Rejected, 1) // callers keep calling
	}
	share()
	holders := ProbeHolders(dep, rec.Generation, 0, names, 3)
	byName := map[string]*Engine{}
	for _, e := range es {
		byName[e.Node()] = e
		e.Tick()
	}
	def := DefaultPolicy()
	stagger := def.probeStagger()
	if stagger != 1500*time.Millisecond {
		t.Fatalf("probeStagger %v, want 1.5s", stagger)
	}
	for k, h := range holders {
		e := byName[h]
		if s := e.Snapshot(dep); s.ProbePermit != (k == 0) {
			t.Errorf("holder %s (rank %d) at the round's start: ProbePermit %v", h, k, s.ProbePermit)
		}
		if d := e.AcquireProbe(dep); (d == allowProbe) != (k == 0) {
			t.Errorf("holder %s (rank %d) at the round's start: AcquireProbe %v", h, k, d)
		}
	}
	clock.Advance(stagger)
	for _, e := range es {
		e.Tick()
	}
	second := byName[holders[1]]
	if s := second.Snapshot(dep); !s.ProbePermit {
		t.Fatalf("the second holder's turn came, and it holds no permit: %+v", s)
	}
	// The first holder's probe failed just before: the reopen reaches the
	// second holder, which then sends nothing.
	reopen, ok := byName[holders[0]].ProbeResult(dep, false)
	if !ok {
		t.Fatal("the failed probe proposed nothing")
	}
	second.ApplyRecord(reopen)
	if d := second.AcquireProbe(dep); d != reject(ReasonOpen) {
		t.Fatalf("second holder after the reopen: %v, want reject(open)", d)
	}
	if byName[holders[3-1]].Snapshot(dep).ProbePermit {
		t.Error("the third holder's turn came a probeStagger early")
	}
}

// TestRampAfterClose: after probes close the breaker, first attempts are
// admitted with a probability rising linearly from rampStart to 1 over
// rampDuration, published in the snapshot as a throttle probability.
func TestRampAfterClose(t *testing.T) {
	for _, scope := range []Scope{ScopeFleet, ScopeNode} {
		t.Run("scope "+string(scope), func(t *testing.T) {
			e, clock := halfOpenEngine(t, func(p *Policy) {
				p.Breaker.Scope = scope
				p.Breaker.RampDuration = Duration(2 * time.Second)
				p.Breaker.RampStart = 0.2
				p.Breaker.ProbeSuccessThreshold = 1
			})
			if _, ok := e.ProbeResult(dep, true); ok != (scope != ScopeNode) {
				t.Fatalf("close proposal: %v", ok)
			}
			closedAt := clock.Now()
			for _, tc := range []struct {
				after time.Duration
				want  float64 // refused
			}{{0, 0.8}, {500 * time.Millisecond, 0.6}, {time.Second, 0.4}, {1500 * time.Millisecond, 0.2}, {1990 * time.Millisecond, 0.005}, {2 * time.Second, 0}} {
				clock.Set(closedAt.Add(tc.after))
				e.Tick()
				s := e.Snapshot(dep)
				if s.State != Closed || math.Abs(s.ThrottleProbability-tc.want) > 1e-9 || s.RampProbability != s.ThrottleProbability {
					t.Fatalf("%v after the close: state %v, refusing %v (ramp %v), want closed refusing %v, all of it the ramp's",
						tc.after, s.State, s.ThrottleProbability, s.RampProbability, tc.want)
				}
				if tc.want > 0 {
					if d := s.DecideFirstAt(tc.want - 0.001); d != reject(ReasonRamp) {
						t.Errorf("%v after the close: DecideFirstAt just below the share = %v, want reject(ramp)", tc.after, d)
					}
					if d := s.DecideFirstAt(tc.want + 0.001); d != allow {
						t.Errorf("%v after the close: DecideFirstAt just above the share = %v, want allow", tc.after, d)
					}
				}
			}
		})
	}
	t.Run("the ramp's refusals are named apart from the throttle's", func(t *testing.T) {
		p := DefaultPolicy()
		s := Snapshot{Dependency: dep, Policy: &p, ThrottleProbability: 0.6, RampProbability: 0.25}
		for _, tc := range []struct {
			u    float64
			want Decision
		}{{0, reject(ReasonRamp)}, {0.249, reject(ReasonRamp)}, {0.25, reject(ReasonThrottled)}, {0.599, reject(ReasonThrottled)}, {0.6, allow}} {
			if d := s.DecideFirstAt(tc.u); d != tc.want {
				t.Errorf("throttle 0.6, ramp 0.25, draw %v: %v, want %v", tc.u, d, tc.want)
			}
		}
		p.Breaker.Mode = ModeShadow
		if d := s.DecideFirstAt(0.1); d != (Decision{Verdict: Allow, Reason: ReasonRamp}) {
			t.Errorf("shadow mode: %v, want allow with reason ramp", d)
		}
		if ReasonRamp.String() != "ramp" || ReasonRamp.LabelValue() != "ramp" {
			t.Errorf("ReasonRamp reads %q, label %q", ReasonRamp.String(), ReasonRamp.LabelValue())
		}
	})
	t.Run("rampDuration 0: full traffic at once", func(t *testing.T) {
		e, _ := halfOpenEngine(t, func(p *Policy) { p.Breaker.RampDuration, p.Breaker.ProbeSuccessThreshold = 0, 1 })
		e.ProbeResult(dep, true)
		if s := e.Snapshot(dep); s.State != Closed || s.ThrottleProbability != 0 {
			t.Fatalf("snapshot %+v, want closed refusing nothing", s)
		}
	})
	t.Run("a node ramps from when it learns the close, unless it learns it late", func(t *testing.T) {
		a, clock := halfOpenEngine(t, func(p *Policy) { p.Breaker.ProbeSuccessThreshold = 1 })
		closed, ok := a.ProbeResult(dep, true)
		if !ok {
			t.Fatal("no close proposal")
		}
		// b's clock is 30s behind a's: the close is in its future, and it
		// ramps from when the record arrives.
		b := newTestEngine(t, "b", "", NewManualClock(clock.Now().Add(-30*time.Second)), nil)
		record(t, b, dep, FirstAttempt, Success, 1)
		b.ApplyRecord(closed)
		if s := b.Snapshot(dep); s.State != Closed || s.ThrottleProbability != 0.9 {
			t.Fatalf("b on learning the close: %+v, want closed refusing 0.9", s)
		}
		// c learns it a minute late (a restart, push-pull): no ramp.
		c := newTestEngine(t, "c", "", NewManualClock(clock.Now().Add(time.Minute)), nil)
		record(t, c, dep, FirstAttempt, Success, 1)
		c.ApplyRecord(closed)
		if s := c.Snapshot(dep); s.State != Closed || s.ThrottleProbability != 0 {
			t.Fatalf("c learning an old close: %+v, want closed refusing nothing", s)
		}
	})
	t.Run("no ramp before the first close", func(t *testing.T) {
		e := newTestEngine(t, "a", "", NewManualClock(t0), nil)
		record(t, e, dep, FirstAttempt, Success, 5)
		e.Tick()
		if s := e.Snapshot(dep); s.ThrottleProbability != 0 {
			t.Fatalf("a breaker that never opened refuses %v", s.ThrottleProbability)
		}
	})
}

func TestFleetOpenDurationAndRamp(t *testing.T) {
	b := DefaultPolicy().Breaker // open 2s, max 2m, fleet max 2s, ramp 500ms
	for _, tc := range []struct {
		name      string
		mutate    func(b *BreakerPolicy)
		openCount uint32
		want      time.Duration
	}{
		{"default: no doubling", nil, 4, 2 * time.Second},
		{"cap above openDuration", func(b *BreakerPolicy) { b.FleetMaxOpenDuration = Duration(30 * time.Second) }, 3, 8 * time.Second},
		{"cap reached", func(b *BreakerPolicy) { b.FleetMaxOpenDuration = Duration(30 * time.Second) }, 5, 30 * time.Second},
		{"maxOpenDuration still caps", func(b *BreakerPolicy) {
			b.FleetMaxOpenDuration, b.MaxOpenDuration = Duration(time.Hour), Duration(time.Minute)
		}, 10, time.Minute},
		{"never below openDuration", func(b *BreakerPolicy) {
			b.OpenDuration, b.FleetMaxOpenDuration = Duration(8*time.Second), Duration(2*time.Second)
		}, 1, 8 * time.Second},
		{"short openDuration doubles up to the cap", func(b *BreakerPolicy) {
			b.OpenDuration, b.FleetMaxOpenDuration = Duration(time.Second), Duration(3*time.Second)
		}, 2, 2 * time.Second},
		{"zero cap: none", func(b *BreakerPolicy) { b.FleetMaxOpenDuration = 0 }, 5, 32 * time.Second},
	} {
		bb := b
		if tc.mutate != nil {
			tc.mutate(&bb)
		}
		if got := bb.FleetOpenDurationFor(tc.openCount); got != tc.want {
			t.Errorf("%s: FleetOpenDurationFor(%d) = %v, want %v", tc.name, tc.openCount, got, tc.want)
		}
	}
	if got := b.OpenDurationFor(3); got != 8*time.Second {
		t.Errorf("a node's own breaker: OpenDurationFor(3) = %v, want 8s (the doubling)", got)
	}
	for _, tc := range []struct {
		elapsed time.Duration
		want    float64
	}{{-time.Millisecond, 0}, {0, 0.9}, {250 * time.Millisecond, 0.45}, {500 * time.Millisecond, 0}, {time.Hour, 0}} {
		if got := b.RampRefusal(tc.elapsed); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("RampRefusal(%v) = %v, want %v", tc.elapsed, got, tc.want)
		}
	}
}
