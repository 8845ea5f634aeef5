package sharedstate

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// classic is the classic trip rule (confidence 0, no fast path).
func classic(p *Policy) { p.Breaker.Confidence, p.Breaker.FastPath = 0, false }

// The open a node proposes says what it tripped on: the pooled counts and
// the thresholds compared, the nodes whose own rates met one (the most
// failures first), and the trip as the incident's start.
func TestTripEvidence(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy func(p *Policy)
		own    [3]int // successes, failures, slow successes of "a"
		rows   map[string][3]int
		want   TripEvidence
	}{
		{
			name: "failures, classic rule", policy: classic, own: [3]int{0, 15, 0},
			rows: map[string][3]int{"b": {5, 10, 0}, "c": {10, 0, 0}, "d": {9, 1, 0}},
			want: TripEvidence{Requests: 50, Failures: 26, Nodes: 4, FailureRateThreshold: 0.5, SlowCallRateThreshold: 1,
				MinimumRequests: 20, MinFailingNodes: 2, Horizon: 10 * time.Second, FailingNodes: []string{"a", "b"}, FailingNodeCount: 2},
		},
		{
			name: "slow calls, classic rule", policy: func(p *Policy) { classic(p); p.Breaker.SlowCallRateThreshold = 0.5 },
			own: [3]int{0, 0, 12}, rows: map[string][3]int{"b": {2, 0, 10}},
			want: TripEvidence{Requests: 24, SlowCalls: 22, Nodes: 2, Slow: true, FailureRateThreshold: 0.5, SlowCallRateThreshold: 0.5,
				MinimumRequests: 20, MinFailingNodes: 2, Horizon: 10 * time.Second, FailingNodes: []string{"a", "b"}, FailingNodeCount: 2},
		},
		{
			name: "failures, lower bound over the window", policy: func(p *Policy) { p.Breaker.FastPath = false },
			own: [3]int{0, 30, 0}, rows: map[string][3]int{"b": {0, 30, 0}},
			want: TripEvidence{Requests: 60, Failures: 60, Nodes: 2, FailureRateThreshold: 0.5, SlowCallRateThreshold: 1,
				MinimumRequests: 20, MinFailingNodes: 2, Confidence: 0.95, LowerBound: -1, Horizon: 10 * time.Second,
				FailingNodes: []string{"a", "b"}, FailingNodeCount: 2},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := NewManualClock(t0)
			e := newTestEngine(t, "a", "", clock, func(c *EngineConfig) { c.DefaultPolicy = policyWith(tc.policy) })
			record(t, e, dep, FirstAttempt, Success, tc.own[0])
			record(t, e, dep, FirstAttempt, Failure, tc.own[1])
			record(t, e, dep, FirstAttempt, Slow, tc.own[2])
			for node, l := range tc.rows {
				e.ApplyRow(NodeWindow{Node: node, Dependency: dep, Seq: 1, Counts: Counts{FirstAttempts: uint64(l[0] + l[1] + l[2]),
					Successes: uint64(l[0] + l[2]), Failures: uint64(l[1]), SlowCalls: uint64(l[2])}})
			}
			props := e.Tick()
			if len(props) != 1 || props[0].State != Open {
				t.Fatalf("proposals %+v, want one open", props)
			}
			p := props[0]
			if p.Trip == nil || !p.IncidentStart.Equal(p.Since) {
				t.Fatalf("open record %+v: want trip evidence and the incident starting at its since", p)
			}
			got := *p.Trip
			if tc.want.LowerBound < 0 { // a lower bound below the rate: checked, then compared as the rate's
				if got.LowerBound <= tc.want.FailureRateThreshold || got.LowerBound >= got.FailureRate() {
					t.Errorf("lower bound %v, want above the threshold and below the rate %v", got.LowerBound, got.FailureRate())
				}
				tc.want.LowerBound = got.LowerBound
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("trip evidence\n got %+v\nwant %+v", got, tc.want)
			}
			if err := p.Validate(); err != nil {
				t.Errorf("the proposed record does not validate: %v", err)
			}
			if s := got.String(); !strings.Contains(s, fmt.Sprintf("over %d requests", got.Requests)) || !strings.Contains(s, "a, b") {
				t.Errorf("String() = %q", s)
			}
		})
	}
}

