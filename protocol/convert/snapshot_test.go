package convert

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

const dep = "shipping-api"

// tb is what the helpers need from *testing.T and *rapid.T.
type tb interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// throughTheWire converts s to its message with its policy in policy_json,
// as the agent pushes it, marshals and unmarshals it, and converts it back,
// reading the policy with sharedstate.ParsePolicy.
func throughTheWire(t tb, s *sharedstate.Snapshot) *sharedstate.Snapshot {
	t.Helper()
	m := SnapshotToProto(s)
	if s.Policy != nil {
		m.PolicyJson, _ = json.Marshal(s.Policy)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	var back fuseboxv1.DecisionSnapshot
	if err := proto.Unmarshal(b, &back); err != nil {
		t.Fatalf("unmarshal: %v", err)
	}
	got := SnapshotFromProto(&back)
	if got.Policy != nil {
		t.Fatalf("SnapshotFromProto set the policy: the receiver does")
	}
	if raw := back.GetPolicyJson(); raw != nil {
		p, err := sharedstate.ParsePolicy(raw)
		if err != nil {
			t.Fatalf("policy_json %s: %v", raw, err)
		}
		got.Policy = &p
	}
	return got
}

// comparable returns s with its times in UTC without a monotonic reading
// and its policy apart, so that == compares instants and policies.
func comparable(s sharedstate.Snapshot) (sharedstate.Snapshot, sharedstate.Policy) {
	s.Since = s.Since.Round(0).UTC()
	s.OverrideExpires = s.OverrideExpires.Round(0).UTC()
	var p sharedstate.Policy
	if s.Policy != nil {
		p = *s.Policy
	}
	s.Policy = nil
	return s, p
}

func checkRoundTrip(t tb, s *sharedstate.Snapshot) {
	t.Helper()
	got := throughTheWire(t, s)
	if got.DecideFirst() != s.DecideFirst() {
		t.Errorf("DecideFirst after the round trip = %v, want %v (snapshot %+v)", got.DecideFirst(), s.DecideFirst(), *s)
	}
	gs, gp := comparable(*got)
	ws, wp := comparable(*s)
	if gs != ws || gp != wp {
		t.Errorf("round trip changed the snapshot:\n got %+v %+v\nwant %+v %+v", gs, gp, ws, wp)
	}
}

// policyWith returns the default policy of dep changed by mutate.
func policyWith(mutate func(*sharedstate.Policy)) *sharedstate.Policy {
	p := sharedstate.DefaultPolicy()
	p.Dependency = dep
	mutate(&p)
	return &p
}

// engineWith builds an engine on clock with the default policy changed by
// mutate.
func engineWith(t *testing.T, node, zone string, clock sharedstate.Clock, mutate func(*sharedstate.Policy)) *sharedstate.Engine {
	t.Helper()
	p := sharedstate.DefaultPolicy()
	if mutate != nil {
		mutate(&p)
	}
	e, err := sharedstate.NewEngine(sharedstate.EngineConfig{Node: node, Zone: zone, Clock: clock, DefaultPolicy: &p})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func fail(t *testing.T, e *sharedstate.Engine, n uint64) {
	t.Helper()
	if err := e.AddCounts(dep, sharedstate.Counts{FirstAttempts: n, Failures: n}); err != nil {
		t.Fatal(err)
	}
}

// open trips e's breaker (default thresholds: 20 requests) and returns the
// record it proposed.
func open(t *testing.T, e *sharedstate.Engine) sharedstate.BreakerRecord {
	t.Helper()
	fail(t, e, 20)
	props := e.Tick()
	if len(props) != 1 || props[0].State != sharedstate.Open {
		t.Fatalf("breaker did not open: %+v", props)
	}
	return props[0]
}

func setOverride(t *testing.T, e *sharedstate.Engine, state sharedstate.OverrideState, expires time.Time) {
	t.Helper()
	if err := e.SetOverride(dep, &sharedstate.Override{State: state, Reason: "ops: " + state.String(),
		Actor: "alice", Created: t0, Expires: expires}); err != nil {
		t.Fatal(err)
	}
}

// Every state an engine can publish, produced by a real engine on a manual
// clock, decides the same and keeps every field after the round trip.
func TestSnapshotRoundTripOfReachableStates(t *testing.T) {
	allow := sharedstate.Decision{Verdict: sharedstate.Allow}
	probe := sharedstate.Decision{Verdict: sharedstate.AllowProbe}
	reject := func(r sharedstate.Reason) sharedstate.Decision {
		return sharedstate.Decision{Verdict: sharedstate.Reject, Reason: r}
	}
	shadow := func(r sharedstate.Reason) sharedstate.Decision {
		return sharedstate.Decision{Verdict: sharedstate.Allow, Reason: r}
	}
	for _, tc := range []struct {
		name string
		make func(t *testing.T) *sharedstate.Snapshot
		want sharedstate.Decision
	}{
		{"closed", func(t *testing.T) *sharedstate.Snapshot {
			e := engineWith(t, "a", "", sharedstate.NewManualClock(t0), nil)
			fail(t, e, 3)
			e.Tick()
			return e.Snapshot(dep)
		}, allow},
		{"open", func(t *testing.T) *sharedstate.Snapshot {
			e := engineWith(t, "a", "", sharedstate.NewManualClock(t0), nil)
			open(t, e)
			return e.Snapshot(dep)
		}, reject(sharedstate.ReasonOpen)},
		{"half-open with a permit", func(t *testing.T) *sharedstate.Snapshot {
			clock := sharedstate.NewManualClock(t0)
			e := engineWith(t, "a", "", clock, nil)
			open(t, e)
			clock.Advance(5 * time.Second)
			e.Tick()
			return e.Snapshot(dep)
		}, probe},
		{"half-open without a permit", func(t *testing.T) *sharedstate.Snapshot {
			// b learns a's open record and has no traffic of its own: no permit.
			clock := sharedstate.NewManualClock(t0)
			a := engineWith(t, "a", "", clock, nil)
			b := engineWith(t, "b", "", clock, nil)
			b.ApplyRecord(open(t, a))
			clock.Advance(5 * time.Second)
			b.Tick()
			return b.Snapshot(dep)
		}, reject(sharedstate.ReasonHalfOpenNoPermit)},
		{"half-open, opened twice, in probe round 1", func(t *testing.T) *sharedstate.Snapshot {
			clock := sharedstate.NewManualClock(t0)
			e := engineWith(t, "a", "", clock, nil)
			open(t, e)
			clock.Advance(5 * time.Second)
			if d := e.AcquireProbe(dep); d.Verdict != sharedstate.AllowProbe {
				t.Fatalf("AcquireProbe: %v", d)
			}
			if _, ok := e.ProbeResult(dep, false); !ok {
				t.Fatal("a failed probe did not reopen")
			}
			clock.Advance(5*time.Second + 5*time.Second) // openDuration (the fleet's does not double by default), then one probeTimeout
			fail(t, e, 1)                                // own traffic: this node ranks for a permit
			e.Tick()
			s := e.Snapshot(dep)
			if s.OpenCount != 2 || s.ProbeRound != 1 || s.Generation != 2 {
				t.Fatalf("snapshot %+v, want open count 2, probe round 1, generation 2", *s)
			}
			return s
		}, probe},
		{"node-local open", func(t *testing.T) *sharedstate.Snapshot {
			clock := sharedstate.NewManualClock(t0)
			a := engineWith(t, "a", "", clock, nil)
			a.ApplyRow(sharedstate.NodeWindow{Node: "b", Dependency: dep, Seq: 1,
				Counts: sharedstate.Counts{FirstAttempts: 40, Successes: 40}})
			fail(t, a, 20)
			if props := a.Tick(); len(props) != 0 {
				t.Fatalf("one sick node opened the fleet breaker: %+v", props)
			}
			return a.Snapshot(dep)
		}, reject(sharedstate.ReasonOpen)},
		{"node-local half-open", func(t *testing.T) *sharedstate.Snapshot {
			clock := sharedstate.NewManualClock(t0)
			a := engineWith(t, "a", "", clock, nil)
			a.ApplyRow(sharedstate.NodeWindow{Node: "b", Dependency: dep, Seq: 1,
				Counts: sharedstate.Counts{FirstAttempts: 40, Successes: 40}})
			fail(t, a, 20)
			a.Tick()
			clock.Advance(5 * time.Second)
			a.Tick()
			return a.Snapshot(dep)
		}, probe},
		{"forced open until a time", func(t *testing.T) *sharedstate.Snapshot {
			e := engineWith(t, "a", "", sharedstate.NewManualClock(t0), nil)
			setOverride(t, e, sharedstate.ForcedOpen, t0.Add(time.Hour+123*time.Nanosecond))
			s := e.Snapshot(dep)
			if s.OverrideExpires.IsZero() || s.OverrideReason == "" {
				t.Fatalf("snapshot %+v, want the override's reason and expiry", *s)
			}
			return s
		}, reject(sharedstate.ReasonForcedOpen)},
		{"forced closed over an open breaker", func(t *testing.T) *sharedstate.Snapshot {
			e := engineWith(t, "a", "", sharedstate.NewManualClock(t0), nil)
			open(t, e)
			setOverride(t, e, sharedstate.ForcedClosed, time.Time{})
			return e.Snapshot(dep)
		}, allow},
		{"shadow, open", func(t *testing.T) *sharedstate.Snapshot {
			e := engineWith(t, "a", "", sharedstate.NewManualClock(t0), func(p *sharedstate.Policy) {
				p.Breaker.Mode = sharedstate.ModeShadow
			})
			open(t, e)
			return e.Snapshot(dep)
		}, shadow(sharedstate.ReasonOpen)},
		{"shadow, half-open without a permit", func(t *testing.T) *sharedstate.Snapshot {
			clock := sharedstate.NewManualClock(t0)
			shadowMode := func(p *sharedstate.Policy) { p.Breaker.Mode = sharedstate.ModeShadow }
			a := engineWith(t, "a", "", clock, shadowMode)
			b := engineWith(t, "b", "", clock, shadowMode)
			b.ApplyRecord(open(t, a))
			clock.Advance(5 * time.Second)
			b.Tick()
			return b.Snapshot(dep)
		}, shadow(sharedstate.ReasonHalfOpenNoPermit)},
		{"scope node, open", func(t *testing.T) *sharedstate.Snapshot {
			e := engineWith(t, "a", "", sharedstate.NewManualClock(t0), func(p *sharedstate.Policy) {
				p.Breaker.Scope = sharedstate.ScopeNode
			})
			fail(t, e, 20)
			e.Tick()
			return e.Snapshot(dep)
		}, reject(sharedstate.ReasonOpen)},
		{"scope zone, open", func(t *testing.T) *sharedstate.Snapshot {
			e := engineWith(t, "a", "z1", sharedstate.NewManualClock(t0), func(p *sharedstate.Policy) {
				p.Breaker.Scope = sharedstate.ScopeZone
				p.Retry.Backoff.Jitter = sharedstate.JitterDecorrelated
			})
			open(t, e)
			return e.Snapshot(dep)
		}, reject(sharedstate.ReasonOpen)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.make(t)
			if s == nil {
				t.Fatal("no snapshot")
			}
			if d := s.DecideFirst(); d != tc.want {
				t.Fatalf("the engine's snapshot decides %v, want %v: the case does not build the state it names (%+v)", d, tc.want, *s)
			}
			checkRoundTrip(t, s)
		})
	}
}

// Snapshots no single engine publishes (a node-local half-open without a
// permit, combinations of an override with every state) decide the same
// after the round trip.
func TestSnapshotRoundTripOfEveryCombination(t *testing.T) {
	states := []sharedstate.BreakerState{sharedstate.Closed, sharedstate.Open, sharedstate.HalfOpen}
	for _, state := range states {
		for _, local := range states {
			for _, permit := range []bool{false, true} {
				for _, ov := range []sharedstate.OverrideState{sharedstate.OverrideNone, sharedstate.ForcedOpen, sharedstate.ForcedClosed} {
					for _, mode := range []sharedstate.Mode{sharedstate.ModeEnforce, sharedstate.ModeShadow} {
						s := &sharedstate.Snapshot{Dependency: dep, Version: 9, State: state, LocalState: local,
							ProbePermit: permit, Override: ov, Policy: policyWith(func(p *sharedstate.Policy) { p.Breaker.Mode = mode }),
							Generation: 4, OpenCount: 2, ProbeRound: 3, Since: t0}
						checkRoundTrip(t, s)
					}
				}
			}
		}
	}

	// The case the old wire got wrong: node-local half-open without a
	// permit was rebuilt as open (reason "open").
	s := &sharedstate.Snapshot{Dependency: dep, State: sharedstate.Closed, LocalState: sharedstate.HalfOpen}
	if d := throughTheWire(t, s).DecideFirst(); d.Reason != sharedstate.ReasonHalfOpenNoPermit {
		t.Errorf("node-local half-open without a permit decides %v after the round trip", d)
	}
}

// nil converts to nil; an unknown state, and a local state left out, are
// Closed (node_local_open, a flag for other clients, is not read back).
func TestSnapshotEdges(t *testing.T) {
	if SnapshotFromProto(nil) != nil || SnapshotToProto(nil) != nil {
		t.Error("nil did not convert to nil")
	}
	if s := SnapshotFromProto(&fuseboxv1.DecisionSnapshot{State: fuseboxv1.BreakerState(42)}); s.State != sharedstate.Closed {
		t.Errorf("an unknown state came back as %v, want closed", s.State)
	}
	m := &fuseboxv1.DecisionSnapshot{Dependency: dep, State: fuseboxv1.BreakerState_BREAKER_STATE_CLOSED, NodeLocalOpen: true}
	if s := SnapshotFromProto(m); s.LocalState != sharedstate.Closed {
		t.Errorf("local state %v from node_local_open alone, want closed (local_state tells it)", s.LocalState)
	}
}

// Any snapshot (every field drawn at random) survives the round trip.
func TestSnapshotRoundTripProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		states := []sharedstate.BreakerState{sharedstate.Closed, sharedstate.Open, sharedstate.HalfOpen}
		when := func(label string) time.Time {
			if rapid.Bool().Draw(rt, label+"Set") {
				return time.Unix(0, rapid.Int64().Draw(rt, label)).UTC()
			}
			return time.Time{}
		}
		s := &sharedstate.Snapshot{
			Dependency:      rapid.StringMatching(`[A-Za-z0-9._:/-]{1,128}`).Draw(rt, "dependency"),
			Version:         rapid.Uint64().Draw(rt, "version"),
			State:           rapid.SampledFrom(states).Draw(rt, "state"),
			Generation:      rapid.Uint64().Draw(rt, "generation"),
			OpenCount:       rapid.Uint32().Draw(rt, "openCount"),
			Since:           when("since"),
			ProbeRound:      rapid.Uint64().Draw(rt, "probeRound"),
			ProbePermit:     rapid.Bool().Draw(rt, "permit"),
			LocalState:      rapid.SampledFrom(states).Draw(rt, "local"),
			Override:        rapid.SampledFrom([]sharedstate.OverrideState{sharedstate.OverrideNone, sharedstate.ForcedOpen, sharedstate.ForcedClosed}).Draw(rt, "override"),
			OverrideReason:  rapid.String().Draw(rt, "reason"),
			OverrideExpires: when("expires"),
			Policy: policyWith(func(p *sharedstate.Policy) {
				p.Breaker.Mode = rapid.SampledFrom([]sharedstate.Mode{sharedstate.ModeEnforce, sharedstate.ModeShadow}).Draw(rt, "mode")
				p.Breaker.Scope = rapid.SampledFrom([]sharedstate.Scope{sharedstate.ScopeFleet, sharedstate.ScopeZone, sharedstate.ScopeNode}).Draw(rt, "scope")
				p.Breaker.SlowCallDuration = sharedstate.Duration(rapid.Int64Range(1, int64(24*time.Hour)).Draw(rt, "slow"))
				p.Retry.MaxAttempts = rapid.IntRange(1, 100).Draw(rt, "maxAttempts")
				p.Retry.Backoff.Jitter = rapid.SampledFrom([]sharedstate.Jitter{sharedstate.JitterFull, sharedstate.JitterEqual, sharedstate.JitterDecorrelated, sharedstate.JitterNone}).Draw(rt, "jitter")
				p.Retry.Budget.Ratio = rapid.Float64Range(0, 1).Draw(rt, "ratio")
			}),
			ThrottleProbability: rapid.SampledFrom([]float64{0, 0.005, 0.5, 1}).Draw(rt, "throttle"),
			ConcurrencyLimit:    rapid.IntRange(0, math.MaxUint32).Draw(rt, "concurrency"),
		}
		// The ramp is part of the throttle probability.
		s.RampProbability = s.ThrottleProbability * rapid.SampledFrom([]float64{0, 0.5, 1}).Draw(rt, "ramp")
		checkRoundTrip(rt, s)
	})
}

