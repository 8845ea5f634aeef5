package sharedstate

import (
	"math"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func TestWilsonLower(t *testing.T) {
	for _, c := range []struct {
		k, n uint64
		z    float64
		want float64
	}{
		{0, 0, 1.96, 0},
		{0, 10, 1.96, 0},
		{20, 20, 1.96, 20 / (20 + 1.96*1.96)}, // all failures: n/(n+z²)
		{10, 20, 1.96, 0.2993},
		{15, 20, 1.96, 0.5313},
		{500, 1000, 1.96, 0.4691},
		{5, 10, 0, 0.5}, // z 0: the rate itself
	} {
		if got := WilsonLower(c.k, c.n, c.z); math.Abs(got-c.want) > 5e-4 {
			t.Errorf("WilsonLower(%d, %d, %v) = %.4f, want %.4f", c.k, c.n, c.z, got, c.want)
		}
	}
	p := DefaultPolicy()
	z := boundsFor(&p.Breaker)
	if math.Abs(z.whole-2.81) > 0.01 || math.Abs(z.fast-3.38) > 0.01 {
		t.Errorf("bounds at 95%% = %+v, want whole 2.81, fast 3.38", z)
	}
	p.Breaker.Confidence = 0
	if z := boundsFor(&p.Breaker); z != (tripBounds{}) {
		t.Errorf("bounds at confidence 0 = %+v, want none (the classic rule)", z)
	}
}

// TestTripRuleWithConfidence: the bound on the whole window, and the
// classic rule at confidence 0.
func TestTripRuleWithConfidence(t *testing.T) {
	for _, tc := range []struct {
		name                string
		confidence          float64
		successes, failures int
		wantWhy             string // "" for no trip
	}{
		{"10 of 20 at 95%: chance, no trip", 0.95, 10, 10, ""},
		{"16 of 20 at 95%: bound 0.49", 0.95, 4, 16, ""},
		{"17 of 20 at 95%: bound 0.54", 0.95, 3, 17, "window 10s: 17 failures of 20 requests from 1 failing node(s); rate 0.85, lower bound 0.54 at 95% confidence >= 0.50"},
		{"60 of 100 at 95%: bound 0.46", 0.95, 40, 60, ""},
		{"70 of 100 at 95%: bound 0.56", 0.95, 30, 70, "window 10s: 70 failures of 100 requests"},
		{"16 of 20 at 80%: bound 0.54", 0.8, 4, 16, "window 10s: 16 failures of 20 requests"},
		{"10 of 20, classic", 0, 10, 10, "failure rate 0.50 >= 0.50 over 20 requests from 1 failing node(s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := NewManualClock(t0)
			e := newTestEngine(t, "a", "", clock, func(c *EngineConfig) {
				// The window's bound alone (the fast path is TestFastPath's).
				c.DefaultPolicy = policyWith(func(p *Policy) { p.Breaker.Confidence, p.Breaker.FastPath = tc.confidence, false })
			})
			for i := range max(tc.successes, tc.failures) {
				if i < tc.successes {
					record(t, e, dep, FirstAttempt, Success, 1)
				}
				if i < tc.failures {
					record(t, e, dep, FirstAttempt, Failure, 1)
				}
			}
			props := e.Tick()
			switch {
			case tc.wantWhy == "" && len(props) != 0:
				t.Fatalf("tripped: %+v", props)
			case tc.wantWhy != "" && (len(props) != 1 || !strings.Contains(props[0].Reason, tc.wantWhy)):
				t.Fatalf("proposals %+v, want one with reason ~ %q", props, tc.wantWhy)
			}
		})
	}
}

// tickEvery advances the clock by one sub-bucket (100 ms), recording first
// attempts with the given outcomes in its middle, and ticks.
func tickEvery(t tb, e *Engine, clock *ManualClock, successes, failures int) []BreakerRecord {
	clock.Advance(50 * time.Millisecond)
	record(t, e, dep, FirstAttempt, Success, successes)
	record(t, e, dep, FirstAttempt, Failure, failures)
	clock.Advance(50 * time.Millisecond)
	return e.Tick()
}