// The fast path's evidence is the suffix that tripped: a dependency that
// dies after a window of successes trips on the last sub-buckets, whose
// counts hold only the failures.
func TestTripEvidenceFastPath(t *testing.T) {
	clock := NewManualClock(t0)
	e := newTestEngine(t, "a", "", clock, nil) // the defaults: confidence 0.95, fast path on
	record(t, e, dep, FirstAttempt, Success, 200)
	e.Tick()
	clock.Advance(5 * time.Second)
	var rec BreakerRecord
	for i := 0; i < 40 && rec.State != Open; i++ {
		record(t, e, dep, FirstAttempt, Failure, 5)
		clock.Advance(20 * time.Millisecond)
		for _, p := range e.Tick() {
			rec = p
		}
	}
	if rec.State != Open || rec.Trip == nil {
		t.Fatalf("no open with evidence: %+v", rec)
	}
	ev := rec.Trip
	if !ev.FastPath || ev.Horizon <= 0 || ev.Horizon >= 10*time.Second || ev.Failures == 0 || ev.Requests >= 200 ||
		!slices.Equal(ev.FailingNodes, []string{"a"}) || !strings.Contains(rec.Reason, "fast path, last "+ev.Horizon.String()) {
		t.Errorf("fast-path trip %q with evidence %+v: want the suffix that tripped, its failures only, node a", rec.Reason, ev)
	}
}

// Re-opens after failed probes keep the incident's start and the trip's
// evidence; the close ends the incident, and the next trip starts another.
func TestIncidentStartAcrossReopens(t *testing.T) {
	clock := NewManualClock(t0)
	e := newTestEngine(t, "a", "", clock, nil)
	first := openBreaker(t, e)
	if first.Trip == nil || !first.IncidentStart.Equal(t0) {
		t.Fatalf("trip %+v: want evidence and the incident starting at %v", first, t0)
	}
	for i := range 3 {
		clock.Advance(5 * time.Second)
		record(t, e, dep, FirstAttempt, Rejected, 1)
		e.Tick()
		if d := e.AcquireProbe(dep); d != allowProbe {
			t.Fatalf("probe %d: %v", i, d)
		}
		re, ok := e.ProbeResult(dep, false)
		if !ok || re.State != Open || re.OpenCount != uint32(i+2) || !re.Since.Equal(clock.Now()) {
			t.Fatalf("re-open %d: %v %+v", i, ok, re)
		}
		if !re.IncidentStart.Equal(t0) || re.Trip != first.Trip {
			t.Fatalf("re-open %d: incident start %v, trip %+v; want %v and the first trip's evidence", i, re.IncidentStart, re.Trip, t0)
		}
	}
	clock.Advance(5 * time.Second)
	record(t, e, dep, FirstAttempt, Rejected, 1)
	e.Tick()
	var closed BreakerRecord
	for range 3 {
		if d := e.AcquireProbe(dep); d != allowProbe {
			t.Fatalf("closing probe: %v", d)
		}
		closed, _ = e.ProbeResult(dep, true)
	}
	if closed.State != Closed || !closed.IncidentStart.IsZero() || closed.Trip != nil {
		t.Fatalf("close %+v: want no incident start and no evidence", closed)
	}
	e.Tick() // sends the close
	clock.Advance(time.Minute)
	again := openBreaker(t, e)
	if !again.IncidentStart.Equal(clock.Now()) || again.Trip == nil {
		t.Errorf("the next trip %+v: want a new incident from %v", again, clock.Now())
	}
}

// A record from a build that does not carry the incident's start: a
// re-open over its trip (openCount 1) starts the incident at that trip.
func TestIncidentStartFromAnOlderBuildsTrip(t *testing.T) {
	clock := NewManualClock(t0)
	e := newTestEngine(t, "b", "", clock, nil)
	record(t, e, dep, FirstAttempt, Rejected, 1)
	e.ApplyRecord(BreakerRecord{Dependency: dep, Generation: 1, State: Open, Since: t0, OpenCount: 1, Origin: "a", Reason: "failure rate 1.00"})
	clock.Advance(5 * time.Second)
	e.Tick()
	if d := e.AcquireProbe(dep); d != allowProbe {
		t.Fatalf("probe: %v", d)
	}
	re, ok := e.ProbeResult(dep, false)
	if !ok || !re.IncidentStart.Equal(t0) || re.Trip != nil {
		t.Fatalf("re-open %v %+v: want the incident from the older build's trip at %v, no evidence", ok, re, t0)
	}
}

