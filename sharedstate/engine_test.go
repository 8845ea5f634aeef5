package sharedstate

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

const dep = "shipping-api"

// TestTripRule is the classic rule (breaker.confidence 0), exactly as it was
// before the confidence bound and the fast path.
func TestTripRule(t *testing.T) {
	type load struct {
		node                        string
		successes, failures, slowOK int
	}
	for _, tc := range []struct {
		name     string
		policy   func(p *Policy)
		loads    []load // the first is the engine under test ("a")
		wantOpen bool
		wantWhy  string
	}{
		{"below minimumRequests", nil, []load{{"a", 0, 19, 0}}, false, ""},
		{"at minimumRequests, alone", nil, []load{{"a", 0, 20, 0}}, true, "failure rate 1.00 >= 0.50 over 20 requests from 1 failing node(s)"},
		{"failure rate at threshold", nil, []load{{"a", 10, 10, 0}}, true, "failure rate 0.50"},
		{"failure rate below threshold", nil, []load{{"a", 11, 9, 0}}, false, ""},
		{"slow-call rate", func(p *Policy) { p.Breaker.SlowCallRateThreshold = 0.5 }, []load{{"a", 10, 0, 10}}, true, "slow-call rate 0.50"},
		{"slow calls below threshold", func(p *Policy) { p.Breaker.SlowCallRateThreshold = 0.5 }, []load{{"a", 11, 0, 9}}, false, ""},
		{"pooled across nodes", nil, []load{{"a", 0, 5, 0}, {"b", 0, 5, 0}, {"c", 0, 5, 0}, {"d", 0, 5, 0}}, true, "over 20 requests from 4 failing node(s)"},
		{"one failing node of two is not enough", nil, []load{{"a", 0, 20, 0}, {"b", 20, 0, 0}}, false, ""},
		{"two failing nodes", nil, []load{{"a", 0, 15, 0}, {"b", 5, 10, 0}, {"c", 10, 0, 0}}, true, "from 2 failing node(s)"},
		{"minFailingNodes 3", func(p *Policy) { p.Breaker.MinFailingNodes = 3 }, []load{{"a", 0, 15, 0}, {"b", 0, 15, 0}, {"c", 10, 0, 0}}, false, ""},
		{"a healthy node's stray failure does not make it failing", nil, []load{{"a", 0, 30, 0}, {"b", 29, 1, 0}}, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := NewManualClock(t0)
			e := newTestEngine(t, "a", "", clock, func(c *EngineConfig) {
				c.DefaultPolicy = policyWith(func(p *Policy) {
					p.Breaker.Confidence = 0
					if tc.policy != nil {
						tc.policy(p)
					}
				})
			})
			for i, l := range tc.loads {
				if i == 0 {
					record(t, e, dep, FirstAttempt, Success, l.successes)
					record(t, e, dep, FirstAttempt, Failure, l.failures)
					record(t, e, dep, FirstAttempt, Slow, l.slowOK)
					continue
				}
				e.ApplyRow(NodeWindow{Node: l.node, Dependency: dep, Seq: 1, Counts: Counts{
					FirstAttempts: uint64(l.successes + l.failures + l.slowOK),
					Successes:     uint64(l.successes + l.slowOK), Failures: uint64(l.failures), SlowCalls: uint64(l.slowOK),
				}})
			}
			props := e.Tick()
			if got := len(props) == 1; got != tc.wantOpen {
				t.Fatalf("proposals = %+v, want open=%v", props, tc.wantOpen)
			}
			s := e.Snapshot(dep)
			if !tc.wantOpen {
				if s.State != Closed {
					t.Fatalf("state %v, want closed", s.State)
				}
				return
			}
			p := props[0]
			if p.Generation != 1 || p.State != Open || p.OpenCount != 1 || p.Origin != "a" || !p.Since.Equal(t0) ||
				!strings.Contains(p.Reason, tc.wantWhy) {
				t.Errorf("proposal = %+v, want generation 1, open, openCount 1, origin a, reason ~ %q", p, tc.wantWhy)
			}
			if s.State != Open || s.Generation != 1 {
				t.Errorf("snapshot %+v, want open at generation 1", s)
			}
			if d := e.Decide(dep, FirstAttempt); d != reject(ReasonOpen) {
				t.Errorf("Decide = %v, want reject(open)", d)
			}
			if d := s.DecideFirst(); d != reject(ReasonOpen) {
				t.Errorf("DecideFirst = %v, want reject(open)", d)
			}
			if len(e.Tick()) != 0 {
				t.Error("an open breaker proposed again")
			}
		})
	}
}

// openBreaker trips a lone engine's breaker at the clock's current time.
func openBreaker(t *testing.T, e *Engine) BreakerRecord {
	t.Helper()
	record(t, e, dep, FirstAttempt, Failure, 20)
	props := e.Tick()
	if len(props) != 1 || props[0].State != Open {
		t.Fatalf("breaker did not open: %+v", props)
	}
	return props[0]
}

