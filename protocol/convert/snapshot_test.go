package convert

import (
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

// throughTheWire converts s to its message, marshals and unmarshals it, and
// converts it back.
func throughTheWire(t tb, s *sharedstate.Snapshot) *sharedstate.Snapshot {
	t.Helper()
	b, err := proto.Marshal(SnapshotToProto(s))
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	var m fuseboxv1.DecisionSnapshot
	if err := proto.Unmarshal(b, &m); err != nil {
		t.Fatalf("unmarshal: %v", err)
	}
	return SnapshotFromProto(&m)
}

// comparable returns s with its times in UTC without a monotonic reading,
// so that == compares instants.
func comparable(s sharedstate.Snapshot) sharedstate.Snapshot {
	s.Since = s.Since.Round(0).UTC()
	s.OverrideExpires = s.OverrideExpires.Round(0).UTC()
	return s
}

func checkRoundTrip(t tb, s *sharedstate.Snapshot) {
	t.Helper()
	got := throughTheWire(t, s)
	if got.DecideFirst() != s.DecideFirst() {
		t.Errorf("DecideFirst after the round trip = %v, want %v (snapshot %+v)", got.DecideFirst(), s.DecideFirst(), *s)
	}
	if comparable(*got) != comparable(*s) {
		t.Errorf("round trip changed the snapshot:\n got %+v\nwant %+v", *got, *s)
	}
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
							ProbePermit: permit, Override: ov, Mode: mode, Scope: sharedstate.ScopeFleet,
							Generation: 4, OpenCount: 2, ProbeRound: 3, Since: t0, SlowCallDuration: time.Second}
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
			Dependency:       rapid.StringMatching(`[A-Za-z0-9._:/-]{1,128}`).Draw(rt, "dependency"),
			Version:          rapid.Uint64().Draw(rt, "version"),
			State:            rapid.SampledFrom(states).Draw(rt, "state"),
			Generation:       rapid.Uint64().Draw(rt, "generation"),
			OpenCount:        rapid.Uint32().Draw(rt, "openCount"),
			Since:            when("since"),
			ProbeRound:       rapid.Uint64().Draw(rt, "probeRound"),
			ProbePermit:      rapid.Bool().Draw(rt, "permit"),
			LocalState:       rapid.SampledFrom(states).Draw(rt, "local"),
			Override:         rapid.SampledFrom([]sharedstate.OverrideState{sharedstate.OverrideNone, sharedstate.ForcedOpen, sharedstate.ForcedClosed}).Draw(rt, "override"),
			OverrideReason:   rapid.String().Draw(rt, "reason"),
			OverrideExpires:  when("expires"),
			Mode:             rapid.SampledFrom([]sharedstate.Mode{"", sharedstate.ModeEnforce, sharedstate.ModeShadow}).Draw(rt, "mode"),
			Scope:            rapid.SampledFrom([]sharedstate.Scope{"", sharedstate.ScopeFleet, sharedstate.ScopeZone, sharedstate.ScopeNode}).Draw(rt, "scope"),
			SlowCallDuration: time.Duration(rapid.Int64().Draw(rt, "slow")),
			Retry: sharedstate.RetrySettings{
				MaxAttempts:         rapid.IntRange(0, math.MaxUint32).Draw(rt, "maxAttempts"),
				PerAttemptTimeout:   time.Duration(rapid.Int64().Draw(rt, "perAttempt")),
				BackoffBase:         time.Duration(rapid.Int64().Draw(rt, "base")),
				BackoffMax:          time.Duration(rapid.Int64().Draw(rt, "max")),
				Jitter:              rapid.SampledFrom([]sharedstate.Jitter{"", sharedstate.JitterFull, sharedstate.JitterEqual, sharedstate.JitterDecorrelated, sharedstate.JitterNone}).Draw(rt, "jitter"),
				BudgetRatio:         rapid.Float64Range(0, 1).Draw(rt, "ratio"),
				MinRetriesPerSecond: rapid.Float64Range(0, 1e6).Draw(rt, "minRetries"),
				HedgeDelay:          time.Duration(rapid.Int64().Draw(rt, "hedgeDelay")),
				MaxHedges:           rapid.IntRange(0, math.MaxUint32).Draw(rt, "maxHedges"),
			},
			ThrottleProbability: rapid.SampledFrom([]float64{0, 0.005, 0.5, 1}).Draw(rt, "throttle"),
			ConcurrencyLimit:    rapid.IntRange(0, math.MaxUint32).Draw(rt, "concurrency"),
		}
		// The ramp is part of the throttle probability.
		s.RampProbability = s.ThrottleProbability * rapid.SampledFrom([]float64{0, 0.5, 1}).Draw(rt, "ramp")
		checkRoundTrip(rt, s)
	})
}