// Twenty failing nodes with long names: the record keeps the names of the
// nodes that failed most within the bounds, and counts them all.
func TestTripEvidenceBounds(t *testing.T) {
	clock := NewManualClock(t0)
	e := newTestEngine(t, "a", "", clock, func(c *EngineConfig) { c.DefaultPolicy = policyWith(classic) })
	record(t, e, dep, FirstAttempt, Failure, 1)
	long := strings.Repeat("x", 100)
	for i := range 20 {
		e.ApplyRow(NodeWindow{Node: fmt.Sprintf("%s-%02d", long, i), Dependency: dep, Seq: 1,
			Counts: Counts{FirstAttempts: uint64(10 + i), Failures: uint64(10 + i)}})
	}
	props := e.Tick()
	if len(props) != 1 || props[0].Trip == nil {
		t.Fatalf("proposals %+v", props)
	}
	ev := props[0].Trip
	if ev.FailingNodeCount != 21 || len(ev.FailingNodes) != 4 || namesBytes(ev.FailingNodes) > MaxTripNodeBytes ||
		ev.FailingNodes[0] != long+"-19" || ev.FailingNodes[3] != long+"-16" {
		t.Errorf("failing nodes %v (count %d): want the 4 that failed most (of 103 bytes each, within %d), and 21 counted",
			ev.FailingNodes, ev.FailingNodeCount, MaxTripNodeBytes)
	}
	if err := props[0].Validate(); err != nil {
		t.Error(err)
	}
}

func TestRecordValidateIncident(t *testing.T) {
	open := BreakerRecord{Dependency: dep, Generation: 1, State: Open, Since: t0, OpenCount: 1, Origin: "a", IncidentStart: t0,
		Trip: &TripEvidence{Requests: 20, Failures: 20, FailureRateThreshold: 0.5, SlowCallRateThreshold: 0.8, FailingNodes: []string{"a"}, FailingNodeCount: 1}}
	if err := open.Validate(); err != nil {
		t.Fatalf("a valid open record: %v", err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(r *BreakerRecord)
		want   string
	}{
		{"closed with evidence", func(r *BreakerRecord) { r.State = Closed }, "a closed record carries no incident start"},
		{"incident after since", func(r *BreakerRecord) { r.IncidentStart = t0.Add(time.Second) }, "incident start after since"},
		{"failures over requests", func(r *BreakerRecord) { r.Trip.Failures = 21 }, "21 failures"},
		{"threshold over 1", func(r *BreakerRecord) { r.Trip.FailureRateThreshold = 2 }, "failureRateThreshold 2"},
		{"too many names", func(r *BreakerRecord) {
			r.Trip.FailingNodes = strings.Split("a b c d e f g h i", " ")
			r.Trip.FailingNodeCount = 9
		}, "9 failing node names"},
		{"count below the names", func(r *BreakerRecord) { r.Trip.FailingNodeCount = 0 }, "failing node count 0 below the 1 names"},
		{"empty name", func(r *BreakerRecord) { r.Trip.FailingNodes = []string{""} }, "failing node name of 0 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := open
			ev := *open.Trip
			r.Trip = &ev
			tc.mutate(&r)
			if err := r.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate = %v, want ~ %q", err, tc.want)
			}
		})
	}
}

func TestRecordJSONWithEvidence(t *testing.T) {
	r := BreakerRecord{Dependency: dep, Generation: 3, State: Open, Since: t0.Add(time.Minute), OpenCount: 2, Origin: "a", IncidentStart: t0,
		Trip: &TripEvidence{Requests: 40, Failures: 30, Nodes: 3, FailureRateThreshold: 0.5, SlowCallRateThreshold: 0.8,
			Horizon: 800 * time.Millisecond, FastPath: true, FailingNodes: []string{"b", "a"}, FailingNodeCount: 2}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back BreakerRecord
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, r) {
		t.Fatalf("round trip of %s = %+v, %v", b, back, err)
	}
	b, _ = json.Marshal(BreakerRecord{Dependency: dep, State: Closed, Since: t0})
	if strings.Contains(string(b), "incidentStart") || strings.Contains(string(b), "trip") {
		t.Errorf("a closed record's JSON carries incident fields: %s", b)
	}
}
