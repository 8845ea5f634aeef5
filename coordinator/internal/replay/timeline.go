package replay

import (
	"maps"
	"slices"
	"time"

	"github.com/fusebox-dev/fusebox/coordinator/internal/history"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// States of an Interval.
const (
	StateClosed       = "closed"
	StateOpen         = "open"
	StateHalfOpen     = "half-open"
	StateForcedOpen   = "forced-open"
	StateForcedClosed = "forced-closed"
)

// Interval is a stretch of time in one state.
type Interval struct {
	State      string
	From, To   time.Time
	Generation uint64
	OpenCount  uint32
	Reason     string
}

// Transition is a breaker record the replay (or the fleet) took.
type Transition struct {
	At         time.Time
	State      sharedstate.BreakerState // Open or Closed
	Generation uint64
	OpenCount  uint32
	Reason     string
}

// override is an operator override in force from At.
type override struct {
	At      time.Time
	State   sharedstate.OverrideState
	Reason  string
	Expires time.Time
}

// breakerTransitions returns the fleet-wide breaker records of recs, one per
// generation (merged), in generation order.
func breakerTransitions(recs []history.Record) []Transition {
	byGen := map[uint64]sharedstate.BreakerRecord{}
	for _, r := range recs {
		if r.Kind == history.KindBreaker && r.Breaker.Zone == "" {
			mergeInto(byGen, r.Breaker)
		}
	}
	delete(byGen, 0) // the initial closed state: no transition
	return transitionsOf(byGen)
}

// mergeInto keeps b in byGen, merged with the record of its generation
// there (several nodes proposed it: the one that wins).
func mergeInto(byGen map[uint64]sharedstate.BreakerRecord, b sharedstate.BreakerRecord) {
	if old, ok := byGen[b.Generation]; ok {
		b = sharedstate.Merge(old, b)
	}
	byGen[b.Generation] = b
}

// transitionsOf are the records of byGen in generation order.
func transitionsOf(byGen map[uint64]sharedstate.BreakerRecord) []Transition {
	out := make([]Transition, 0, len(byGen))
	for _, g := range slices.Sorted(maps.Keys(byGen)) {
		b := byGen[g]
		out = append(out, Transition{At: b.Since, State: b.State, Generation: b.Generation, OpenCount: b.OpenCount, Reason: b.Reason})
	}
	return out
}

func overrides(recs []history.Record) []override {
	var out []override
	for _, r := range recs {
		if r.Kind == history.KindOverride {
			out = append(out, override{At: r.At, State: r.Override, Reason: r.Reason, Expires: r.Expires})
		}
	}
	return out
}

// timeline turns breaker transitions and overrides into intervals over
// [from, to): a breaker's states (half-open derived with b), overrides
// laid over them.
func timeline(ts []Transition, ovs []override, b sharedstate.BreakerPolicy, from, to time.Time) []Interval {
	var base []Interval
	add := func(iv Interval) {
		if iv.From.Before(from) {
			iv.From = from
		}
		if iv.To.After(to) {
			iv.To = to
		}
		if !iv.From.Before(iv.To) {
			return
		}
		if n := len(base); n > 0 && base[n-1].State == iv.State && base[n-1].Generation == iv.Generation && !base[n-1].To.Before(iv.From) {
			base[n-1].To = iv.To
			return
		}
		base = append(base, iv)
	}
	cur := Interval{State: StateClosed, From: from}
	for i, t := range ts {
		end := to
		if i+1 < len(ts) {
			end = ts[i+1].At
		}
		cur.To = t.At
		add(cur)
		if t.State == sharedstate.Open {
			half := t.At.Add(b.OpenDurationFor(t.OpenCount))
			add(Interval{State: StateOpen, From: t.At, To: history.Earlier(half, end), Generation: t.Generation, OpenCount: t.OpenCount, Reason: t.Reason})
			cur = Interval{State: StateHalfOpen, From: half, Generation: t.Generation, OpenCount: t.OpenCount, Reason: t.Reason}
			if !half.Before(end) {
				cur.From = end
			}
		} else {
			cur = Interval{State: StateClosed, From: t.At, Generation: t.Generation, Reason: t.Reason}
		}
	}
	cur.To = to
	add(cur)
	if len(ovs) == 0 {
		return base
	}
	// Overrides beat the breaker.
	type span struct {
		from, to time.Time
		state    string
		reason   string
	}
	var forced []span
	for i, o := range ovs {
		if o.State != sharedstate.ForcedOpen && o.State != sharedstate.ForcedClosed {
			continue
		}
		end := to
		if i+1 < len(ovs) {
			end = ovs[i+1].At
		}
		if !o.Expires.IsZero() && o.Expires.Before(end) {
			end = o.Expires
		}
		forced = append(forced, span{from: o.At, to: end, state: o.State.String(), reason: o.Reason})
	}
	var out []Interval
	for _, iv := range base {
		pieces := []Interval{iv}
		for _, f := range forced {
			var next []Interval
			for _, p := range pieces {
				if !f.from.Before(p.To) || !f.to.After(p.From) || p.State == StateForcedOpen || p.State == StateForcedClosed {
					next = append(next, p)
					continue
				}
				if p.From.Before(f.from) {
					q := p
					q.To = f.from
					next = append(next, q)
				}
				q := Interval{State: f.state, From: history.Later(p.From, f.from), To: history.Earlier(p.To, f.to), Reason: f.reason}
				next = append(next, q)
				if p.To.After(f.to) {
					q := p
					q.From = f.to
					next = append(next, q)
				}
			}
			pieces = next
		}
		for _, p := range pieces {
			if n := len(out); n > 0 && out[n-1].State == p.State && out[n-1].Generation == p.Generation && out[n-1].To.Equal(p.From) {
				out[n-1].To = p.To
				continue
			}
			out = append(out, p)
		}
	}
	return out
}

// FleetTransitions are the fleet-wide breaker records of recs, one per
// generation (the one that won), in order.
func FleetTransitions(recs []history.Record) []Transition { return breakerTransitions(recs) }

// Reality is the fleet's own timeline over [from, to) from the records the
// history kept, half-open derived with b (the policy the fleet ran under).
func Reality(recs []history.Record, b sharedstate.BreakerPolicy, from, to time.Time) []Interval {
	return timeline(breakerTransitions(recs), overrides(recs), b, from, to)
}

// stateAt is the interval state covering t ("closed" when none does).
func stateAt(ivs []Interval, t time.Time) string {
	i, _ := slices.BinarySearchFunc(ivs, t, func(iv Interval, t time.Time) int {
		if !iv.To.After(t) {
			return -1
		}
		if iv.From.After(t) {
			return 1
		}
		return 0
	})
	if i < len(ivs) && !ivs[i].From.After(t) && ivs[i].To.After(t) {
		return ivs[i].State
	}
	return StateClosed
}