func TestHalfOpenAndProbes(t *testing.T) {
	// The fleet's breaker stays open for openDuration: 2s by default.
	open := DefaultPolicy().Breaker.FleetOpenDurationFor(1)
	if open != 2*time.Second {
		t.Fatalf("the default fleet open duration is %v, want 2s", open)
	}
	t.Run("turns half-open after its open duration, at Tick, and says so", func(t *testing.T) {
		clock := NewManualClock(t0)
		var changes []string
		e := newTestEngine(t, "a", "", clock, func(c *EngineConfig) { c.OnChange = func(d string) { changes = append(changes, d) } })
		openBreaker(t, e)
		clock.Advance(open - time.Nanosecond)
		e.Tick()
		if s := e.Snapshot(dep); s.State != Open {
			t.Fatalf("state %v before the open duration", s.State)
		}
		changes = nil
		clock.Advance(time.Nanosecond)
		e.Tick()
		s := e.Snapshot(dep)
		if s.State != HalfOpen || !s.ProbePermit || s.ProbeRound != 0 {
			t.Fatalf("snapshot %+v, want half-open with a permit", s)
		}
		if !slices.Equal(changes, []string{dep}) {
			t.Errorf("OnChange calls = %v, want [%s]", changes, dep)
		}
		if d := s.DecideFirst(); d != allowProbe {
			t.Errorf("DecideFirst = %v, want allow-as-probe", d)
		}
	})

	t.Run("probe successes close", func(t *testing.T) {
		clock := NewManualClock(t0)
		e := newTestEngine(t, "a", "", clock, nil)
		openBreaker(t, e)
		clock.Advance(open)
		for i := range 3 {
			if d := e.AcquireProbe(dep); d != allowProbe {
				t.Fatalf("probe %d: AcquireProbe = %v", i, d)
			}
			if d := e.AcquireProbe(dep); d != reject(ReasonHalfOpenNoPermit) {
				t.Fatalf("second concurrent probe: %v, want reject(half-open-no-permit)", d)
			}
			if d := e.Decide(dep, Retry); d != reject(ReasonHalfOpenNoPermit) {
				t.Fatalf("retry while half-open: %v", d)
			}
			rec, ok := e.ProbeResult(dep, true)
			if ok != (i == 2) {
				t.Fatalf("probe %d: proposal %v %+v", i, ok, rec)
			}
			if i == 2 && (rec.Generation != 2 || rec.State != Closed || rec.OpenCount != 0) {
				t.Fatalf("close proposal %+v", rec)
			}
		}
		if s := e.Snapshot(dep); s.State != Closed || s.Generation != 2 {
			t.Fatalf("snapshot %+v, want closed at generation 2", s)
		}
		if props := e.Tick(); len(props) != 1 || props[0].State != Closed {
			t.Fatalf("Tick returned %+v, want the close proposal ProbeResult made", props)
		}
		// The failures that opened the breaker are gone with the old window.
		if f, _ := e.Fleet(dep); f.Node.Failures != 0 {
			t.Errorf("window not reset at close: %+v", f.Node)
		}
		if props := e.Tick(); len(props) != 0 {
			t.Errorf("re-tripped on old failures: %+v", props)
		}
	})

	// A failed probe reopens the fleet's breaker for openDuration ×
	// 2^(openCount-1), capped at fleetMaxOpenDuration (by default 2s, the
	// default openDuration: no doubling).
	for _, tc := range []struct {
		name  string
		cap   time.Duration
		opens []time.Duration // after the first, second and third failed probe
	}{
		{"probe failure reopens for openDuration by default", 0, []time.Duration{2 * time.Second, 2 * time.Second, 2 * time.Second}},
		{"probe failure reopens with a doubled open duration up to fleetMaxOpenDuration", 6 * time.Second, []time.Duration{4 * time.Second, 6 * time.Second, 6 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := NewManualClock(t0)
			e := newTestEngine(t, "a", "", clock, func(c *EngineConfig) {
				if tc.cap > 0 {
					c.DefaultPolicy = policyWith(func(p *Policy) { p.Breaker.FleetMaxOpenDuration = Duration(tc.cap) })
				}
			})
			openBreaker(t, e)
			clock.Advance(5 * time.Second)
			for i, open := range tc.opens {
				record(t, e, dep, FirstAttempt, Rejected, 1) // callers still call: this node is a prober
				e.Tick()
				if d := e.AcquireProbe(dep); d != allowProbe {
					t.Fatalf("failed probe %d: AcquireProbe %v", i+1, d)
				}
				since := clock.Now()
				rec, ok := e.ProbeResult(dep, false)
				if !ok || rec.Generation != uint64(2+i) || rec.State != Open || rec.OpenCount != uint32(2+i) || !rec.Since.Equal(since) || rec.Reason != "probe failed" {
					t.Fatalf("reopen proposal %d: %v %+v", i+1, ok, rec)
				}
				if _, ok := e.ProbeResult(dep, false); ok {
					t.Fatal("a result without a probe in flight made a proposal")
				}
				for _, c := range []struct {
					after time.Duration
					want  BreakerState
				}{{open - time.Millisecond, Open}, {open, HalfOpen}} {
					clock.Set(rec.Since.Add(c.after))
					if e.Tick(); e.Snapshot(dep).State != c.want {
						t.Fatalf("%v after reopen %d: %v, want %v", c.after, i+1, e.Snapshot(dep).State, c.want)
					}
				}
			}
		})
	}

	t.Run("probe slot is released when the round ends, and must fit the round", func(t *testing.T) {
		clock := NewManualClock(t0)
		e := newTestEngine(t, "a", "", clock, nil)
		openBreaker(t, e)
		clock.Advance(open) // round 0: [open, open+5s)
		if d := e.AcquireProbe(dep); d != allowProbe {
			t.Fatal(d)
		}
		clock.Advance(5 * time.Second) // round 1: the unanswered probe is abandoned
		e.Tick()
		if s := e.Snapshot(dep); s.ProbeRound != 1 {
			t.Fatalf("round %d, want 1", s.ProbeRound)
		}
		if _, ok := e.ProbeResult(dep, false); ok {
			t.Fatal("a result from an abandoned round counted")
		}
		clock.Advance(4600 * time.Millisecond) // 400 ms left in round 1 < perAttemptTimeout 500 ms
		if d := e.AcquireProbe(dep); d != reject(ReasonHalfOpenNoPermit) {
			t.Fatalf("a probe that cannot finish in its round: %v", d)
		}
		clock.Advance(400 * time.Millisecond)
		if d := e.AcquireProbe(dep); d != allowProbe {
			t.Fatalf("round 2: %v", d)
		}
	})
}