// A policy travels once, as its JSON document in policy_json, and comes
// back as it was, its zeros (classic rule, no ramp, no budget, no backoff
// base) included; the engine makes the document once per policy
// (PolicyJSON), for the policy its snapshots carry.
func TestPolicyRoundTrip(t *testing.T) {
	p := sharedstate.DefaultPolicy()
	p.Breaker = sharedstate.BreakerPolicy{
		FailureRateThreshold: 0.25, SlowCallRateThreshold: 0.75, SlowCallDuration: sharedstate.Duration(1500 * time.Millisecond),
		MinimumRequests: 5, MinFailingNodes: 3, Window: sharedstate.Duration(30 * time.Second),
		OpenDuration: sharedstate.Duration(2 * time.Second), MaxOpenDuration: sharedstate.Duration(time.Minute),
		HalfOpenProbes: 2, ProbeSuccessThreshold: 4, ProbeTimeout: sharedstate.Duration(3 * time.Second),
		Scope: sharedstate.ScopeZone, Mode: sharedstate.ModeShadow,
		FleetMaxOpenDuration: sharedstate.Duration(7 * time.Second), RampStart: 0.25,
	}
	p.Retry.MaxAttempts = 2
	p.Retry.Backoff.Base = 0
	p.Retry.Backoff.Jitter = sharedstate.JitterNone
	p.Retry.Budget = sharedstate.BudgetPolicy{Ratio: 0, MinRetriesPerSecond: 0}
	p.Retry.Hedge = sharedstate.HedgePolicy{Delay: sharedstate.Duration(40 * time.Millisecond), MaxHedges: 2}
	p.Throttle = sharedstate.ThrottlePolicy{Enabled: true, K: 1.5, MinRequests: 7}
	p.Concurrency.MaxInFlight = 9
	e := engineWith(t, "a", "", sharedstate.NewManualClock(t0), func(d *sharedstate.Policy) { *d = p })
	fail(t, e, 1)
	p.Dependency = dep
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	snap := e.Snapshot(dep)
	pol, doc := e.PolicyJSON(dep)
	if pol != snap.Policy || *pol != p {
		t.Fatalf("PolicyJSON's policy %+v is not the snapshot's %+v", pol, snap.Policy)
	}
	if again, doc2 := e.PolicyJSON(dep); again != pol || &doc2[0] != &doc[0] {
		t.Error("PolicyJSON made the document again for the same policy")
	}
	got := throughTheWire(t, snap)
	if *got.Policy != p {
		t.Errorf("policy from the snapshot:\n got %+v\nwant %+v", *got.Policy, p)
	}
	if back, err := sharedstate.ParsePolicy(doc); err != nil || back != p {
		t.Errorf("PolicyJSON's document reads back as %+v, %v", back, err)
	}
	if s := PolicySnapshot(dep, p); s.State != sharedstate.Closed || s.Override != sharedstate.OverrideNone || *s.Policy != p {
		t.Errorf("policy snapshot %+v: want closed, without override, under p", *s)
	}
}