// The breaker and retry settings of any valid policy survive the wire, each
// carried once: the trip rule and timings in BreakerSettings; mode, scope,
// slow-call duration and retry settings at the top of the snapshot.
func TestPolicyRoundTrip(t *testing.T) {
	p := sharedstate.DefaultPolicy()
	p.Dependency = dep
	p.Breaker = sharedstate.BreakerPolicy{
		FailureRateThreshold: 0.25, SlowCallRateThreshold: 0.75, SlowCallDuration: sharedstate.Duration(1500 * time.Millisecond),
		MinimumRequests: 5, MinFailingNodes: 3, Window: sharedstate.Duration(30 * time.Second),
		OpenDuration: sharedstate.Duration(2 * time.Second), MaxOpenDuration: sharedstate.Duration(time.Minute),
		HalfOpenProbes: 2, ProbeSuccessThreshold: 4, ProbeTimeout: sharedstate.Duration(3 * time.Second),
		Scope: sharedstate.ScopeZone, Mode: sharedstate.ModeShadow,
		FleetMaxOpenDuration: sharedstate.Duration(7 * time.Second), RampDuration: sharedstate.Duration(3 * time.Second), RampStart: 0.25,
	}
	p.Retry.MaxAttempts = 2
	p.Retry.Backoff.Base = 0 // valid, and carried although zero
	p.Retry.Backoff.Jitter = sharedstate.JitterNone
	p.Retry.Budget = sharedstate.BudgetPolicy{Ratio: 0, MinRetriesPerSecond: 0}
	p.Retry.Hedge = sharedstate.HedgePolicy{Delay: sharedstate.Duration(40 * time.Millisecond), MaxHedges: 2}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	base := sharedstate.DefaultPolicy() // ratio 0.1, base 100ms, …: all replaced
	m := SnapshotToProto(PolicySnapshot(dep, p))
	m.Breaker = BreakerToProto(p.Breaker)
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var back fuseboxv1.DecisionSnapshot
	if err := proto.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	got := PolicyWithBreaker(base, back.GetBreaker())
	s := SnapshotFromProto(&back)
	if got.Breaker.Mode != base.Breaker.Mode || got.Breaker.Scope != base.Breaker.Scope ||
		got.Breaker.SlowCallDuration != base.Breaker.SlowCallDuration {
		t.Errorf("BreakerSettings carried mode, scope or slow-call duration: %+v", got.Breaker)
	}
	got.Breaker.Mode, got.Breaker.Scope, got.Breaker.SlowCallDuration = s.Mode, s.Scope, sharedstate.Duration(s.SlowCallDuration)
	got.Retry = RetryPolicyFrom(s.Retry)
	got.Dependency = s.Dependency
	if got != p {
		t.Errorf("policy from the snapshot:\n got %+v\nwant %+v", got, p)
	}
	if s.State != sharedstate.Closed || s.Override != sharedstate.OverrideNone || s.Dependency != dep {
		t.Errorf("policy snapshot %+v: want closed, without override", *s)
	}
	if got := RetryFromProto(RetryToProto(RetryFromPolicy(p))); got != RetryFromPolicy(p) {
		t.Errorf("retry round trip: %+v", got)
	}
	// The classic rule (confidence 0, no fast path) travels too: its zeros are not "unset".
	classic := p.Breaker
	classic.Confidence, classic.FastPath = 0, false
	classic.RampDuration = 0 // no ramp: a zero that travels as well
	if got := PolicyWithBreaker(p, BreakerToProto(classic)).Breaker; got != classic {
		t.Errorf("classic breaker round trip:\n got %+v\nwant %+v", got, classic)
	}
	// Nothing carried: the base stays, whatever it is.
	if got := PolicyWithBreaker(base, &fuseboxv1.BreakerSettings{}); got != base {
		t.Errorf("empty breaker settings changed the base: %+v", got)
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