func TestProbePermitsFollowRendezvousAndRotate(t *testing.T) {
	clock := NewManualClock(t0)
	e := newTestEngine(t, "n00", "", clock, nil)
	var members []string
	seq := uint64(0)
	feed := func() {
		seq++
		for i := 1; i < 10; i++ {
			e.ApplyRow(NodeWindow{Node: fmt.Sprintf("n%02d", i), Dependency: dep, Seq: seq, Counts: Counts{Rejected: 5}})
		}
		// A member without traffic is not eligible.
		e.ApplyRow(NodeWindow{Node: "idle", Dependency: dep, Seq: seq})
	}
	for i := range 10 {
		members = append(members, fmt.Sprintf("n%02d", i))
	}
	feed()
	rec := openBreaker(t, e)
	clock.Set(rec.HalfOpenAt(DefaultPolicy().Breaker))
	held := map[bool]int{}
	ranks := map[int]int{}
	def := DefaultPolicy()
	pat := def.probeStagger()
	for round := uint64(0); round < 48; round++ {
		feed()
		record(t, e, dep, FirstAttempt, Rejected, 1) // this node has callers too
		holders := ProbeHolders(dep, rec.Generation, round, members, 3)
		rank := slices.Index(holders, "n00")
		want := rank >= 0
		// The holder ranked k takes its turn k × probeStagger (1.5s) into
		// the round: at the round's start only the best one may probe.
		for k := range 3 {
			e.Tick()
			s := e.Snapshot(dep)
			if s.State != HalfOpen || s.ProbeRound != round {
				t.Fatalf("round %d: snapshot %+v", round, s)
			}
			turn := want && rank <= k
			if s.ProbePermit != turn {
				t.Fatalf("round %d, %v in: ProbePermit %v, ProbeHolders says rank %d", round, time.Duration(k)*pat, s.ProbePermit, rank)
			}
			wantDecision := reject(ReasonHalfOpenNoPermit)
			if turn {
				wantDecision = allowProbe
			}
			if d := e.Decide(dep, FirstAttempt); d != wantDecision {
				t.Fatalf("round %d, %v in: Decide %v, want %v", round, time.Duration(k)*pat, d, wantDecision)
			}
			clock.Advance(pat)
		}
		held[want]++
		ranks[rank]++
		clock.Advance(5*time.Second - 3*pat)
	}
	if held[true] == 0 || held[false] == 0 || ranks[0] == 0 || ranks[1]+ranks[2] == 0 {
		t.Fatalf("permit never rotated: %v, ranks %v", held, ranks)
	}
}

func TestOverrides(t *testing.T) {
	for _, tc := range []struct {
		name        string
		mode        Mode
		open        bool // trip the breaker first
		override    OverrideState
		wantFirst   Decision
		wantState   BreakerState
		wantRetryOK bool
	}{
		{"forced-open beats closed", ModeEnforce, false, ForcedOpen, reject(ReasonForcedOpen), Closed, false},
		{"forced-open beats shadow", ModeShadow, false, ForcedOpen, reject(ReasonForcedOpen), Closed, false},
		{"forced-closed beats open", ModeEnforce, true, ForcedClosed, allow, Open, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := NewManualClock(t0)
			var changes int
			e := newTestEngine(t, "a", "", clock, func(c *EngineConfig) {
				c.DefaultPolicy = policyWith(func(p *Policy) { p.Breaker.Mode = tc.mode })
				c.OnChange = func(string) { changes++ }
			})
			if tc.open {
				openBreaker(t, e)
			} else {
				record(t, e, dep, FirstAttempt, Success, 100)
			}
			changes = 0
			o := &Override{State: tc.override, Reason: "incident", Actor: "op", Created: t0, Expires: t0.Add(time.Minute)}
			if err := e.SetOverride(dep, o); err != nil {
				t.Fatal(err)
			}
			if changes != 1 {
				t.Errorf("OnChange called %d times, want 1", changes)
			}
			s := e.Snapshot(dep)
			if s.Override != tc.override || s.OverrideReason != "incident" || s.State != tc.wantState {
				t.Fatalf("snapshot %+v", s)
			}
			if d := e.Decide(dep, FirstAttempt); d != tc.wantFirst {
				t.Errorf("Decide = %v, want %v", d, tc.wantFirst)
			}
			if d := s.DecideFirst(); d != tc.wantFirst {
				t.Errorf("DecideFirst = %v, want %v", d, tc.wantFirst)
			}
			if d := e.AcquireRetry(dep); d.Allowed() != tc.wantRetryOK {
				t.Errorf("AcquireRetry = %v, want allowed=%v", d, tc.wantRetryOK)
			}
			if len(e.Tick()) != 0 {
				t.Error("an overridden breaker proposed a record")
			}
			clock.Set(t0.Add(time.Minute)) // expiry
			e.Tick()
			if s := e.Snapshot(dep); s.Override != OverrideNone {
				t.Fatalf("override did not expire: %+v", s)
			}
			if err := e.SetOverride(dep, &Override{State: OverrideNone}); !errors.Is(err, ErrInvalidOverride) {
				t.Errorf("SetOverride(none) = %v", err)
			}
		})
	}
	t.Run("forced-closed keeps the retry budget", func(t *testing.T) {
		e := newTestEngine(t, "a", "", NewManualClock(t0), func(c *EngineConfig) {
			c.DefaultPolicy = policyWith(func(p *Policy) { p.Retry.Budget = BudgetPolicy{Ratio: 0.1} })
		})
		if err := e.SetOverride(dep, &Override{State: ForcedClosed}); err != nil {
			t.Fatal(err)
		}
		record(t, e, dep, FirstAttempt, Failure, 30)
		admitted := 0
		for e.AcquireRetry(dep).Allowed() {
			if admitted++; admitted > 1000 {
				t.Fatal("the retry budget under forced-closed never ran out (1000 retries admitted)")
			}
		}
		if admitted != 3 {
			t.Fatalf("admitted %d retries, want 3 (10%% of 30)", admitted)
		}
		if err := e.SetOverride(dep, nil); err != nil || e.Snapshot(dep).Override != OverrideNone {
			t.Fatalf("clearing: %v", err)
		}
	})
}

