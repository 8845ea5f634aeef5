package replay

import (
	"slices"
	"time"

	"github.com/fusebox-dev/fusebox/coordinator/internal/history"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// Side is what one side (the fleet, or a replayed policy) did in an
// incident.
type Side struct {
	// Opened is the side's first open in the incident (zero: it did not
	// open); Closed its last close (zero: it did not open, or was not
	// closed by the end of the range); Opens how many times it opened.
	Opened, Closed time.Time
	Opens          int
	// OverThreshold is when the calls' failure (or slow-call) rate went
	// over the side's threshold before it opened: the first of a run of
	// slots at or over it (at most two slots under it in between) that
	// ends at the open, within a window before it. SecondsToOpen is from
	// there to the open (HasSecondsToOpen false when it did not open).
	OverThreshold    time.Time
	SecondsToOpen    float64
	HasSecondsToOpen bool
	Totals           Totals
}

// Incident is a stretch of time in which the fleet or either policy was not
// closed, from when the calls' rate went over a threshold.
type Incident struct {
	From, To                 time.Time
	Fleet, Current, Proposed Side
}

// Comparison is the fleet, the current policy and a proposed one side by
// side.
type Comparison struct {
	Incidents []Incident
	// Fleet is what the fleet did over the range, from the history: its
	// rejections, failures and retries.
	Fleet Totals
	// Reality is the fleet's own timeline.
	Reality []Interval
}

// Compare puts the fleet (reality, its transitions, under fleetPol), the
// current policy's replay and a proposed one's side by side. The two
// results must come from the same history.
func Compare(fleetPol sharedstate.Policy, reality []Interval, fleetTransitions []Transition,
	current, proposed *Result, currentPol, proposedPol sharedstate.Policy) Comparison {
	cmp := Comparison{Reality: reality}
	steps := current.Steps
	for _, st := range steps {
		cmp.Fleet.add(fleetDid(st, stateAt(reality, st.At)))
	}
	for _, t := range fleetTransitions {
		if t.State == sharedstate.Open && len(steps) > 0 && !t.At.Before(steps[0].At) && t.At.Before(steps[len(steps)-1].At.Add(steps[len(steps)-1].Dur)) {
			cmp.Fleet.Opens++
		}
	}
	gap := fleetPol.Breaker.Window.Std()
	var spans [][2]time.Time
	for _, ivs := range [][]Interval{reality, current.States, proposed.States} {
		for _, iv := range ivs {
			if iv.State != StateClosed && iv.State != StateForcedClosed {
				spans = append(spans, [2]time.Time{iv.From, iv.To})
			}
		}
	}
	slices.SortFunc(spans, func(a, b [2]time.Time) int { return a[0].Compare(b[0]) })
	var merged [][2]time.Time
	for _, sp := range spans {
		if n := len(merged); n > 0 && !sp[0].After(merged[n-1][1].Add(gap)) {
			merged[n-1][1] = history.Later(merged[n-1][1], sp[1])
			continue
		}
		merged = append(merged, sp)
	}
	for _, m := range merged {
		inc := Incident{From: m[0], To: m[1]}
		inc.Fleet = side(fleetTransitions, reality, steps, fleetPol, m)
		inc.Current = side(current.Transitions, current.States, current.Steps, currentPol, m)
		inc.Proposed = side(proposed.Transitions, proposed.States, proposed.Steps, proposedPol, m)
		for _, s := range []Side{inc.Fleet, inc.Current, inc.Proposed} {
			if !s.OverThreshold.IsZero() && s.OverThreshold.Before(inc.From) {
				inc.From = s.OverThreshold
			}
		}
		// Totals from the incident's (extended) start.
		for i, st := range steps {
			if st.At.Before(inc.From) || !st.At.Before(inc.To) {
				continue
			}
			inc.Fleet.Totals.add(fleetDid(st, stateAt(reality, st.At)))
			inc.Current.Totals.add(current.Steps[i].Did)
			if i < len(proposed.Steps) {
				inc.Proposed.Totals.add(proposed.Steps[i].Did)
			}
		}
		for _, p := range []*Side{&inc.Fleet, &inc.Current, &inc.Proposed} {
			p.Totals.Opens = p.Opens
		}
		cmp.Incidents = append(cmp.Incidents, inc)
	}
	return cmp
}

// fleetDid is what the fleet did in one step (its breaker in state).
func fleetDid(st Step, state string) Totals {
	s := st.Slot
	t := Totals{Demand: uint64(s.FirstAttempts), Refused: uint64(s.Rejected), FailedLetThrough: uint64(s.Failures),
		RetriesAllowed: uint64(s.Retries)}
	if state != StateClosed && state != StateForcedClosed {
		t.Demand += uint64(s.Rejected)
	}
	return t
}

// side is what one side did over the incident span m.
func side(ts []Transition, states []Interval, steps []Step, pol sharedstate.Policy, m [2]time.Time) Side {
	var s Side
	for _, t := range ts {
		if t.At.Before(m[0]) || t.At.After(m[1]) || (t.At.Equal(m[1]) && t.State == sharedstate.Open) {
			continue
		}
		if t.State == sharedstate.Open {
			if s.Opened.IsZero() {
				s.Opened = t.At
			}
			s.Opens++
		} else if !s.Opened.IsZero() {
			s.Closed = t.At
		}
	}
	if !s.Opened.IsZero() {
		if st := stateAt(states, m[1]); st != StateClosed && st != StateForcedClosed && len(states) > 0 && !m[1].Before(states[len(states)-1].To) {
			s.Closed = time.Time{} // still open when the range ends
		}
		if onset, ok := overThreshold(steps, pol, s.Opened); ok {
			s.OverThreshold = onset
			s.SecondsToOpen = max(0, s.Opened.Sub(onset).Seconds())
		} else {
			s.OverThreshold = s.Opened
		}
		s.HasSecondsToOpen = true
	} else if onset, ok := firstOver(steps, pol, m); ok {
		s.OverThreshold = onset
	}
	return s
}

func over(st Step, b sharedstate.BreakerPolicy) bool {
	req := st.Slot.Requests()
	if req == 0 {
		return false
	}
	fr := float64(st.Slot.Failures) / float64(req)
	sr := float64(st.Slot.SlowCalls) / float64(req)
	return (st.Slot.Failures > 0 && fr >= b.FailureRateThreshold) || (st.Slot.SlowCalls > 0 && sr >= b.SlowCallRateThreshold)
}

// overThreshold walks back from an open at t to where the run of slots
// over the threshold that ends there began (see Side.OverThreshold).
func overThreshold(steps []Step, pol sharedstate.Policy, t time.Time) (time.Time, bool) {
	o, _ := slices.BinarySearchFunc(steps, t, func(st Step, t time.Time) int { return st.At.Compare(t) })
	if o >= len(steps) || steps[o].At.After(t) {
		o--
	}
	if o < 0 {
		return time.Time{}, false
	}
	b := pol.Breaker
	var onset time.Time
	found, under := false, 0
	for j := o; j >= 0 && t.Sub(steps[j].At) <= b.Window.Std(); j-- {
		if steps[j].Slot.Requests() == 0 {
			continue
		}
		if over(steps[j], b) {
			onset, found, under = steps[j].At, true, 0
			continue
		}
		if under++; under > 2 {
			break
		}
	}
	return onset, found
}

// firstOver is the first slot over the threshold within m.
func firstOver(steps []Step, pol sharedstate.Policy, m [2]time.Time) (time.Time, bool) {
	for _, st := range steps {
		if !st.At.Before(m[0].Add(-pol.Breaker.Window.Std())) && st.At.Before(m[1]) && over(st, pol.Breaker) {
			return st.At, true
		}
	}
	return time.Time{}, false
}