func TestEnumsRoundTrip(t *testing.T) {
	for _, s := range []sharedstate.BreakerState{sharedstate.Closed, sharedstate.Open, sharedstate.HalfOpen} {
		if got, ok := BreakerStateFromProto(BreakerState(s)); !ok || got != s {
			t.Errorf("state %v: %v %v", s, got, ok)
		}
	}
	for _, o := range []sharedstate.OverrideState{sharedstate.OverrideNone, sharedstate.ForcedOpen, sharedstate.ForcedClosed} {
		if got := OverrideStateFromProto(OverrideState(o)); got != o {
			t.Errorf("override %v: %v", o, got)
		}
	}
	for _, r := range []sharedstate.Reason{sharedstate.ReasonNone, sharedstate.ReasonOpen, sharedstate.ReasonForcedOpen,
		sharedstate.ReasonHalfOpenNoPermit, sharedstate.ReasonBudgetExhausted, sharedstate.ReasonThrottled, sharedstate.ReasonRamp} {
		if got := ReasonFromProto(Reason(r)); got != r {
			t.Errorf("reason %v: %v", r, got)
		}
	}
	for _, v := range []sharedstate.Verdict{sharedstate.Allow, sharedstate.AllowProbe, sharedstate.Reject} {
		if got, ok := VerdictFromProto(Verdict(v)); !ok || got != v {
			t.Errorf("verdict %v: %v %v", v, got, ok)
		}
	}
	if _, ok := VerdictFromProto(fuseboxv1.Verdict_VERDICT_UNSPECIFIED); ok {
		t.Error("unspecified verdict accepted")
	}
}

// A probability from the wire outside [0,1], NaN, or a ramp part above the
// throttle probability it is part of, is dropped: a client never refuses
// more than the agent said.
func TestThrottleProbabilitiesFromTheWire(t *testing.T) {
	for _, tc := range []struct {
		throttle, ramp         float64
		wantThrottle, wantRamp float64
	}{
		{0.5, 0.25, 0.5, 0.25},
		{0.5, 0.5, 0.5, 0.5},
		{0.5, 0.75, 0.5, 0},
		{math.NaN(), 0.25, 0, 0},
		{1.5, 1.5, 0, 0},
		{0.5, math.NaN(), 0.5, 0},
		{0.5, -0.1, 0.5, 0},
	} {
		s := SnapshotFromProto(&fuseboxv1.DecisionSnapshot{Dependency: dep, ThrottleProbability: tc.throttle, RampProbability: tc.ramp})
		if s.ThrottleProbability != tc.wantThrottle || s.RampProbability != tc.wantRamp {
			t.Errorf("throttle %v, ramp %v from the wire: %v, %v; want %v, %v", tc.throttle, tc.ramp,
				s.ThrottleProbability, s.RampProbability, tc.wantThrottle, tc.wantRamp)
		}
	}
}