func TestShadowMode(t *testing.T) {
	clock := NewManualClock(t0)
	e := newTestEngine(t, "a", "", clock, func(c *EngineConfig) {
		c.DefaultPolicy = policyWith(func(p *Policy) {
			p.Breaker.Mode = ModeShadow
			p.Retry.Budget = BudgetPolicy{Ratio: 0}
		})
	})
	record(t, e, dep, FirstAttempt, Failure, 20)
	props := e.Tick()
	if len(props) != 1 || props[0].State != Open {
		t.Fatalf("shadow mode must still compute and report the transition: %+v", props)
	}
	s := e.Snapshot(dep)
	if s.State != Open || !s.Shadow() {
		t.Fatalf("snapshot %+v", s)
	}
	for _, tc := range []struct {
		name string
		got  Decision
		want Decision
	}{
		{"Decide first attempt", e.Decide(dep, FirstAttempt), Decision{Allow, ReasonOpen}},
		{"DecideFirst", s.DecideFirst(), Decision{Allow, ReasonOpen}},
		{"AcquireRetry", e.AcquireRetry(dep), Decision{Allow, ReasonOpen}},
	} {
		if tc.got != tc.want || !tc.got.Shadowed() {
			t.Errorf("%s = %v, want %v (shadowed)", tc.name, tc.got, tc.want)
		}
	}
	clock.Advance(5 * time.Second)
	if d := e.AcquireProbe(dep); d != allowProbe {
		t.Fatalf("shadow half-open: AcquireProbe = %v", d)
	}
	rec, ok := e.ProbeResult(dep, false)
	if !ok || rec.OpenCount != 2 {
		t.Fatalf("shadow reopen %v %+v", ok, rec)
	}
	// Budget exhaustion is reported, not enforced.
	e2 := newTestEngine(t, "b", "", clock, func(c *EngineConfig) {
		c.DefaultPolicy = policyWith(func(p *Policy) { p.Breaker.Mode = ModeShadow; p.Retry.Budget = BudgetPolicy{} })
	})
	if d := e2.AcquireRetry(dep); d != (Decision{Allow, ReasonBudgetExhausted}) {
		t.Errorf("shadow budget: %v", d)
	}
}

func TestNodeLocalBreaker(t *testing.T) {
	clock := NewManualClock(t0)
	a := newTestEngine(t, "a", "", clock, nil)
	b := newTestEngine(t, "b", "", clock, nil)
	record(t, b, dep, FirstAttempt, Success, 40)
	gossip(b, a)
	record(t, a, dep, FirstAttempt, Failure, 20) // a's NIC is broken

	if props := a.Tick(); len(props) != 0 {
		t.Fatalf("one sick node opened the fleet breaker: %+v", props)
	}
	s := a.Snapshot(dep)
	if s.State != Closed || s.LocalState != Open || !s.LocalOpen() {
		t.Fatalf("snapshot %+v, want fleet closed, local open", s)
	}
	if d := a.Decide(dep, FirstAttempt); d != reject(ReasonOpen) {
		t.Errorf("Decide on the sick node = %v", d)
	}
	gossip(a, b)
	b.Tick()
	if bs := b.Snapshot(dep); bs.State != Closed || bs.LocalState != Closed {
		t.Fatalf("healthy node affected: %+v", bs)
	}
	if rows := b.Rows(dep); len(rows) != 2 || rows[0].Node != "a" || !rows[0].LocalOpen {
		t.Fatalf("the healthy node does not see a's local open: %+v", rows)
	}

	// Half-open with itself as the only prober; a failure doubles the open duration.
	clock.Advance(2 * time.Second)
	a.Tick()
	if s := a.Snapshot(dep); s.LocalState != HalfOpen || !s.ProbePermit || s.DecideFirst() != allowProbe {
		t.Fatalf("after openDuration: %+v", s)
	}
	if d := a.AcquireProbe(dep); d != allowProbe {
		t.Fatal(d)
	}
	if d := a.AcquireProbe(dep); d != reject(ReasonHalfOpenNoPermit) {
		t.Fatalf("second local probe: %v", d)
	}
	if _, ok := a.ProbeResult(dep, false); ok {
		t.Fatal("a node-local transition was proposed to the fleet")
	}
	clock.Advance(4*time.Second - time.Nanosecond)
	a.Tick()
	if s := a.Snapshot(dep); s.LocalState != Open {
		t.Fatalf("reopened breaker half-open before 2×openDuration: %+v", s)
	}
	clock.Advance(time.Nanosecond)
	a.Tick()
	for i := range 3 {
		if d := a.AcquireProbe(dep); d != allowProbe {
			t.Fatalf("probe %d: %v", i, d)
		}
		a.ProbeResult(dep, true)
	}
	if s := a.Snapshot(dep); s.LocalState != Closed {
		t.Fatalf("local breaker did not close: %+v", s)
	}
	if f, _ := a.Fleet(dep); f.Node.Failures != 0 {
		t.Errorf("local window not reset: %+v", f.Node)
	}
	if len(a.Tick()) != 0 || a.Snapshot(dep).LocalState != Closed {
		t.Error("re-tripped")
	}
}