func TestFastPath(t *testing.T) {
	t.Run("a warm window trips on its freshest suffix, and says which", func(t *testing.T) {
		clock := NewManualClock(t0)
		e := newTestEngine(t, "a", "", clock, nil)
		for range 120 { // 12 s at 10 successes per 100 ms: 1,000 in the window
			if p := tickEvery(t, e, clock, 10, 0); len(p) != 0 {
				t.Fatalf("healthy traffic tripped: %+v", p)
			}
		}
		if p := tickEvery(t, e, clock, 0, 10); len(p) != 0 {
			t.Fatalf("tripped on 10 failures: %+v", p)
		}
		p := tickEvery(t, e, clock, 0, 10)
		if len(p) != 1 || !strings.Contains(p[0].Reason, "fast path, last 200ms: 20 failures of 20 requests from 1 failing node(s)") {
			t.Fatalf("proposals %+v, want the 200ms suffix to trip", p)
		}
	})
	for _, c := range []struct {
		name   string
		policy func(p *Policy)
	}{
		{"the classic rule has no fast path", func(p *Policy) { p.Breaker.Confidence = 0 }},
		{"fastPath false keeps only the window's bound", func(p *Policy) { p.Breaker.FastPath = false }},
	} {
		t.Run(c.name, func(t *testing.T) {
			clock := NewManualClock(t0)
			e := newTestEngine(t, "a", "", clock, func(ec *EngineConfig) { ec.DefaultPolicy = policyWith(c.policy) })
			for range 120 {
				tickEvery(t, e, clock, 10, 0)
			}
			for range 5 {
				if p := tickEvery(t, e, clock, 0, 10); len(p) != 0 {
					t.Fatalf("tripped: %+v", p)
				}
			}
		})
	}
	t.Run("suffixes pool the other nodes' recent counts", func(t *testing.T) {
		clock := NewManualClock(t0)
		e := newTestEngine(t, "a", "", clock, nil)
		var recent Recent
		for k := range recent {
			recent[k] = RecentCounts{Failures: 8}
		}
		clock.Advance(100 * time.Millisecond)
		record(t, e, dep, FirstAttempt, Failure, 4)
		for i, n := range []string{"b", "c"} {
			e.ApplyRow(NodeWindow{Node: n, Dependency: dep, Seq: uint64(i + 1), Counts: Counts{FirstAttempts: 108, Successes: 100, Failures: 8}, Recent: recent})
		}
		p := e.Tick()
		if len(p) != 1 || !strings.Contains(p[0].Reason, "fast path, last 100ms: 20 failures of 20 requests from 3 failing node(s)") {
			t.Fatalf("proposals %+v, want the pooled 100ms suffix to trip", p)
		}
	})
	t.Run("one sick node does not trip the fleet's fast path", func(t *testing.T) {
		clock := NewManualClock(t0)
		e := newTestEngine(t, "a", "", clock, nil)
		e.ApplyRow(NodeWindow{Node: "b", Dependency: dep, Seq: 1, Counts: Counts{FirstAttempts: 100, Successes: 100}})
		p := tickEvery(t, e, clock, 0, 30)
		if len(p) != 0 {
			t.Fatalf("one sick node tripped the fleet: %+v", p)
		}
		if s := e.Snapshot(dep); s.LocalState != Open {
			t.Errorf("the sick node's own breaker is %v, want open (same rule on its own counts)", s.LocalState)
		}
	})
	// A suffix in which only one node has traffic still needs failures from
	// min(minFailingNodes, nodes with requests in the window) nodes: b failed
	// seconds ago (its row counts as failing, but only in its widest
	// suffix), a fails now, and a's fresh burst alone must not trip the
	// fleet (the 6.4s suffix pooling both holds too many successes).
	t.Run("one node's fresh burst does not trip the fleet while another failed only earlier", func(t *testing.T) {
		clock := NewManualClock(t0)
		e := newTestEngine(t, "a", "", clock, nil)
		for range 50 { // 5 s of healthy traffic at a: 200 successes
			if p := tickEvery(t, e, clock, 4, 0); len(p) != 0 {
				t.Fatalf("healthy traffic tripped: %+v", p)
			}
		}
		var earlier Recent
		earlier[FastHorizons-1] = RecentCounts{Failures: 5} // b's failures, 3.2–6.4 s ago
		clock.Advance(50 * time.Millisecond)
		e.ApplyRow(NodeWindow{Node: "b", Dependency: dep, Seq: 1, Counts: Counts{FirstAttempts: 5, Failures: 5}, Recent: earlier})
		record(t, e, dep, FirstAttempt, Failure, 30) // a's burst: 30 of 30 in the last 100 ms
		clock.Advance(50 * time.Millisecond)
		if p := e.Tick(); len(p) != 0 {
			t.Fatalf("a's burst tripped the fleet with one failing node in its suffix: %+v", p)
		}
		if s := e.Snapshot(dep); s.LocalState != Open {
			t.Errorf("a's own breaker is %v, want open (its burst trips its own counts)", s.LocalState)
		}
	})
	t.Run("rows whose suffixes do not nest are refused and counted", func(t *testing.T) {
		e := newTestEngine(t, "a", "", NewManualClock(t0), nil)
		var bad Recent
		bad[0].Failures = 5
		if e.ApplyRow(NodeWindow{Node: "b", Dependency: dep, Seq: 1, Recent: bad}) {
			t.Fatal("accepted")
		}
		if s := e.Stats(); s.InvalidRows != 1 {
			t.Errorf("InvalidRows = %d, want 1", s.InvalidRows)
		}
	})
}

