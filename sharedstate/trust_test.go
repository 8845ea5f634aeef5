package sharedstate

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// The merge rule the record bounds preserve (sharedstate/DESIGN.md, "Breaker records"): the
// newest generation wins; on a tie open beats closed; then the lower origin
// (then the remaining fields, so Merge is the maximum of a total order). The
// bounds (generation at most MaxGeneration, at most MaxGenerationStep past
// the held one, since at most MaxClockSkew ahead) only ever refuse a record;
// they never change one. So:
//
//   - on admissible records Merge stays commutative, associative and
//     idempotent (a semilattice), generations included up to MaxGeneration;
//   - a refused record changes nothing;
//   - replicas that receive the same admissible records in any order, with
//     duplicates, hold the same record (their join);
//   - no record, admitted or proposed, ever carries a generation past
//     MaxGeneration, so generation+1 never wraps.
func genBoundedRecord(t *rapid.T, label string) BreakerRecord {
	gen := rapid.OneOf(
		rapid.Uint64Range(0, 4),
		rapid.Uint64Range(DefaultMaxGenerationStep-2, DefaultMaxGenerationStep+2),
		rapid.Uint64Range(MaxGeneration-2, math.MaxUint64),
	).Draw(t, label+"-gen")
	return BreakerRecord{
		Dependency: "d",
		Generation: gen,
		State:      rapid.SampledFrom([]BreakerState{Closed, Open}).Draw(t, label+"-state"),
		Since:      t0.Add(time.Duration(rapid.IntRange(-2, 3).Draw(t, label+"-since")) * DefaultMaxClockSkew),
		OpenCount:  uint32(rapid.IntRange(0, 2).Draw(t, label+"-openCount")),
		Origin:     rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, label+"-origin"),
	}
}

func TestBoundedMergeLaws(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a, b, c := genBoundedRecord(t, "a"), genBoundedRecord(t, "b"), genBoundedRecord(t, "c")
		for _, r := range []BreakerRecord{a, b, c} {
			if r.Generation > MaxGeneration {
				return // refused before any merge (checked below)
			}
		}
		if !SameRecord(Merge(a, b), Merge(b, a)) {
			t.Fatalf("not commutative")
		}
		if !SameRecord(Merge(Merge(a, b), c), Merge(a, Merge(b, c))) {
			t.Fatalf("not associative")
		}
		if !SameRecord(Merge(a, a), a) {
			t.Fatalf("not idempotent")
		}
	})
}

// admissible is the engine's rule for one record against the held one.
func admissible(held, r BreakerRecord, now time.Time) bool {
	return r.Generation <= MaxGeneration &&
		(r.Generation <= held.Generation || r.Generation-held.Generation <= DefaultMaxGenerationStep) &&
		!r.Since.After(now.Add(DefaultMaxClockSkew))
}

