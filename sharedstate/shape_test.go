package sharedstate

import (
	"math"
	"testing"
	"time"
)

func TestThrottleProbability(t *testing.T) {
	tp := ThrottlePolicy{Enabled: true, K: 2, MinRequests: 10}
	for _, tc := range []struct {
		name string
		c    Counts
		want float64
	}{
		{"nothing", Counts{}, 0},
		{"below minRequests", Counts{Failures: 9}, 0},
		{"all fail", Counts{Failures: 99}, 99.0 / 100},
		{"healthy", Counts{Successes: 100}, 0},
		{"half fail: k=2 lets it through", Counts{Successes: 50, Failures: 50}, 0},
		{"a quarter answered", Counts{Successes: 25, Failures: 75}, (100 - 50) / 101.0},
		{"refusals are requests", Counts{Successes: 25, Failures: 25, Rejected: 50}, (100 - 50) / 101.0},
		{"saturated counts", Counts{Failures: math.MaxUint64, Rejected: 5}, math.MaxUint64 / (math.MaxUint64 + 1.0)},
	} {
		if got := tp.ThrottleProbability(tc.c); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: ThrottleProbability(%+v) = %v, want %v", tc.name, tc.c, got, tc.want)
		}
	}
}

func TestConcurrencyShare(t *testing.T) {
	for _, tc := range []struct {
		max         int
		own, scope  uint64
		active      int
		want        int
		description string
	}{
		{0, 5, 10, 2, 0, "no limit"},
		{100, 25, 100, 4, 25, "proportional"},
		{100, 0, 100, 4, 1, "no traffic of its own: the floor"},
		{3, 1, 1000, 10, 1, "a tiny share: the floor"},
		{100, 0, 0, 4, 25, "nobody has traffic: even split"},
		{100, 0, 0, 0, 100, "alone"},
		{10, 50, 10, 1, 10, "own above scope (stale rows): even split"},
	} {
		if got := ConcurrencyShare(tc.max, tc.own, tc.scope, tc.active); got != tc.want {
			t.Errorf("%s: ConcurrencyShare(%d, %d, %d, %d) = %d, want %d", tc.description, tc.max, tc.own, tc.scope, tc.active, got, tc.want)
		}
	}
}