func TestUrgentRows(t *testing.T) {
	clock := NewManualClock(t0)
	e := newTestEngine(t, "a", "", clock, nil)
	tickEvery(t, e, clock, 10, 0)
	e.RowsToSend()
	if u := e.UrgentRows(); len(u) != 0 {
		t.Fatalf("healthy rows urgent: %+v", u)
	}
	tickEvery(t, e, clock, 0, 2)
	rows := e.RowsToSend()
	u := e.UrgentRows()
	if len(u) != 1 || len(rows) != 1 || u[0] != rows[0] || u[0].Recent[0].Failures != 2 {
		t.Fatalf("urgent %+v, rows %+v: want the row with 2 fresh failures", u, rows)
	}
	for range 10 { // within window/2: once is enough
		tickEvery(t, e, clock, 0, 2)
		e.RowsToSend()
		if u := e.UrgentRows(); len(u) != 0 {
			t.Fatalf("urgent again at %v: %+v", clock.Now().Sub(t0), u)
		}
	}
}

// TestPropStepTripsAtFreshestQualifyingSuffix: after healthy traffic, a
// step to failures trips at the first tick at which the rule holds for some
// suffix (or the whole window), never earlier, and the reason names the
// freshest suffix that holds it.
func TestPropStepTripsAtFreshestQualifyingSuffix(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		minReq := rapid.IntRange(5, 60).Draw(t, "minimumRequests")
		conf := rapid.SampledFrom([]float64{0.9, 0.95, 0.99}).Draw(t, "confidence")
		warm := rapid.IntRange(0, 20).Draw(t, "warm successes per 100ms")
		warmTicks := rapid.IntRange(0, 130).Draw(t, "warm ticks")
		clock := NewManualClock(t0)
		e := newTestEngine(t, "a", "", clock, func(c *EngineConfig) {
			c.DefaultPolicy = policyWith(func(p *Policy) { p.Breaker.MinimumRequests, p.Breaker.Confidence = minReq, conf })
		})
		b := e.Policy(dep).Breaker
		z := boundsFor(&b)
		type sub struct{ s, f int }
		var hist []sub
		for range warmTicks {
			hist = append(hist, sub{s: warm})
			if p := tickEvery(t, e, clock, warm, 0); len(p) != 0 {
				t.Fatalf("healthy traffic tripped: %+v", p)
			}
		}
		for i := range 100 {
			f := rapid.IntRange(0, 15).Draw(t, "failures per 100ms")
			hist = append(hist, sub{f: f})
			// What the rule says after this tick: the freshest qualifying suffix.
			want := ""
			var acc sub
			for k, j := 0, 0; k < FastHorizons && j < len(hist); j++ {
				h := hist[len(hist)-1-j]
				acc.s, acc.f = acc.s+h.s, acc.f+h.f
				if j == 1<<k-1 || j == len(hist)-1 {
					n := uint64(acc.s + acc.f)
					if want == "" && n >= uint64(minReq) && acc.f > 0 && WilsonLower(uint64(acc.f), n, z.fast) >= b.FailureRateThreshold {
						want = "fast path, last " + (time.Duration(1<<k) * 100 * time.Millisecond).String() + ":"
					}
					for j == 1<<k-1 {
						k++
					}
				}
			}
			p := tickEvery(t, e, clock, 0, f)
			if want == "" {
				// Only the whole window may trip then, by its own bound.
				w, _ := e.Fleet(dep)
				if len(p) != 0 && !strings.HasPrefix(p[0].Reason, "window") {
					t.Fatalf("tick %d: tripped without a qualifying suffix: %+v (window %+v)", i, p, w.Node)
				}
				if len(p) != 0 {
					return
				}
				continue
			}
			if len(p) != 1 || !strings.HasPrefix(p[0].Reason, want) {
				t.Fatalf("tick %d after the step: proposals %+v, want a trip with reason %q…", i, p, want)
			}
			return
		}
	})
}

// TestPropNoTripBelowThreshold: a fleet whose dependency fails a fraction
// of calls steadily below the threshold never trips, at any horizon, fleet
// or node-local, from a cold start (the long runs are in
// TestSimNoFalseTripsBelowThreshold).
func TestPropNoTripBelowThreshold(t *testing.T) {
	if testing.Short() {
		t.Skip("simulation")
	}
	d := 10 * time.Second
	if raceEnabled {
		d = 2 * time.Second
	}
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 6).Draw(rt, "nodes")
		rate := rapid.Float64Range(0.5, 8).Draw(rt, "requests/s per node")
		p := rapid.Float64Range(0, 0.3).Draw(rt, "failure rate")
		seed := rapid.Uint64().Draw(rt, "seed")
		opens, local, _ := falseTrips(t, n, rate, p, d, seed)
		if opens != 0 || local != 0 {
			rt.Fatalf("%d fleet trips, %d node-local open ticks at %.0f%% failures", opens, local, 100*p)
		}
	})
}