func TestScopes(t *testing.T) {
	t.Run("zone", func(t *testing.T) {
		clock := NewManualClock(t0)
		zonePolicy := func(c *EngineConfig) {
			c.DefaultPolicy = policyWith(func(p *Policy) { p.Breaker.Scope = ScopeZone })
		}
		a := newTestEngine(t, "a", "z1", clock, zonePolicy)
		b := newTestEngine(t, "b", "z1", clock, zonePolicy)
		c := newTestEngine(t, "c", "z2", clock, zonePolicy)
		record(t, a, dep, FirstAttempt, Failure, 10)
		record(t, b, dep, FirstAttempt, Failure, 10)
		record(t, c, dep, FirstAttempt, Success, 100)
		gossip(a, b, c)
		gossip(b, a, c)
		gossip(c, a, b)
		props := a.Tick()
		if len(props) != 1 || props[0].Zone != "z1" {
			t.Fatalf("zone z1 did not open: %+v", props)
		}
		for _, e := range []*Engine{b, c} {
			if !e.ApplyRecord(props[0]) {
				t.Fatalf("%s ignored the record", e.Node())
			}
		}
		if s := b.Snapshot(dep); s.State != Open {
			t.Errorf("b (z1) = %v", s.State)
		}
		if s := c.Snapshot(dep); s.State != Closed {
			t.Errorf("c (z2) = %v; another zone's breaker must not govern it", s.State)
		}
		if recs := c.Records(); len(recs) != 1 || recs[0].Zone != "z1" {
			t.Errorf("c should still hold z1's record for push-pull: %+v", recs)
		}
		if f, _ := c.Fleet(dep); f.Zone.Successes != 100 || f.Fleet.Failures != 20 || f.Evaluated.Failures != 0 {
			t.Errorf("c's totals %+v", f)
		}
	})
	t.Run("node", func(t *testing.T) {
		clock := NewManualClock(t0)
		a := newTestEngine(t, "a", "", clock, func(c *EngineConfig) {
			c.DefaultPolicy = policyWith(func(p *Policy) { p.Breaker.Scope = ScopeNode })
		})
		a.ApplyRow(NodeWindow{Node: "b", Dependency: dep, Seq: 1, Counts: Counts{FirstAttempts: 100, Failures: 100}})
		record(t, a, dep, FirstAttempt, Failure, 19)
		if props := a.Tick(); len(props) != 0 || a.Snapshot(dep).State != Closed {
			t.Fatal("scope node pooled another node's counts")
		}
		record(t, a, dep, FirstAttempt, Failure, 1)
		if props := a.Tick(); len(props) != 0 {
			t.Fatalf("scope node gossiped a record: %+v", props)
		}
		if s := a.Snapshot(dep); s.State != Open || s.LocalState != Closed || s.DecideFirst() != reject(ReasonOpen) {
			t.Fatalf("snapshot %+v", s)
		}
	})
}

func TestRowsStalenessAndDeadMembers(t *testing.T) {
	clock := NewManualClock(t0)
	e := newTestEngine(t, "a", "", clock, nil)
	row := func(node string, seq uint64) NodeWindow {
		return NodeWindow{Node: node, Dependency: dep, Seq: seq, Counts: Counts{FirstAttempts: 1, Successes: 1}}
	}
	fleetNodes := func() int { f, _ := e.Fleet(dep); return f.FleetNodes }

	t.Run("last writer wins by seq", func(t *testing.T) {
		for _, tc := range []struct {
			row  NodeWindow
			want bool
		}{
			{row("b", 5), true}, {row("b", 5), false}, {row("b", 4), false}, {row("b", 6), true},
			{row("a", 99), false}, // our own rows come back through gossip
			{NodeWindow{Node: "", Dependency: dep, Seq: 1}, false},
			{NodeWindow{Node: "c", Dependency: "bad name", Seq: 1}, false},
		} {
			if got := e.ApplyRow(tc.row); got != tc.want {
				t.Errorf("ApplyRow(%s seq %d) = %v, want %v", tc.row.Node, tc.row.Seq, got, tc.want)
			}
		}
		if e.Stats().InvalidRows != 2 {
			t.Errorf("InvalidRows = %d", e.Stats().InvalidRows)
		}
	})
	t.Run("dropped 2×window after receipt", func(t *testing.T) {
		clock.Set(t0)
		e.ApplyRow(row("b", 10))
		for _, tc := range []struct {
			at   time.Duration
			want int
		}{{19999 * time.Millisecond, 1}, {20 * time.Second, 0}} {
			clock.Set(t0.Add(tc.at))
			if got := fleetNodes(); got != tc.want {
				t.Errorf("+%v: %d live nodes, want %d", tc.at, got, tc.want)
			}
		}
		e.Tick()
		if rows := e.Rows(dep); len(rows) != 1 { // just our own
			t.Errorf("stale row not pruned: %+v", rows)
		}
		if !e.ApplyRow(row("b", 11)) || fleetNodes() != 1 {
			t.Error("a fresh row after pruning was refused")
		}
	})
	t.Run("dead members", func(t *testing.T) {
		e.ApplyRow(row("c", 1))
		e.ApplyRow(row("d", 1))
		e.MemberDead("c")
		if fleetNodes() != 2 {
			t.Fatalf("dead member's row still counted: %d", fleetNodes())
		}
		if e.ApplyRow(row("c", 2)) {
			t.Error("accepted a dead member's row")
		}
		e.MemberAlive("c", "")
		if !e.ApplyRow(row("c", 3)) {
			t.Error("refused a row after MemberAlive")
		}
		e.SetMembers([]Member{{Node: "a"}, {Node: "c"}})
		var nodes []string
		for _, r := range e.Rows(dep) {
			nodes = append(nodes, r.Node)
		}
		if !slices.Equal(nodes, []string{"a", "c"}) {
			t.Errorf("after SetMembers rows of %v, want [a c]", nodes)
		}
		if e.ApplyRow(row("d", 9)) {
			t.Error("accepted a row of a member SetMembers dropped")
		}
	})
}