// Two nodes: the throttle probability comes from the fleet's totals, the
// concurrency limit is shared by traffic, and in-flight counts travel with
// the rows.
func TestShapeFromFleetTotals(t *testing.T) {
	clock := NewManualClock(t0)
	pol := policyWith(func(p *Policy) {
		p.Throttle = ThrottlePolicy{Enabled: true, K: 2, MinRequests: 20}
		p.Concurrency.MaxInFlight = 40
		p.Breaker.MinimumRequests = 1_000_000 // keep the breaker closed
	})
	mk := func(n string) *Engine {
		return newTestEngine(t, n, "", clock, func(c *EngineConfig) { c.DefaultPolicy = pol })
	}
	a, b := mk("a"), mk("b")
	const dep = "api"
	// a: 30 first attempts, 10 answered; b: 10 first attempts, all failed.
	record(t, a, dep, FirstAttempt, Success, 10)
	record(t, a, dep, FirstAttempt, Failure, 20)
	record(t, b, dep, FirstAttempt, Failure, 10)
	if err := a.SetInFlight(dep, 7); err != nil {
		t.Fatal(err)
	}
	if err := b.SetInFlight(dep, 3); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		for _, e := range []*Engine{a, b} {
			e.Tick()
		}
		for _, r := range a.RowsToSend() {
			b.ApplyRow(r)
		}
		for _, r := range b.RowsToSend() {
			a.ApplyRow(r)
		}
	}
	// Fleet: 40 requests, 10 accepts: (40 − 20) / 41.
	want := quantize(20.0 / 41)
	for _, e := range []*Engine{a, b} {
		s := e.Snapshot(dep)
		if s.ThrottleProbability != want {
			t.Errorf("%s: ThrottleProbability = %v, want %v", e.Node(), s.ThrottleProbability, want)
		}
		sh, _ := e.Shape(dep)
		if sh.InFlight != 10 || math.Abs(sh.ThrottleProbability-20.0/41) > 1e-12 || sh.MaxInFlight != 40 {
			t.Errorf("%s: Shape = %+v, want 10 in flight, raw probability %v", e.Node(), sh, 20.0/41)
		}
	}
	if got := a.Snapshot(dep).ConcurrencyLimit; got != 30 {
		t.Errorf("a: ConcurrencyLimit = %d, want 40 × 30/40 = 30", got)
	}
	if got := b.Snapshot(dep).ConcurrencyLimit; got != 10 {
		t.Errorf("b: ConcurrencyLimit = %d, want 40 × 10/40 = 10", got)
	}

	// Decide applies the probability to first attempts only.
	rejected := 0
	for range 2000 {
		d := a.Decide(dep, FirstAttempt)
		if d.Verdict == Reject {
			if d.Reason != ReasonThrottled {
				t.Fatalf("Decide = %v, want a throttled rejection", d)
			}
			rejected++
		}
	}
	if r := float64(rejected); r < 2000*want/2 || r > 2000*(want+1)/2 {
		t.Errorf("Decide refused %d of 2000 at probability %v", rejected, want)
	}
	if d := a.Decide(dep, Probe); d != allow {
		t.Errorf("Decide(Probe) on a closed breaker = %v, want allow", d)
	}

	// Shadow mode publishes the probability but DecideFirstAt allows.
	shadow := *pol
	shadow.Breaker.Mode = ModeShadow
	if err := a.SetDefaultPolicy(shadow); err != nil {
		t.Fatal(err)
	}
	a.Tick()
	s := a.Snapshot(dep)
	if s.ThrottleProbability != want {
		t.Fatalf("shadow: ThrottleProbability = %v, want %v", s.ThrottleProbability, want)
	}
	if d := s.DecideFirstAt(0); d.Verdict != Allow || d.Reason != ReasonThrottled || !d.Shadowed() {
		t.Errorf("shadow: DecideFirstAt(0) = %v, want allow(throttled)", d)
	}

	// An override lifts the throttle (not the concurrency limit).
	if err := b.SetOverride(dep, &Override{State: ForcedClosed, Reason: "test", Created: clock.Now()}); err != nil {
		t.Fatal(err)
	}
	if s := b.Snapshot(dep); s.ThrottleProbability != 0 || s.ConcurrencyLimit != 10 {
		t.Errorf("forced closed: probability %v, limit %d; want 0 and 10", s.ThrottleProbability, s.ConcurrencyLimit)
	}

	// Turned off, nothing is published.
	off := *pol
	off.Throttle.Enabled = false
	off.Concurrency.MaxInFlight = 0
	if err := a.SetDefaultPolicy(off); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Millisecond)
	a.Tick()
	if s := a.Snapshot(dep); s.ThrottleProbability != 0 || s.ConcurrencyLimit != 0 {
		t.Errorf("off: probability %v, limit %d", s.ThrottleProbability, s.ConcurrencyLimit)
	}
}

func TestDecideFirstAtAllocatesNothing(t *testing.T) {
	p := DefaultPolicy()
	s := &Snapshot{State: Closed, ThrottleProbability: 0.5, Policy: &p}
	n := testing.AllocsPerRun(1000, func() {
		_ = s.DecideFirstAt(0.1)
		_ = s.DecideFirstAt(0.9)
	})
	if n != 0 {
		t.Errorf("DecideFirstAt allocates %v times", n)
	}
	if d := s.DecideFirstAt(0.1); d.Verdict != Reject || d.Reason != ReasonThrottled {
		t.Errorf("DecideFirstAt(0.1) = %v", d)
	}
	if d := s.DecideFirstAt(0.5); d != allow {
		t.Errorf("DecideFirstAt(0.5) = %v", d)
	}
	open := &Snapshot{State: Open, ThrottleProbability: 0.5}
	if d := open.DecideFirstAt(0.9); d.Reason != ReasonOpen {
		t.Errorf("open: DecideFirstAt = %v, want the breaker's rejection", d)
	}
}