func TestBoundedApplyConverges(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		recs := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) BreakerRecord { return genBoundedRecord(t, "r") }), 1, 8).Draw(t, "records")
		clock := NewManualClock(t0)
		replica := func(order []BreakerRecord) *Engine {
			e := newTestEngine(t, "self", "", clock, nil)
			for _, r := range order {
				before := e.Records()
				held := BreakerRecord{Dependency: "d"}
				if len(before) > 0 {
					held = before[0]
				}
				changed, err := e.MergeRecord(r)
				after := e.Records()
				want := admissible(held, r, clock.Now())
				if want != (err == nil) {
					t.Fatalf("record gen %d since %s against held gen %d: err = %v, admissible %v", r.Generation, r.Since, held.Generation, err, want)
				}
				if err != nil && (changed || fmt.Sprint(before) != fmt.Sprint(after)) {
					t.Fatalf("a refused record changed the state (%v)", err)
				}
				if err == nil && len(after) > 0 && !SameRecord(after[0], Merge(held, r)) {
					t.Fatalf("held %+v, want Merge = %+v", after[0], Merge(held, r))
				}
				for _, h := range after {
					if h.Generation > MaxGeneration {
						t.Fatalf("held generation %d past MaxGeneration", h.Generation)
					}
				}
			}
			return e
		}
		// Records admissible from the start, in any order and duplicated,
		// give every replica the same record: their join.
		var base []BreakerRecord
		join := BreakerRecord{Dependency: "d"}
		for _, r := range recs {
			if admissible(BreakerRecord{Dependency: "d"}, r, clock.Now()) {
				base = append(base, r)
				join = Merge(join, r)
			}
		}
		if len(base) == 0 {
			return
		}
		a := replica(rapid.Permutation(base).Draw(t, "orderA"))
		b := replica(append(rapid.Permutation(base).Draw(t, "orderB"), base...))
		ra, rb := a.Records(), b.Records()
		if join.Generation == 0 && join.State == Closed && len(ra) == 0 {
			return
		}
		if len(ra) != 1 || len(rb) != 1 || !SameRecord(ra[0], rb[0]) || !SameRecord(ra[0], join) {
			t.Fatalf("replicas differ: %+v / %+v, join %+v", ra, rb, join)
		}
	})
}

func TestRecordBoundsRefused(t *testing.T) {
	clock := NewManualClock(t0)
	zonePol := policyWith(func(p *Policy) { p.Breaker.Scope = ScopeZone })
	for _, tc := range []struct {
		name   string
		setup  func(e *Engine)
		rec    BreakerRecord
		reason string
	}{
		{"the forged record of the issue: generation 2^64-1, open, year 2262",
			nil, BreakerRecord{Generation: math.MaxUint64, State: Open, Since: time.Unix(0, math.MaxInt64), Origin: "x"}, "generation_max"},
		{"a jump past the step from 0",
			nil, BreakerRecord{Generation: MaxGeneration, State: Open, Since: t0, Origin: "x"}, "generation_jump"},
		{"a jump past the step from a held generation",
			func(e *Engine) {
				if _, err := e.MergeRecord(BreakerRecord{Dependency: "d", Generation: 10, State: Closed, Since: t0, Origin: "x"}); err != nil {
					panic(err)
				}
			}, BreakerRecord{Generation: 11 + DefaultMaxGenerationStep, State: Open, Since: t0, Origin: "x"}, "generation_jump"},
		{"since past the clock skew",
			nil, BreakerRecord{Generation: 1, State: Open, Since: t0.Add(DefaultMaxClockSkew + time.Second), Origin: "x"}, "since_future"},
		{"a zone record under a fleet policy",
			nil, BreakerRecord{Zone: "z1", Generation: 1, State: Open, Since: t0, Origin: "x"}, "zone_scope"},
		{"a zone past MaxZones",
			func(e *Engine) {
				if err := e.SetPolicy("d", *zonePol); err != nil {
					panic(err)
				}
				for i := range DefaultMaxZones {
					if _, err := e.MergeRecord(BreakerRecord{Dependency: "d", Zone: fmt.Sprint("z", i), Generation: 1, State: Open, Since: t0, Origin: "x"}); err != nil {
						panic(err)
					}
				}
			}, BreakerRecord{Zone: "one-more", Generation: 1, State: Open, Since: t0, Origin: "x"}, "too_many_zones"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEngine(t, "self", "", clock, nil)
			if tc.setup != nil {
				tc.setup(e)
			}
			before := fmt.Sprint(e.Records())
			tc.rec.Dependency = "d"
			changed, err := e.MergeRecord(tc.rec)
			if changed || RefusalReason(err) != tc.reason {
				t.Fatalf("MergeRecord = %v, %v (reason %q), want refused with %q", changed, err, RefusalReason(err), tc.reason)
			}
			if after := fmt.Sprint(e.Records()); after != before {
				t.Fatalf("records changed: %s -> %s", before, after)
			}
			if s := e.Snapshot("d"); s != nil && s.State != Closed {
				t.Fatalf("breaker %s after a refused record", s.State)
			}
		})
	}
	// A proposal at the top generation is not made: generations never wrap.
	e := newTestEngine(t, "self", "", clock, func(c *EngineConfig) { c.MaxGenerationStep = math.MaxUint64 })
	if _, err := e.MergeRecord(BreakerRecord{Dependency: "d", Generation: MaxGeneration, State: Closed, Since: t0, Origin: "x"}); err != nil {
		t.Fatal(err)
	}
	record(t, e, "d", FirstAttempt, Failure, 100)
	e.Tick()
	if r := e.Records(); len(r) != 1 || r[0].Generation != MaxGeneration || r[0].State != Closed {
		t.Fatalf("records at the top generation: %+v", r)
	}
}

