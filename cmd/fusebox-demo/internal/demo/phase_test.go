package demo

import (
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate"
)

func TestSchedule(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := schedule{start: start, length: 10 * time.Second}
	cases := []struct {
		after time.Duration
		index int
		phase Phase
	}{
		{-time.Second, 0, Healthy},
		{0, 0, Healthy},
		{9999 * time.Millisecond, 0, Healthy},
		{10 * time.Second, 1, Failing},
		{25 * time.Second, 2, Slow},
		{39 * time.Second, 3, Recovering},
		{40 * time.Second, 4, Healthy},
		{55 * time.Second, 5, Failing},
	}
	for _, c := range cases {
		at := start.Add(c.after)
		if got := s.index(at); got != c.index {
			t.Errorf("index(+%v) = %d, want %d", c.after, got, c.index)
		}
		if got := s.at(at); got != c.phase {
			t.Errorf("at(+%v) = %v, want %v", c.after, got, c.phase)
		}
	}
	w := s.window(1, Slow)
	if w.Start != start.Add(60*time.Second) || w.End != start.Add(70*time.Second) || w.Cycle != 1 || w.Phase != Slow {
		t.Errorf("window(1, slow) = %+v", w)
	}
}

func TestStateName(t *testing.T) {
	cases := []struct {
		snap *sharedstate.Snapshot
		want string
	}{
		{nil, "closed"},
		{&sharedstate.Snapshot{State: sharedstate.Open}, "open"},
		{&sharedstate.Snapshot{State: sharedstate.HalfOpen}, "half-open"},
		{&sharedstate.Snapshot{State: sharedstate.Closed, LocalState: sharedstate.Open}, "local-open"},
		{&sharedstate.Snapshot{State: sharedstate.Open, LocalState: sharedstate.Open}, "open"},
		{&sharedstate.Snapshot{State: sharedstate.Open, Override: sharedstate.ForcedClosed}, "forced-closed"},
		{&sharedstate.Snapshot{State: sharedstate.Closed, Override: sharedstate.ForcedOpen}, "forced-open"},
		{&sharedstate.Snapshot{State: sharedstate.Open, Policy: &sharedstate.Policy{Breaker: sharedstate.BreakerPolicy{Mode: sharedstate.ModeShadow}}}, "shadow:open"},
	}
	for _, c := range cases {
		if got := stateName(c.snap); got != c.want {
			t.Errorf("stateName(%+v) = %q, want %q", c.snap, got, c.want)
		}
	}
}

func TestDemoPolicyIsValid(t *testing.T) {
	for _, phase := range []time.Duration{MinPhaseDuration, 2 * time.Second, 4 * time.Second, DefaultPhaseDuration, time.Minute} {
		p := DemoPolicy(phase)
		if err := p.Validate(); err != nil {
			t.Errorf("DemoPolicy(%v): %v", phase, err)
		}
		// The breaker must be able to open within the failing phase: the
		// window (whose healthy successes must age out) fits in it.
		if w := p.Breaker.Window.Std(); w > phase {
			t.Errorf("DemoPolicy(%v): window %v longer than a phase", phase, w)
		}
	}
}

func TestPace(t *testing.T) {
	for _, rate := range []int{1, 9, 10, 11, 40, 1000} {
		workers, interval := pace(rate)
		got := float64(workers) / interval.Seconds()
		if workers < 1 || interval < 100*time.Millisecond || got < float64(rate)*0.999 || got > float64(rate)*1.001 {
			t.Errorf("pace(%d) = %d workers every %v: %.2f calls/s", rate, workers, interval, got)
		}
	}
}
