package fleet

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/fusebox-dev/fusebox/protocol/convert"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/protocol/gossip"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// staticSource is a fleet.Source with fixed policies and overrides.
type staticSource struct {
	policies  map[string]sharedstate.Policy
	overrides map[string]Override
}

func (s staticSource) Policy(dep string) sharedstate.Policy {
	if p, ok := s.policies[dep]; ok {
		return p
	}
	p := sharedstate.DefaultPolicy()
	p.Dependency = dep
	return p
}

func (s staticSource) Override(dep string, _ time.Time) (Override, bool) {
	o, ok := s.overrides[dep]
	return o, ok
}

func (s staticSource) Dependencies() []string {
	var out []string
	for d := range s.policies {
		out = append(out, d)
	}
	for d := range s.overrides {
		out = append(out, d)
	}
	return out
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func mkRow(node, zone, dep string, seq uint64, failures uint64) *fuseboxv1.NodeWindow {
	return &fuseboxv1.NodeWindow{Node: node, Zone: zone, Dependency: dep, Seq: seq,
		Counts: &fuseboxv1.Counts{FirstAttempts: 10, Successes: 10 - failures, Failures: failures}}
}

func rec(dep string, gen uint64, open bool, since time.Time, origin string) *fuseboxv1.BreakerRecord {
	st := fuseboxv1.BreakerState_BREAKER_STATE_CLOSED
	if open {
		st = fuseboxv1.BreakerState_BREAKER_STATE_OPEN
	}
	return &fuseboxv1.BreakerRecord{Dependency: dep, Generation: gen, State: st, SinceUnixNano: since.UnixNano(), OpenCount: 1, Origin: origin}
}

type recorder struct {
	mu      sync.Mutex
	trans   []Transition
	refused map[string]int
}

func (r *recorder) config(c Config) Config {
	r.refused = map[string]int{}
	c.OnTransition = func(t Transition) { r.mu.Lock(); r.trans = append(r.trans, t); r.mu.Unlock() }
	c.OnRefused = func(reason string) { r.refused[reason]++ } // called under the View's lock
	return c
}

func (r *recorder) take() []Transition {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.trans
	r.trans = nil
	return out
}

func TestRowsLastWriterWinsAndExpire(t *testing.T) {
	clock := sharedstate.NewManualClock(t0)
	var r recorder
	v := New(r.config(Config{Clock: clock}))
	src := staticSource{}
	v.ApplyBatch(&fuseboxv1.GossipBatch{Rows: []*fuseboxv1.NodeWindow{mkRow("n1", "a", "db", 5, 3)}})
	v.ApplyBatch(&fuseboxv1.GossipBatch{Rows: []*fuseboxv1.NodeWindow{mkRow("n1", "a", "db", 4, 9)}}) // older: ignored
	d := v.Snapshot(clock.Now(), src, "db").GetDependencies()[0]
	if d.GetFleet().GetFailures() != 3 {
		t.Fatalf("failures = %d, want 3 (seq 5 kept over seq 4)", d.GetFleet().GetFailures())
	}
	v.ApplyState(&fuseboxv1.PushPullState{Rows: []*fuseboxv1.NodeWindow{mkRow("n1", "a", "db", 6, 7), mkRow("n2", "b", "db", 1, 1)}}, false)
	d = v.Snapshot(clock.Now(), src, "db").GetDependencies()[0]
	if d.GetFleet().GetFailures() != 8 || len(d.GetNodes()) != 2 || len(d.GetZones()) != 2 {
		t.Fatalf("after push-pull: %v", d)
	}
	// n2 refreshes later; n1 goes quiet and expires after 2×window (20s).
	clock.Advance(15 * time.Second)
	v.ApplyBatch(&fuseboxv1.GossipBatch{Rows: []*fuseboxv1.NodeWindow{mkRow("n2", "b", "db", 2, 2)}})
	clock.Advance(6 * time.Second)
	d = v.Snapshot(clock.Now(), src, "db").GetDependencies()[0]
	if len(d.GetNodes()) != 1 || d.GetNodes()[0].GetNode() != "n2" {
		t.Fatalf("after 21s: nodes %v, want only n2", d.GetNodes())
	}
	v.Tick(clock.Now(), src)
	if st := v.Stats(); st.Rows != 1 {
		t.Fatalf("rows after Tick = %d, want 1", st.Rows)
	}
	// A departed member's rows go at once.
	v.MemberJoined(gossip.Member{Name: "n2", State: "alive", Meta: gossip.NodeMeta{Role: gossip.RoleAgent}})
	v.MemberLeft(gossip.Member{Name: "n2", State: "left", Meta: gossip.NodeMeta{Role: gossip.RoleAgent}})
	if st := v.Stats(); st.Rows != 0 || st.Dependencies != 0 || st.Members["left"] != 1 {
		t.Fatalf("after n2 left: %+v", st)
	}
	// And is forgotten after DepartedRetention.
	clock.Advance(DepartedRetention + time.Second)
	v.Tick(clock.Now(), src)
	if n := len(v.Members()); n != 0 {
		t.Fatalf("members after retention = %d", n)
	}
}

func TestRefusals(t *testing.T) {
	clock := sharedstate.NewManualClock(t0)
	var r recorder
	v := New(r.config(Config{Clock: clock, MaxDependencies: 2, MaxRows: 3}))
	v.MemberJoined(gossip.Member{Name: "obs", State: "alive", Meta: gossip.NodeMeta{Role: gossip.RoleObserver}})
	_, refused := v.ApplyBatch(&fuseboxv1.GossipBatch{
		Rows: []*fuseboxv1.NodeWindow{
			mkRow("obs", "", "db", 1, 0),       // an observer's row: never counted
			mkRow("n1", "", "bad name!", 1, 0), // invalid
			mkRow("", "", "db", 1, 0),          // no node
			mkRow("n1", "", "a", 1, 0),
			mkRow("n1", "", "b", 1, 0),
			mkRow("n1", "", "c", 1, 0), // third dependency
			mkRow("n2", "", "a", 1, 0),
			mkRow("n3", "", "a", 1, 0), // fourth row
		},
		Records: []*fuseboxv1.BreakerRecord{
			rec("d", 1, true, t0, "n1"), // third dependency
			{Dependency: "a", State: fuseboxv1.BreakerState_BREAKER_STATE_HALF_OPEN}, // half-open never travels
		},
	})
	want := map[string]int{RefusedNotAnAgent: 1, RefusedInvalid: 3, RefusedTooManyDeps: 2, RefusedTooManyRows: 1}
	if refused != 7 || fmt.Sprint(r.refused) != fmt.Sprint(want) {
		t.Fatalf("refused %d: %v, want 7: %v", refused, r.refused, want)
	}
	if st := v.Stats(); st.Dependencies != 2 || st.Rows != 3 {
		t.Fatalf("stats %+v", st)
	}
}

func TestRecordsMergeAndTransitions(t *testing.T) {
	clock := sharedstate.NewManualClock(t0)
	var r recorder
	v := New(r.config(Config{Clock: clock}))
	src := staticSource{overrides: map[string]Override{"db": {State: sharedstate.ForcedOpen, Reason: "maintenance"}}}

	v.ApplyBatch(&fuseboxv1.GossipBatch{Records: []*fuseboxv1.BreakerRecord{rec("db", 0, false, t0, "n1")}})
	if got := r.take(); len(got) != 0 {
		t.Fatalf("a closed generation-0 record is no news: %v", got)
	}
	v.ApplyBatch(&fuseboxv1.GossipBatch{Records: []*fuseboxv1.BreakerRecord{rec("db", 2, true, t0, "n2")}})
	v.ApplyBatch(&fuseboxv1.GossipBatch{Records: []*fuseboxv1.BreakerRecord{rec("db", 2, true, t0, "n2")}})  // duplicate
	v.ApplyBatch(&fuseboxv1.GossipBatch{Records: []*fuseboxv1.BreakerRecord{rec("db", 1, false, t0, "n1")}}) // older
	got := r.take()
	if len(got) != 1 || got[0].State != sharedstate.Open || got[0].Generation != 2 || got[0].Origin != "n2" {
		t.Fatalf("transitions = %+v, want one open at generation 2", got)
	}
	d := v.Snapshot(clock.Now(), src, "db").GetDependencies()[0]
	if d.GetState() != fuseboxv1.BreakerState_BREAKER_STATE_OPEN || d.GetOverride() != fuseboxv1.OverrideState_OVERRIDE_STATE_FORCED_OPEN ||
		d.GetOverrideReason() != "maintenance" {
		t.Fatalf("view = %v", d)
	}
	// openDuration 5s (openCount 1): half-open after it, derived by Tick.
	clock.Advance(5 * time.Second)
	v.Tick(clock.Now(), src)
	got = r.take()
	if len(got) != 1 || got[0].State != sharedstate.HalfOpen || got[0].Previous != sharedstate.Open {
		t.Fatalf("transitions = %+v, want open → half-open", got)
	}
	v.Tick(clock.Now(), src)
	if got := r.take(); len(got) != 0 {
		t.Fatalf("a second Tick reported %v", got)
	}
	// A failed probe: same state family, new generation: reported.
	v.ApplyBatch(&fuseboxv1.GossipBatch{Records: []*fuseboxv1.BreakerRecord{rec("db", 3, true, clock.Now(), "n1")}})
	if got := r.take(); len(got) != 1 || got[0].State != sharedstate.Open || got[0].Generation != 3 {
		t.Fatalf("transitions = %+v, want open at generation 3", got)
	}
	if st := v.Stats(); st.States["open"] != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestHalfOpenBetweenTicks: the agents go half-open and a probe fails (or
// succeeds) before the view's Tick derived half-open. The successor record
// still shows the half-open the agents went through: open -> half-open,
// then half-open -> open (or closed), as every agent logged it.
func TestHalfOpenBetweenTicks(t *testing.T) {
	clock := sharedstate.NewManualClock(t0)
	var r recorder
	v := New(r.config(Config{Clock: clock}))
	src := staticSource{}
	v.ApplyBatch(&fuseboxv1.GossipBatch{Records: []*fuseboxv1.BreakerRecord{rec("db", 1, true, t0, "n1")}})
	if got := r.take(); len(got) != 1 || got[0].State != sharedstate.Open {
		t.Fatalf("transitions = %+v, want closed -> open", got)
	}
	clock.Advance(5*time.Second + 10*time.Millisecond) // past openDuration; no Tick ran
	reopen := rec("db", 2, true, clock.Now(), "n2")
	reopen.OpenCount, reopen.Reason = 2, "probe failed"
	v.ApplyBatch(&fuseboxv1.GossipBatch{Records: []*fuseboxv1.BreakerRecord{reopen}})
	got := r.take()
	want := []string{"open -> half-open generation 1", "half-open -> open generation 2"}
	if len(got) != len(want) {
		t.Fatalf("transitions = %+v, want %v", got, want)
	}
	for i, tr := range got {
		if s := fmt.Sprintf("%s -> %s generation %d", tr.Previous, tr.State, tr.Generation); s != want[i] {
			t.Errorf("transition %d = %s, want %s", i, s, want[i])
		}
	}
	// A Tick after the fact reports nothing more; the close that follows
	// the next half-open, again missed by the ticks, shows it too.
	v.Tick(clock.Now(), src)
	if got := r.take(); len(got) != 0 {
		t.Fatalf("Tick reported %+v", got)
	}
	clock.Advance(20 * time.Second)
	v.ApplyBatch(&fuseboxv1.GossipBatch{Records: []*fuseboxv1.BreakerRecord{rec("db", 3, false, clock.Now(), "n1")}})
	got = r.take()
	if len(got) != 2 || got[0].State != sharedstate.HalfOpen || got[0].Generation != 2 ||
		got[1].Previous != sharedstate.HalfOpen || got[1].State != sharedstate.Closed || got[1].Generation != 3 {
		t.Fatalf("transitions = %+v, want open -> half-open (2), half-open -> closed (3)", got)
	}
}

func TestProbersAndBudget(t *testing.T) {
	clock := sharedstate.NewManualClock(t0)
	v := New(Config{Clock: clock})
	pol := sharedstate.DefaultPolicy()
	pol.Breaker.HalfOpenProbes = 2
	src := staticSource{policies: map[string]sharedstate.Policy{"db": pol}}
	var rows []*fuseboxv1.NodeWindow
	for i := range 5 {
		r := mkRow(fmt.Sprintf("n%d", i), "z", "db", 1, 1)
		r.Counts.Retries = 4
		rows = append(rows, r)
	}
	rows = append(rows, &fuseboxv1.NodeWindow{Node: "idle", Dependency: "db", Seq: 1, Counts: &fuseboxv1.Counts{}})
	v.ApplyBatch(&fuseboxv1.GossipBatch{Rows: rows, Records: []*fuseboxv1.BreakerRecord{rec("db", 7, true, t0.Add(-time.Minute), "n0")}})
	d := v.Snapshot(clock.Now(), src, "db").GetDependencies()[0]
	if d.GetState() != fuseboxv1.BreakerState_BREAKER_STATE_HALF_OPEN {
		t.Fatalf("state %v", d.GetState())
	}
	// The probers are the agents' choice: rendezvous over the nodes with traffic.
	rec7, _ := convert.RecordFromProto(rec("db", 7, true, t0.Add(-time.Minute), "n0"))
	want := Probers("db", rec7, pol.Breaker, clock.Now(), []string{"n0", "n1", "n2", "n3", "n4"})
	if fmt.Sprint(d.GetProbers()) != fmt.Sprint(want) || len(want) != 2 {
		t.Fatalf("probers %v, want %v", d.GetProbers(), want)
	}
	n := 0
	for _, nv := range d.GetNodes() {
		if nv.GetProber() {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d nodes flagged prober", n)
	}
	// 20 retries against max(10/s × 10s, 0.1 × 50) = 100.
	if d.GetBudgetUsed() != 0.2 {
		t.Fatalf("budget used %v, want 0.2", d.GetBudgetUsed())
	}
}

// TestViewStaysBounded: whatever the gossip says, the view never holds
// more than its caps, and every row kept is the highest seq heard.
func TestViewStaysBounded(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		clock := sharedstate.NewManualClock(t0)
		maxDeps := rapid.IntRange(1, 5).Draw(rt, "maxDeps")
		maxRows := rapid.IntRange(1, 12).Draw(rt, "maxRows")
		v := New(Config{Clock: clock, MaxDependencies: maxDeps, MaxRows: maxRows})
		src := staticSource{}
		best := map[[2]string]uint64{}
		steps := rapid.IntRange(1, 60).Draw(rt, "steps")
		for range steps {
			dep := rapid.SampledFrom([]string{"a", "b", "c", "d", "e", "f", "g"}).Draw(rt, "dep")
			node := rapid.SampledFrom([]string{"n1", "n2", "n3", "n4"}).Draw(rt, "node")
			switch rapid.IntRange(0, 3).Draw(rt, "op") {
			case 0, 1:
				seq := rapid.Uint64Range(1, 20).Draw(rt, "seq")
				_, refused := v.ApplyBatch(&fuseboxv1.GossipBatch{Rows: []*fuseboxv1.NodeWindow{mkRow(node, "", dep, seq, 0)}})
				if refused == 0 && seq > best[[2]string{dep, node}] {
					best[[2]string{dep, node}] = seq
				}
			case 2:
				gen := rapid.Uint64Range(0, 5).Draw(rt, "gen")
				v.ApplyBatch(&fuseboxv1.GossipBatch{Records: []*fuseboxv1.BreakerRecord{rec(dep, gen, gen%2 == 1, clock.Now(), node)}})
			case 3:
				clock.Advance(time.Duration(rapid.IntRange(0, 30).Draw(rt, "secs")) * time.Second)
				v.Tick(clock.Now(), src)
				best = map[[2]string]uint64{} // expiry may have dropped rows; restart the LWW check
				v.mu.Lock()
				for dep, byNode := range v.rows {
					for node, r := range byNode {
						best[[2]string{dep, node}] = r.seq
					}
				}
				v.mu.Unlock()
			}
			st := v.Stats()
			if st.Dependencies > maxDeps || st.Rows > maxRows {
				rt.Fatalf("stats %+v beyond caps deps %d rows %d", st, maxDeps, maxRows)
			}
			v.mu.Lock()
			n := 0
			for dep, byNode := range v.rows {
				if len(byNode) == 0 {
					rt.Fatalf("empty row map kept for %s", dep)
				}
				for node, r := range byNode {
					n++
					if r.seq != best[[2]string{dep, node}] {
						rt.Fatalf("row %s/%s has seq %d, the highest heard is %d", dep, node, r.seq, best[[2]string{dep, node}])
					}
				}
			}
			v.mu.Unlock()
			if n != st.Rows {
				rt.Fatalf("row count %d, counted %d", st.Rows, n)
			}
		}
	})
}

// zoned returns r carrying zone, as agents send it for scope: zone.
func zoned(r *fuseboxv1.BreakerRecord, zone string) *fuseboxv1.BreakerRecord {
	r.Zone = zone
	return r
}

func TestZoneRecords(t *testing.T) {
	clock := sharedstate.NewManualClock(t0)
	var r recorder
	v := New(r.config(Config{Clock: clock}))
	pol := sharedstate.DefaultPolicy()
	pol.Breaker.Scope = sharedstate.ScopeZone
	src := staticSource{policies: map[string]sharedstate.Policy{"db": pol}}
	a := rec("db", 2, true, t0.Add(-time.Minute), "a1")
	a.Reason = "zone a failing"
	v.ApplyBatch(&fuseboxv1.GossipBatch{
		Rows: []*fuseboxv1.NodeWindow{mkRow("a1", "a", "db", 1, 5), mkRow("a2", "a", "db", 1, 5), mkRow("b1", "b", "db", 1, 0)},
		Records: []*fuseboxv1.BreakerRecord{
			zoned(a, "a"),
			zoned(rec("db", 5, false, t0, "b1"), "b"), // a higher generation in another zone must not hide zone a
		},
	})
	got := r.take()
	if len(got) != 1 || got[0].Zone != "a" || got[0].State != sharedstate.Open {
		t.Fatalf("transitions = %+v, want zone a opening", got)
	}
	d := v.Snapshot(clock.Now(), src, "db").GetDependencies()[0]
	if d.GetState() != fuseboxv1.BreakerState_BREAKER_STATE_HALF_OPEN || d.GetGeneration() != 2 || d.GetReason() != "zone a: zone a failing" {
		t.Fatalf("view = %v", d)
	}
	// Probers of zone a come from zone a only.
	for _, p := range d.GetProbers() {
		if !strings.HasPrefix(p, "a") {
			t.Fatalf("probers %v include a node outside zone a", d.GetProbers())
		}
	}
	if len(d.GetProbers()) != 2 {
		t.Fatalf("probers %v, want a1 and a2", d.GetProbers())
	}
	v.Tick(clock.Now(), src)
	if got := r.take(); len(got) != 1 || got[0].Zone != "a" || got[0].State != sharedstate.HalfOpen {
		t.Fatalf("transitions = %+v, want zone a half-open", got)
	}
	// Zones per dependency are bounded.
	var many []*fuseboxv1.BreakerRecord
	for i := range MaxZonesPerDependency {
		many = append(many, zoned(rec("db", 1, false, t0, "x"), fmt.Sprintf("z%d", i)))
	}
	if _, refused := v.ApplyBatch(&fuseboxv1.GossipBatch{Records: many}); refused != 2 || r.refused[RefusedTooManyZone] != 2 {
		t.Fatalf("refused %d (%v), want the 2 zones past %d", refused, r.refused, MaxZonesPerDependency)
	}
}

// The view computes the fleet's throttle probability with the policy's
// formula and sums the rows' in-flight calls against the policy's limit.
func TestThrottleAndInFlight(t *testing.T) {
	clock := sharedstate.NewManualClock(t0)
	v := New(Config{Clock: clock})
	pol := sharedstate.DefaultPolicy()
	pol.Throttle = sharedstate.ThrottlePolicy{Enabled: true, K: 2, MinRequests: 10}
	pol.Concurrency.MaxInFlight = 40
	src := staticSource{policies: map[string]sharedstate.Policy{"db": pol}}
	a, b := mkRow("a", "z", "db", 1, 8), mkRow("b", "z", "db", 1, 7) // 20 requests, 5 successes
	a.InFlight, b.InFlight = 3, 4
	v.ApplyBatch(&fuseboxv1.GossipBatch{Rows: []*fuseboxv1.NodeWindow{a, b}})
	d := v.Snapshot(clock.Now(), src, "db").GetDependencies()[0]
	if want := (20.0 - 2*5) / 21; !d.GetThrottleEnabled() || math.Abs(d.GetThrottleProbability()-want) > 1e-12 {
		t.Errorf("throttle %v %v, want enabled with %v", d.GetThrottleEnabled(), d.GetThrottleProbability(), want)
	}
	if d.GetInFlight() != 7 || d.GetMaxInFlight() != 40 {
		t.Errorf("in flight %d of %d, want 7 of 40", d.GetInFlight(), d.GetMaxInFlight())
	}
	for _, n := range d.GetNodes() {
		if want := map[string]uint64{"a": 3, "b": 4}[n.GetNode()]; n.GetInFlight() != want {
			t.Errorf("node %s: in flight %d, want %d", n.GetNode(), n.GetInFlight(), want)
		}
	}
	// Throttling off: no probability.
	pol.Throttle.Enabled = false
	src.policies["db"] = pol
	if d := v.Snapshot(clock.Now(), src, "db").GetDependencies()[0]; d.GetThrottleEnabled() || d.GetThrottleProbability() != 0 {
		t.Errorf("throttling off: %v %v", d.GetThrottleEnabled(), d.GetThrottleProbability())
	}
}

// What an operator reads of an incident: an open record's trip evidence
// and incident start (the first open of a run of re-opens, not the latest
// re-open), the override's author, creation and expiry, the ramp after a
// close, and the retry budget in retries beside the share used.
func TestIncidentOverrideRampAndBudget(t *testing.T) {
	clock := sharedstate.NewManualClock(t0)
	v := New(Config{Clock: clock})
	pol := sharedstate.DefaultPolicy()
	pol.Breaker.RampDuration = sharedstate.Duration(time.Minute)
	src := staticSource{
		policies: map[string]sharedstate.Policy{"inventory-api": pol},
		overrides: map[string]Override{"ledger": {State: sharedstate.ForcedOpen, Reason: "failover drill", Actor: "alice (ops-admin)",
			Created: t0, Expires: t0.Add(10 * time.Minute)}},
	}
	trip := &sharedstate.TripEvidence{Requests: 40, Failures: 32, Nodes: 3, FailureRateThreshold: 0.5, SlowCallRateThreshold: 1,
		MinimumRequests: 20, MinFailingNodes: 2, Horizon: 10 * time.Second, FailingNodes: []string{"agent-1", "agent-2"}, FailingNodeCount: 2}
	reopen := sharedstate.BreakerRecord{Dependency: "inventory-api", Generation: 4, State: sharedstate.Open, Since: t0.Add(45 * time.Second),
		OpenCount: 4, Origin: "agent-3", Reason: "probe failed", IncidentStart: t0, Trip: trip}
	// Halfway through the fourth open, however long the policy keeps it open.
	clock.Advance(reopen.Since.Add(reopen.HalfOpenAt(pol.Breaker).Sub(reopen.Since) / 2).Sub(clock.Now()))
	v.ApplyBatch(&fuseboxv1.GossipBatch{Records: []*fuseboxv1.BreakerRecord{convert.RecordToProto(reopen)},
		Rows: []*fuseboxv1.NodeWindow{{Node: "agent-3", Dependency: "inventory-api", Seq: 1,
			Counts: &fuseboxv1.Counts{FirstAttempts: 1000, Retries: 106, Successes: 900, Failures: 100}}}})

	snap := v.Snapshot(clock.Now(), src, "")
	byName := map[string]*fuseboxv1.DependencyView{}
	for _, d := range snap.GetDependencies() {
		byName[d.GetDependency()] = d
	}
	inv := byName["inventory-api"]
	if inv.GetState() != fuseboxv1.BreakerState_BREAKER_STATE_OPEN || !inv.GetIncidentStart().AsTime().Equal(t0) ||
		!inv.GetSince().AsTime().Equal(reopen.Since) || inv.GetOpenCount() != 4 {
		t.Errorf("inventory-api: state %v, incident start %v, since %v, opens %d; want open since %v, incident from %v",
			inv.GetState(), inv.GetIncidentStart().AsTime(), inv.GetSince().AsTime(), inv.GetOpenCount(), reopen.Since, t0)
	}
	if got := convert.TripFromProto(inv.GetTrip()); got == nil || got.String() != trip.String() {
		t.Errorf("inventory-api's trip evidence %v, want %v", got, trip)
	}
	// 106 retries against max(10/s × 10 s, 10% × 1000) = 100.
	if inv.GetRetryBudget() != 100 || math.Abs(inv.GetBudgetUsed()-1.06) > 1e-9 {
		t.Errorf("retry budget %v, used %v; want 100 retries, 1.06", inv.GetRetryBudget(), inv.GetBudgetUsed())
	}
	led := byName["ledger"]
	if led.GetOverride() != fuseboxv1.OverrideState_OVERRIDE_STATE_FORCED_OPEN || led.GetOverrideActor() != "alice (ops-admin)" ||
		led.GetOverrideReason() != "failover drill" || !led.GetOverrideCreated().AsTime().Equal(t0) ||
		!led.GetOverrideExpires().AsTime().Equal(t0.Add(10*time.Minute)) {
		t.Errorf("ledger's override: %v by %q (%q), created %v, expires %v", led.GetOverride(), led.GetOverrideActor(),
			led.GetOverrideReason(), led.GetOverrideCreated(), led.GetOverrideExpires())
	}

	// The close: no incident any more, the ramp for rampDuration.
	closed := sharedstate.BreakerRecord{Dependency: "inventory-api", Generation: 5, State: sharedstate.Closed, Since: clock.Now(), Origin: "agent-3"}
	v.ApplyBatch(&fuseboxv1.GossipBatch{Records: []*fuseboxv1.BreakerRecord{convert.RecordToProto(closed)}})
	clock.Advance(15 * time.Second)
	inv = v.Snapshot(clock.Now(), src, "inventory-api").GetDependencies()[0]
	if inv.GetIncidentStart() != nil || inv.GetTrip() != nil {
		t.Errorf("closed: incident %v, trip %v; want neither", inv.GetIncidentStart(), inv.GetTrip())
	}
	// rampStart 0.1: refuses 90% at the close, 67.5% a quarter in.
	if math.Abs(inv.GetRampProbability()-0.675) > 1e-9 || !inv.GetRampUntil().AsTime().Equal(closed.Since.Add(time.Minute)) {
		t.Errorf("ramp %v until %v, want 0.675 until %v", inv.GetRampProbability(), inv.GetRampUntil().AsTime(), closed.Since.Add(time.Minute))
	}
	clock.Advance(45 * time.Second)
	if inv = v.Snapshot(clock.Now(), src, "inventory-api").GetDependencies()[0]; inv.GetRampUntil() != nil || inv.GetRampProbability() != 0 {
		t.Errorf("after the ramp: %v until %v, want none", inv.GetRampProbability(), inv.GetRampUntil())
	}
}