func TestCountsSaturate(t *testing.T) {
	// The delta of the issue: successes 2^64-6, failures 30.
	clock := NewManualClock(t0)
	e := newTestEngine(t, "self", "", clock, nil)
	err := e.AddCounts("d", Counts{FirstAttempts: 30, Successes: math.MaxUint64 - 5, Failures: 30})
	if !errors.Is(err, ErrInvalidDelta) || RefusalReason(err) != "invalid_delta" {
		t.Fatalf("AddCounts(huge) = %v, want ErrInvalidDelta", err)
	}
	if err := e.AddCounts("d", Counts{Successes: 1, SlowCalls: 5}); !errors.Is(err, ErrInvalidDelta) {
		t.Fatalf("more slow calls than requests: %v", err)
	}
	if ft, _ := e.Fleet("d"); ft.Node.Requests() != 0 {
		t.Fatalf("refused deltas were counted: %+v", ft.Node)
	}
	if s := e.Snapshot("d"); s != nil && s.State != Closed {
		t.Fatalf("breaker not closed: %+v", s)
	}

	rapid.Check(t, func(t *rapid.T) {
		big := rapid.OneOf(rapid.Uint64Range(0, 100), rapid.Uint64Range(MaxCount-100, math.MaxUint64))
		c := Counts{Successes: big.Draw(t, "s"), Failures: big.Draw(t, "f"), SlowCalls: big.Draw(t, "slow")}
		o := Counts{Successes: big.Draw(t, "s2"), Failures: big.Draw(t, "f2"), SlowCalls: big.Draw(t, "slow2")}
		sum := c.Plus(o)
		for _, v := range []uint64{sum.Successes, sum.Failures, sum.SlowCalls} {
			if v > MaxCount && v != c.Successes+o.Successes {
				t.Fatalf("sum %d past MaxCount", v)
			}
		}
		if sum.Successes < min(c.Successes, MaxCount) || sum.Failures < min(c.Failures, MaxCount) {
			t.Fatalf("a sum wrapped: %+v + %+v = %+v", c, o, sum)
		}
		for _, r := range []float64{c.FailureRate(), c.SlowCallRate(), sum.FailureRate(), sum.SlowCallRate()} {
			if r < 0 || r > 1 || math.IsNaN(r) {
				t.Fatalf("rate %v outside [0,1] for %+v / %+v", r, c, sum)
			}
		}
	})

	// Window counters saturate under valid deltas too.
	w := NewWindow(10 * time.Second)
	b := w.slot(t0.UnixNano())
	b.c[cFailures].Store(MaxCount - 3)
	w.Add(t0, Counts{Failures: MaxDelta, Successes: 1})
	if got := w.Totals(t0); got.Failures != MaxCount || got.FailureRate() > 1 {
		t.Fatalf("window totals %+v, want failures saturated at MaxCount", got)
	}
}