func TestRetryBudget(t *testing.T) {
	for _, tc := range []struct {
		name        string
		budget      BudgetPolicy
		own, others uint64 // first attempts in the window
		othersRetry uint64
		want        int // retries admitted
	}{
		{"ratio", BudgetPolicy{Ratio: 0.1}, 100, 0, 0, 10},
		{"floor", BudgetPolicy{Ratio: 0.1, MinRetriesPerSecond: 2}, 100, 0, 0, 20},
		{"share of the fleet budget", BudgetPolicy{Ratio: 0.1}, 100, 300, 0, 10},
		{"share of the floor", BudgetPolicy{MinRetriesPerSecond: 4}, 25, 75, 0, 10},
		{"fleet already spent the budget", BudgetPolicy{MinRetriesPerSecond: 4}, 25, 75, 40, 0},
		{"even split without traffic", BudgetPolicy{MinRetriesPerSecond: 1}, 0, 0, 0, 10},
		{"nothing", BudgetPolicy{}, 100, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEngine(t, "a", "", NewManualClock(t0), func(c *EngineConfig) {
				c.DefaultPolicy = policyWith(func(p *Policy) { p.Retry.Budget = tc.budget })
			})
			if err := e.SetOverride(dep, &Override{State: ForcedClosed}); err != nil { // keep the breaker out of it
				t.Fatal(err)
			}
			record(t, e, dep, FirstAttempt, Success, int(tc.own))
			if tc.others > 0 || tc.othersRetry > 0 {
				e.ApplyRow(NodeWindow{Node: "b", Dependency: dep, Seq: 1,
					Counts: Counts{FirstAttempts: tc.others, Successes: tc.others, Retries: tc.othersRetry}})
			}
			admitted := 0
			for e.Decide(dep, Retry).Allowed() {
				if !e.AcquireRetry(dep).Allowed() {
					t.Fatal("Decide allowed a retry AcquireRetry refused")
				}
				if admitted++; admitted > 1000 {
					t.Fatal("the retry budget never ran out (1000 retries admitted)")
				}
			}
			if admitted != tc.want {
				t.Fatalf("admitted %d retries, want %d", admitted, tc.want)
			}
			if d := e.AcquireRetry(dep); d != reject(ReasonBudgetExhausted) {
				t.Fatalf("AcquireRetry past the budget = %v", d)
			}
			f, _ := e.Fleet(dep)
			if f.Node.Retries != uint64(tc.want) || f.Node.Rejected != 1 {
				t.Errorf("counted %+v, want %d retries and 1 rejection", f.Node, tc.want)
			}
		})
	}
}

func TestRecordCountingRule(t *testing.T) {
	e := newTestEngine(t, "a", "", NewManualClock(t0), nil)
	for _, tc := range []struct {
		kind AttemptKind
		o    Outcome
		want Counts
	}{
		{FirstAttempt, Success, Counts{FirstAttempts: 1, Successes: 1}},
		{FirstAttempt, Failure, Counts{FirstAttempts: 1, Failures: 1}},
		{FirstAttempt, Slow, Counts{FirstAttempts: 1, Successes: 1, SlowCalls: 1}},
		{FirstAttempt, SlowFailure, Counts{FirstAttempts: 1, Failures: 1, SlowCalls: 1}},
		{FirstAttempt, Rejected, Counts{Rejected: 1}},
		{Retry, Failure, Counts{Failures: 1}},
		{Probe, Success, Counts{Successes: 1}},
		{Retry, Rejected, Counts{Rejected: 1}},
	} {
		d := fmt.Sprintf("dep-%v-%v", tc.kind, tc.o)
		if err := e.Record(d, tc.kind, tc.o); err != nil {
			t.Fatal(err)
		}
		if f, _ := e.Fleet(d); f.Node != tc.want {
			t.Errorf("Record(%v, %v) counted %+v, want %+v", tc.kind, tc.o, f.Node, tc.want)
		}
	}
	if err := e.Record(dep, AttemptKind(9), Success); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Record with a bad kind = %v", err)
	}
	if err := e.AddCounts(dep, Counts{FirstAttempts: 3, Failures: 2, Rejected: 1}); err != nil {
		t.Fatal(err)
	}
	if f, _ := e.Fleet(dep); f.Node != (Counts{FirstAttempts: 3, Failures: 2, Rejected: 1}) {
		t.Errorf("AddCounts counted %+v", f.Node)
	}
}

