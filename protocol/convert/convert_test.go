package convert

import (
	"math"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

func TestRecordRoundTripThroughTheWire(t *testing.T) {
	for _, r := range []sharedstate.BreakerRecord{
		{Dependency: "a", Generation: 3, State: sharedstate.Open, Since: time.Unix(0, 12345).UTC(), OpenCount: 2, Origin: "n1", Reason: "trip"},
		{Dependency: "b", Zone: "eu-1", Generation: 1, State: sharedstate.Closed, Origin: "n2"},
	} {
		b, err := proto.Marshal(RecordToProto(r))
		if err != nil {
			t.Fatal(err)
		}
		var m fuseboxv1.BreakerRecord
		if err := proto.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		got, ok := RecordFromProto(&m)
		if !ok || !sharedstate.SameRecord(got, r) {
			t.Errorf("round trip of %+v: %+v, %v", r, got, ok)
		}
	}
	if _, ok := RecordFromProto(&fuseboxv1.BreakerRecord{Dependency: "x", State: fuseboxv1.BreakerState_BREAKER_STATE_HALF_OPEN}); ok {
		t.Error("a half-open record was accepted from the wire")
	}
}

func TestRowRoundTripThroughTheWire(t *testing.T) {
	r := sharedstate.NodeWindow{Node: "n", Zone: "z", Dependency: "d", Seq: 9, Generation: 4, LocalOpen: true, InFlight: 17,
		ProbeSuccesses: 2, ProbeFailures: 1,
		Counts: sharedstate.Counts{FirstAttempts: 1, Retries: 2, Successes: 3, Failures: 4, SlowCalls: 5, Rejected: 6},
		Recent: sharedstate.Recent{rc(0, 1, 0), rc(1, 1, 0), rc(1, 2, 1), rc(3, 4, 1), rc(3, 4, 1), rc(3, 4, 1), rc(3, 4, 1)},
		Cumulative: sharedstate.Cumulative{Counts: sharedstate.Counts{FirstAttempts: 100, Retries: 7, Successes: 90, Failures: 17, SlowCalls: 3, Rejected: 2},
			Since: 1_790_000_000_000, At: 1_790_000_123_456}}
	b, err := proto.Marshal(RowToProto(r))
	if err != nil {
		t.Fatal(err)
	}
	var m fuseboxv1.NodeWindow
	if err := proto.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if got := RowFromProto(&m); got != r {
		t.Errorf("round trip: %+v, want %+v", got, r)
	}
}

func TestRecentOnTheWire(t *testing.T) {
	full := sharedstate.Recent{rc(1, 2, 3), rc(1, 2, 3), rc(1, 2, 3), rc(1, 2, 3), rc(1, 2, 3), rc(1, 2, 3), rc(9, 9, 9)}
	for _, c := range []struct {
		name             string
		recent           sharedstate.Recent
		succ, fail, slow []uint64
	}{
		{"empty: nothing on the wire", sharedstate.Recent{}, nil, nil, nil},
		{"differences, trailing zeros left out", sharedstate.Recent{rc(0, 1, 0), rc(1, 1, 0), rc(1, 1, 0), rc(1, 1, 0), rc(1, 1, 0), rc(1, 1, 0), rc(1, 1, 0)},
			[]uint64{0, 1}, []uint64{1}, nil},
		{"all seven", full, []uint64{1, 0, 0, 0, 0, 0, 8}, []uint64{2, 0, 0, 0, 0, 0, 7}, []uint64{3, 0, 0, 0, 0, 0, 6}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, f, sl := RecentToProto(c.recent)
			if !slices.Equal(s, c.succ) || !slices.Equal(f, c.fail) || !slices.Equal(sl, c.slow) {
				t.Fatalf("RecentToProto = %v %v %v, want %v %v %v", s, f, sl, c.succ, c.fail, c.slow)
			}
			if got, ok := RecentFromProto(s, f, sl); !ok || got != c.recent {
				t.Errorf("RecentFromProto = %v, %v, want %v", got, ok, c.recent)
			}
		})
	}
	// Huge values saturate instead of wrapping.
	if got, ok := RecentFromProto([]uint64{math.MaxUint64, math.MaxUint32}, nil, nil); !ok || got[0].Successes != math.MaxUint32 || got[1].Successes != math.MaxUint32 {
		t.Errorf("saturation: %v, %v", got, ok)
	}
	// A malformed list makes a row the engine refuses and counts.
	e, err := sharedstate.NewEngine(sharedstate.EngineConfig{Node: "me"})
	if err != nil {
		t.Fatal(err)
	}
	long := make([]uint64, sharedstate.FastHorizons+1)
	for _, m := range []*fuseboxv1.NodeWindow{{RecentSuccesses: long}, {RecentFailures: long}, {RecentSlowCalls: long}} {
		m.Node, m.Dependency, m.Seq = "n", "d", 1
		if e.ApplyRow(RowFromProto(m)) {
			t.Errorf("row %v accepted", m)
		}
	}
	if s := e.Stats(); s.InvalidRows != 3 {
		t.Errorf("InvalidRows = %d, want 3", s.InvalidRows)
	}
}