// TestScanSaturates: the scan sums the rows' counts in place, and the sum
// saturates at MaxCount like Plus: two rows claiming 2^64−1 failures each
// make MaxCount failures, not a wrapped 2^64−2 (nor the trip rule's rate
// of a wrapped count).
func TestScanSaturates(t *testing.T) {
	e := newTestEngine(t, "self", "", NewManualClock(t0), nil)
	big := Counts{FirstAttempts: math.MaxUint64, Successes: math.MaxUint64, Failures: math.MaxUint64,
		SlowCalls: math.MaxUint64, Retries: math.MaxUint64, Rejected: math.MaxUint64}
	for i, n := range []string{"b", "c"} {
		if !e.ApplyRow(NodeWindow{Node: n, Dependency: "d", Seq: uint64(i + 1), Counts: big}) {
			t.Fatalf("row of %s refused", n)
		}
	}
	f, ok := e.Fleet("d")
	if !ok {
		t.Fatal("dependency not tracked")
	}
	want := Counts{FirstAttempts: MaxCount, Retries: MaxCount, Successes: MaxCount, Failures: MaxCount, SlowCalls: MaxCount, Rejected: MaxCount}
	for name, got := range map[string]Counts{"fleet": f.Fleet, "zone": f.Zone, "evaluated": f.Evaluated} {
		if got != want {
			t.Errorf("%s totals %+v, want every count saturated at MaxCount", name, got)
		}
	}
}

// TestSatAddExact: satAdd is branch-free (scans run it for every count of
// every row); it must still be the exact sum, capped at MaxCount, for every
// pair of operands, those whose sum wraps a uint64 included.
func TestSatAddExact(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		v := rapid.OneOf(rapid.Uint64Range(0, 1000), rapid.Uint64Range(MaxCount-1000, MaxCount+1000),
			rapid.Uint64Range(math.MaxUint64-1000, math.MaxUint64), rapid.Uint64())
		a, b := v.Draw(t, "a"), v.Draw(t, "b")
		want := a + b
		if want < a || want > MaxCount { // wrapped, or past the cap
			want = MaxCount
		}
		if got := satAdd(a, b); got != want {
			t.Fatalf("satAdd(%d, %d) = %d, want %d", a, b, got, want)
		}
	})
}

func TestRowsBounded(t *testing.T) {
	clock := NewManualClock(t0)
	e := newTestEngine(t, "self", "", clock, func(c *EngineConfig) { c.MaxDependencies = 100; c.MaxRowsPerNode = 10 })
	for i := range 20 {
		_, err := e.MergeRow(NodeWindow{Node: "peer", Dependency: fmt.Sprint("dep", i), Seq: 1, Counts: Counts{Successes: 1}})
		if (i < 10) != (err == nil) || (err != nil && RefusalReason(err) != "too_many_rows") {
			t.Fatalf("row %d: err = %v", i, err)
		}
	}
	// Other nodes' rows may fill 9/10 of MaxDependencies, never the room of
	// this node's own clients.
	for n := range 20 {
		for i := range 10 {
			e.MergeRow(NodeWindow{Node: fmt.Sprint("n", n), Dependency: fmt.Sprintf("r%d-%d", n, i), Seq: 1})
		}
	}
	if got := e.Stats().Dependencies; got != 90 {
		t.Fatalf("remote rows made %d dependencies, want 90 (9/10 of 100)", got)
	}
	for i := range 10 {
		if err := e.Record(fmt.Sprint("local", i), FirstAttempt, Success); err != nil {
			t.Fatalf("local dependency %d refused: %v", i, err)
		}
	}
	// A row leaving frees its node's slot.
	e.MemberDead("peer")
	clock.Advance(2 * time.Duration(DefaultPolicy().Breaker.Window)) // its rows stale: not put back
	e.MemberAlive("peer", "")
	if _, err := e.MergeRow(NodeWindow{Node: "peer", Dependency: "dep15", Seq: 2}); err != nil {
		t.Fatalf("after peer's rows were dropped: %v", err)
	}
}