func TestRowsToSendHeartbeat(t *testing.T) {
	clock := NewManualClock(t0)
	e := newTestEngine(t, "a", "z", clock, nil)
	if rows := e.RowsToSend(); len(rows) != 0 {
		t.Fatalf("nothing to say yet: %+v", rows)
	}
	record(t, e, dep, FirstAttempt, Success, 1)
	rows := e.RowsToSend()
	if len(rows) != 1 || rows[0].Node != "a" || rows[0].Zone != "z" || rows[0].Successes != 1 {
		t.Fatalf("first row %+v", rows)
	}
	first := rows[0].Seq
	if len(e.RowsToSend()) != 0 {
		t.Fatal("unchanged row sent again at once")
	}
	if got := e.LocalRows(); len(got) != 1 || got[0].Seq != first {
		t.Fatalf("LocalRows = %+v", got)
	}
	clock.Advance(5 * time.Second) // window/2: heartbeat due (jitter only shortens the interval)
	rows = e.RowsToSend()
	if len(rows) != 1 || rows[0].Seq <= first {
		t.Fatalf("heartbeat %+v", rows)
	}
	clock.Advance(10 * time.Second) // the count left the window: one zero row, then silence
	if rows = e.RowsToSend(); len(rows) != 1 || !rows[0].Counts.IsZero() {
		t.Fatalf("zero row %+v", rows)
	}
	clock.Advance(time.Minute)
	if rows = e.RowsToSend(); len(rows) != 0 {
		t.Fatalf("idle dependency keeps sending: %+v", rows)
	}
	if len(e.LocalRows()) != 0 {
		t.Fatal("LocalRows reports an all-zero row")
	}
}

func TestPoliciesInEngine(t *testing.T) {
	clock := NewManualClock(t0)
	var changes []string
	e := newTestEngine(t, "a", "", clock, func(c *EngineConfig) { c.OnChange = func(d string) { changes = append(changes, d) } })
	if err := e.SetPolicyDocument(dep, []byte(`{"dependency": "shipping-api", "breaker": {"minimumRequests": 5, "confidence": 0}}`)); err != nil {
		t.Fatal(err)
	}
	if p := e.Policy(dep); p.Breaker.MinimumRequests != 5 || p.Dependency != dep || p.Breaker.Window != Duration(10*time.Second) {
		t.Fatalf("effective policy %+v", p.Breaker)
	}
	record(t, e, dep, FirstAttempt, Failure, 5)
	if len(e.Tick()) != 1 {
		t.Fatal("patched minimumRequests not in effect")
	}

	changes = nil
	def := DefaultPolicy()
	def.Retry.MaxAttempts = 5
	if err := e.SetDefaultPolicy(def); err != nil {
		t.Fatal(err)
	}
	if p := e.Policy(dep); p.Retry.MaxAttempts != 5 || p.Breaker.MinimumRequests != 5 {
		t.Fatalf("re-merge over the new default: %+v", p)
	}
	if s := e.Snapshot(dep); s.Policy.Retry.MaxAttempts != 5 || !slices.Contains(changes, dep) {
		t.Fatalf("snapshot not republished: %+v, changes %v", s.Policy.Retry, changes)
	}

	bad := DefaultPolicy()
	bad.Breaker.FailureRateThreshold = 2
	if err := e.SetPolicy(dep, bad); !errors.Is(err, ErrInvalidPolicy) {
		t.Fatalf("SetPolicy(invalid) = %v", err)
	}
	if e.Policy(dep).Breaker.FailureRateThreshold != 0.5 {
		t.Fatal("invalid policy took effect")
	}
	if err := e.SetPolicyDocument(dep, []byte(`{"dependency": "other"}`)); err == nil {
		t.Fatal("a document naming another dependency accepted")
	}
	// A default that makes the dependency's merged policy invalid is set; the dependency keeps its last good policy.
	if err := e.SetPolicyDocument(dep, []byte(`{"retry": {"perAttemptTimeout": "4s"}}`)); err != nil {
		t.Fatal(err)
	}
	short := DefaultPolicy()
	short.Breaker.ProbeTimeout = Duration(time.Second)
	if err := e.SetDefaultPolicy(short); err == nil || !strings.Contains(err.Error(), dep) {
		t.Fatalf("SetDefaultPolicy = %v, want an error naming %s", err, dep)
	}
	if p := e.Policy(dep); p.Breaker.ProbeTimeout != Duration(5*time.Second) {
		t.Fatalf("dependency did not keep its last good policy: %+v", p.Breaker)
	}
	if p := e.Policy("other-dep"); p.Breaker.ProbeTimeout != Duration(time.Second) {
		t.Fatalf("new default not in effect: %+v", p.Breaker)
	}
	e.RemovePolicy(dep)
	if p := e.Policy(dep); p.Breaker.MinimumRequests != 20 {
		t.Fatalf("after RemovePolicy: %+v", p.Breaker)
	}
}