func TestSnapshotAndDecision(t *testing.T) {
	p := sharedstate.DefaultPolicy()
	s := &sharedstate.Snapshot{Dependency: "d", State: sharedstate.Closed, LocalState: sharedstate.HalfOpen, ProbePermit: true,
		Generation: 2, Override: sharedstate.ForcedOpen, OverrideReason: "ops", Policy: &p, Since: time.Unix(5, 0)}
	m := SnapshotToProto(s)
	if !m.GetNodeLocalOpen() || !m.GetProbePermit() || m.GetOverride() != fuseboxv1.OverrideState_OVERRIDE_STATE_FORCED_OPEN ||
		m.GetSince().AsTime().Unix() != 5 || m.GetPolicyJson() != nil {
		t.Errorf("snapshot: %v", m)
	}
	d := DecisionToProto(sharedstate.Decision{Verdict: sharedstate.Reject, Reason: sharedstate.ReasonBudgetExhausted}, nil)
	if d.GetVerdict() != fuseboxv1.Verdict_VERDICT_REJECT || d.GetReason() != fuseboxv1.RejectReason_REJECT_REASON_BUDGET_EXHAUSTED || d.Snapshot != nil {
		t.Errorf("decision: %v", d)
	}
	for in, want := range map[fuseboxv1.Outcome]sharedstate.Outcome{
		fuseboxv1.Outcome_OUTCOME_TIMEOUT: sharedstate.SlowFailure, fuseboxv1.Outcome_OUTCOME_SLOW_SUCCESS: sharedstate.Slow,
		fuseboxv1.Outcome_OUTCOME_REJECTED: sharedstate.Rejected,
	} {
		if got, ok := Outcome(in); !ok || got != want {
			t.Errorf("Outcome(%v) = %v, %v", in, got, ok)
		}
	}
	if _, ok := Outcome(fuseboxv1.Outcome_OUTCOME_UNSPECIFIED); ok {
		t.Error("unspecified outcome accepted")
	}
}

func rc(s, f, slow uint32) sharedstate.RecentCounts {
	return sharedstate.RecentCounts{Successes: s, Failures: f, SlowCalls: slow}
}

// A throttle probability outside (0,1] (NaN, negative, above 1) from the
// wire is dropped, and a throttled rejection keeps its reason.
func TestThrottleOverTheWire(t *testing.T) {
	for _, p := range []float64{math.NaN(), -0.5, 1.5, math.Inf(1)} {
		if s := SnapshotFromProto(&fuseboxv1.DecisionSnapshot{ThrottleProbability: p}); s.ThrottleProbability != 0 {
			t.Errorf("probability %v came through as %v", p, s.ThrottleProbability)
		}
	}
	if got := ReasonFromProto(Reason(sharedstate.ReasonThrottled)); got != sharedstate.ReasonThrottled {
		t.Errorf("ReasonThrottled round trip: %v", got)
	}
}
