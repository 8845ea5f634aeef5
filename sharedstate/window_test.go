package sharedstate

import (
	"testing"
	"time"
)

func TestWindowSlides(t *testing.T) {
	w := NewWindow(10 * time.Second) // 1 s buckets
	w.Add(t0, Counts{FirstAttempts: 1, Failures: 1})
	w.Add(t0.Add(500*time.Millisecond), Counts{Successes: 2})
	w.Add(t0.Add(3*time.Second), Counts{Retries: 1, SlowCalls: 1, Rejected: 4})
	for _, tc := range []struct {
		at   time.Duration
		want Counts
	}{
		{0, Counts{FirstAttempts: 1, Failures: 1, Successes: 2}}, // same bucket as +500ms
		{999 * time.Millisecond, Counts{FirstAttempts: 1, Failures: 1, Successes: 2}},
		{3 * time.Second, Counts{FirstAttempts: 1, Failures: 1, Successes: 2, Retries: 1, SlowCalls: 1, Rejected: 4}},
		{9999 * time.Millisecond, Counts{FirstAttempts: 1, Failures: 1, Successes: 2, Retries: 1, SlowCalls: 1, Rejected: 4}},
		{10 * time.Second, Counts{Retries: 1, SlowCalls: 1, Rejected: 4}}, // the first bucket left the window
		{13 * time.Second, Counts{}},
	} {
		if got := w.Totals(t0.Add(tc.at)); got != tc.want {
			t.Errorf("Totals(+%v) = %+v, want %+v", tc.at, got, tc.want)
		}
	}
	// A bucket is reused a window later, cleared first.
	w.Add(t0.Add(20*time.Second), Counts{Successes: 7})
	if got := w.Totals(t0.Add(20 * time.Second)); got != (Counts{Successes: 7}) {
		t.Errorf("reused bucket = %+v", got)
	}
}

func TestCountsRates(t *testing.T) {
	c := Counts{Successes: 3, Failures: 1, SlowCalls: 2}
	if c.Requests() != 4 || c.FailureRate() != 0.25 || c.SlowCallRate() != 0.5 {
		t.Errorf("rates of %+v: %d %v %v", c, c.Requests(), c.FailureRate(), c.SlowCallRate())
	}
	if (Counts{}).FailureRate() != 0 || !(Counts{}).IsZero() {
		t.Error("zero counts")
	}
}

func TestRecordAllocatesNothing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		clock Clock
	}{{"manual clock", NewManualClock(t0)}, {"system clock", SystemClock{}}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEngine(t, "a", "", tc.clock, nil)
			if err := e.Record("dep", FirstAttempt, Success); err != nil {
				t.Fatal(err)
			}
			allocs := testing.AllocsPerRun(1000, func() {
				_ = e.Record("dep", FirstAttempt, Failure)
				_ = e.Record("dep", Retry, Slow)
				_ = e.AddCounts("dep", Counts{FirstAttempts: 2, Successes: 2})
				_ = e.Decide("dep", FirstAttempt)
				_ = e.Snapshot("dep").DecideFirst()
			})
			if allocs != 0 {
				t.Fatalf("hot paths allocate %v times per run", allocs)
			}
		})
	}
}