func TestEvictIdleDependencies(t *testing.T) {
	clock := NewManualClock(t0)
	var changes []string
	e := newTestEngine(t, "a", "", clock, func(c *EngineConfig) { c.OnChange = func(d string) { changes = append(changes, d) } })
	record(t, e, "short-lived", FirstAttempt, Success, 1)
	record(t, e, "tripped", FirstAttempt, Failure, 20)
	e.Tick()
	for range 8 {
		clock.Advance(10 * time.Second)
		e.Tick()
		e.RowsToSend()
	}
	if got := e.Dependencies(); !slices.Equal(got, []string{"tripped"}) {
		t.Fatalf("Dependencies = %v, want only the one with breaker history", got)
	}
	if e.Snapshot("short-lived") != nil || e.Stats().Evicted != 1 || !slices.Contains(changes, "short-lived") {
		t.Fatalf("eviction not visible: %+v", e.Stats())
	}
	if err := e.Record("short-lived", FirstAttempt, Success); err != nil || e.Snapshot("short-lived") == nil {
		t.Fatal("an evicted dependency cannot come back")
	}
}

func TestEngineConfigValidate(t *testing.T) {
	bad := DefaultPolicy()
	bad.Retry.MaxAttempts = 0
	err := EngineConfig{MaxDependencies: -1, DefaultPolicy: &bad}.Validate()
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"Node: is required", "MaxDependencies", "DefaultPolicy: retry.maxAttempts"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	if _, err := NewEngine(EngineConfig{}); err == nil {
		t.Error("NewEngine without a node")
	}
	// Every negative limit, named with its value, in field order.
	err = EngineConfig{Node: "a", MaxDependencies: -1, MaxClockSkew: -time.Second, MaxRowsPerNode: -2, Proposers: -3,
		ProposerDelay: -time.Millisecond, MaxZones: -4, IdleRetention: -time.Minute}.Validate()
	want := `fusebox: invalid engine config:
MaxDependencies: must not be negative, got -1
MaxClockSkew: must not be negative, got -1s
MaxRowsPerNode: must not be negative, got -2
Proposers: must not be negative, got -3
ProposerDelay: must not be negative, got -1ms
MaxZones: must not be negative, got -4
IdleRetention: must not be negative, got -1m0s`
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}

// The rows of a member reported dead stop counting at once and come back
// with it while they are fresh: a member declared dead wrongly refutes
// within seconds, and would otherwise be missing from every table until
// its rows change. Stale ones, and those of a member dead longer than
// dormantRetention, do not come back.
func TestDeadMemberRowsComeBackFresh(t *testing.T) {
	clock := NewManualClock(t0)
	e := newTestEngine(t, "a", "z", clock, nil)
	const dep = "ledger-api"
	row := func(node string, seq uint64) NodeWindow {
		return NodeWindow{Node: node, Dependency: dep, Seq: seq, Counts: Counts{FirstAttempts: 4, Failures: 4}}
	}
	seqOf := func(node string) uint64 {
		for _, r := range e.Rows(dep) {
			if r.Node == node {
				return r.Seq
			}
		}
		return 0
	}
	failures := func() uint64 { f, _ := e.Fleet(dep); return f.Fleet.Failures }
	e.ApplyRow(row("b", 1))
	e.ApplyRow(row("c", 1))
	if failures() != 8 {
		t.Fatalf("fleet failures %d, want 8", failures())
	}
	e.MemberDead("b")
	if seqOf("b") != 0 || failures() != 4 {
		t.Fatalf("a dead member's row still counts: seq %d, fleet failures %d", seqOf("b"), failures())
	}
	if e.ApplyRow(row("b", 2)) {
		t.Fatal("took a dead member's row")
	}
	clock.Advance(time.Second)
	e.MemberAlive("b", "z")
	if seqOf("b") != 1 || failures() != 8 {
		t.Fatalf("back a second later: b's row seq %d, fleet failures %d; want its row back (seq 1), 8", seqOf("b"), failures())
	}
	if !e.ApplyRow(row("b", 3)) || seqOf("b") != 3 {
		t.Fatal("a newer row after the return was not taken")
	}

	// Put back with the time it first arrived: stale when it would have been.
	e.ApplyRow(row("e", 1))
	e.MemberDead("e")
	clock.Advance(15 * time.Second)
	e.MemberAlive("e", "z")
	if seqOf("e") != 1 {
		t.Fatal("e's row did not come back 15 s later")
	}
	clock.Advance(6 * time.Second) // 21 s after it arrived, 6 s after it came back
	e.Tick()
	if seqOf("e") != 0 {
		t.Fatal("a row put back lives on past 2×window after it arrived")
	}

	// Stale by the time it is back: not put back.
	if !e.ApplyRow(row("c", 2)) {
		t.Fatal("c's fresh row was refused")
	}
	e.MemberDead("c")
	clock.Advance(2 * time.Duration(DefaultPolicy().Breaker.Window))
	e.MemberAlive("c", "z")
	d := e.deps.load(dep)
	d.mu.Lock()
	_, held := d.rowIdx["c"]
	d.mu.Unlock()
	if held {
		t.Fatal("a stale row came back")
	}

	// Dead for longer than dormantRetention: forgotten by the next Tick.
	e.ApplyRow(row("d", 1))
	e.MemberDead("d")
	clock.Advance(dormantRetention + time.Second)
	e.Tick()
	e.members.mu.RLock()
	kept := len(e.members.dormant)
	e.members.mu.RUnlock()
	if kept != 0 {
		t.Fatalf("%d dead members' rows kept past dormantRetention", kept)
	}
}
