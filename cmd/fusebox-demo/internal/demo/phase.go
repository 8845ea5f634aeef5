package demo

import (
	"fmt"
	"time"
)

// Phase is one stage of shipping-api's health cycle.
type Phase int

// The phases, in the order they repeat.
const (
	Healthy    Phase = iota // answers in 5-25ms; 1 request in 100 gets a 503
	Failing                 // answers 503 to everything
	Slow                    // answers 200 after 300ms (slower than slowCallDuration)
	Recovering              // answers 200 after 60ms, no errors
	numPhases
)

// phaseText names each phase and says what the dependency does in it,
// for the log.
var phaseText = [numPhases]struct{ name, does string }{
	Healthy:    {"healthy", "answers in 5-25ms, 1% errors"},
	Failing:    {"failing", "answers 503 to every request"},
	Slow:       {"slow", "answers after 300ms (slowCallDuration is 200ms)"},
	Recovering: {"recovering", "answers in 60ms, no errors"},
}

func (p Phase) String() string {
	if p < 0 || p >= numPhases {
		return fmt.Sprintf("phase(%d)", int(p))
	}
	return phaseText[p].name
}

// describe says what the dependency does in the phase.
func (p Phase) describe() string {
	if p < 0 || p >= numPhases {
		return ""
	}
	return phaseText[p].does
}

// schedule maps time to phases: phase k of the run (k = 0, 1, …) covers
// [start + k·length, start + (k+1)·length) and is Phase(k mod 4) of cycle
// k / 4. Time decides, so the dependency, the counters and the tests agree
// without talking to each other.
type schedule struct {
	start  time.Time
	length time.Duration
}

// index returns the number of the phase running at t (0 before start).
func (s schedule) index(t time.Time) int {
	if t.Before(s.start) {
		return 0
	}
	return int(t.Sub(s.start) / s.length)
}

// at returns the phase running at t.
func (s schedule) at(t time.Time) Phase { return Phase(s.index(t) % int(numPhases)) }

// bounds returns when phase number k starts and ends.
func (s schedule) bounds(k int) (time.Time, time.Time) {
	from := s.start.Add(time.Duration(k) * s.length)
	return from, from.Add(s.length)
}

// PhaseWindow says when one phase of one cycle runs.
type PhaseWindow struct {
	Cycle      int
	Phase      Phase
	Start, End time.Time
}

func (s schedule) window(cycle int, p Phase) PhaseWindow {
	from, to := s.bounds(cycle*int(numPhases) + int(p))
	return PhaseWindow{Cycle: cycle, Phase: p, Start: from, End: to}
}