// At most Proposers nodes propose one trip: 40 engines that all see the same
// pooled failures, with the same membership, make at most 3 proposals.
func TestAtMostKProposers(t *testing.T) {
	const n = 40
	clock := NewManualClock(t0)
	var engines []*Engine
	var members []Member
	for i := range n {
		members = append(members, Member{Node: fmt.Sprintf("agent-%02d", i)})
	}
	for i := range n {
		e := newTestEngine(t, members[i].Node, "", clock, nil)
		e.SetMembers(members)
		engines = append(engines, e)
	}
	for _, e := range engines {
		record(t, e, "dep", FirstAttempt, Failure, 3)
	}
	gossipAll(engines)
	proposed := 0
	for _, e := range engines {
		proposed += len(e.Tick())
	}
	if proposed < 1 || proposed > DefaultProposers {
		t.Fatalf("%d of %d engines proposed the trip, want 1..%d", proposed, n, DefaultProposers)
	}
	// Had the proposers' record been lost, the next rank group proposes
	// after ProposerDelay, not before.
	clock.Advance(DefaultProposerDelay / 2)
	late := 0
	for _, e := range engines {
		if len(e.Records()) == 0 {
			late += len(e.Tick())
		}
	}
	if late != 0 {
		t.Fatalf("%d engines proposed before ProposerDelay", late)
	}
	clock.Advance(DefaultProposerDelay)
	for _, e := range engines {
		if len(e.Records()) == 0 {
			late += len(e.Tick())
		}
	}
	if late < 1 || late > DefaultProposers {
		t.Fatalf("after ProposerDelay %d more engines proposed, want 1..%d", late, DefaultProposers)
	}
}

// A wall-clock step of an hour, back or forward, in the middle of a failing
// window changes no decision: the breaker still trips on the failures from
// both sides of the step, and the retry budget still bounds retries. (Before,
// a step back put counts in "future" buckets that Tick never saw: 100
// failures did not trip and the budget admitted 500 of 500 retries.)
func TestWallClockSteps(t *testing.T) {
	for _, step := range []time.Duration{-time.Hour, time.Hour} {
		t.Run(step.String(), func(t *testing.T) {
			clock := NewManualClock(t0)
			pol := policyWith(func(p *Policy) {
				p.Breaker.MinimumRequests = 100
				p.Retry.Budget = BudgetPolicy{Ratio: 0.1, MinRetriesPerSecond: 0.1}
			})
			e := newTestEngine(t, "self", "", clock, func(c *EngineConfig) { c.DefaultPolicy = pol })
			record(t, e, "breaker", FirstAttempt, Failure, 50)
			record(t, e, "budget", FirstAttempt, Success, 50)
			clock.Advance(time.Second)
			clock.Step(step)
			e.Tick()
			record(t, e, "breaker", FirstAttempt, Failure, 50)
			record(t, e, "budget", FirstAttempt, Success, 50)
			clock.Advance(time.Second)
			if recs := e.Tick(); len(recs) != 1 || recs[0].State != Open {
				t.Fatalf("100 failures across a %v step: proposals %+v, want the trip", step, recs)
			}
			admitted := 0
			for range 500 {
				if e.AcquireRetry("budget").Verdict == Allow {
					admitted++
				}
			}
			// budget = max(0.1/s × 10 s, 0.1 × 100 first attempts) = 10
			if admitted > 10 {
				t.Fatalf("the budget admitted %d of 500 retries across a %v step, want at most 10", admitted, step)
			}
			// The open duration runs on the same time: still open 1 s later,
			// half-open after openDuration, whatever the wall clock says.
			clock.Step(-step)
			clock.Advance(time.Second)
			e.Tick()
			if s := e.Snapshot("breaker"); s.State != Open {
				t.Fatalf("state %s 1 s after the trip", s.State)
			}
			clock.Advance(pol.Breaker.OpenDuration.Std())
			e.Tick()
			if s := e.Snapshot("breaker"); s.State != HalfOpen {
				t.Fatalf("state %s after the open duration", s.State)
			}
		})
	}
}
