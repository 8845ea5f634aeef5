package sharedstate

import (
	"time"
)

// ownRow is this node's current row (not yet numbered).
func (d *depState) ownRow(e *Engine, now time.Time) NodeWindow {
	r := NodeWindow{
		Node: e.node, Zone: e.zone, Dependency: d.name, Seq: d.sent.row.Seq,
		Generation: d.rec(e).Generation, LocalOpen: d.local.state != Closed,
		Counts: d.ownTotals(now.UnixNano()), Recent: d.fine.recent, InFlight: d.inFlight.Load(),
	}
	if d.shared() && d.probe.gen == r.Generation {
		r.ProbeSuccesses, r.ProbeFailures = sat32of(uint64(d.probe.successes)), sat32of(uint64(d.probe.failures))
	}
	return r
}

func (d *depState) rowToSend(e *Engine, now time.Time) (NodeWindow, bool) {
	// Most dependencies an agent tracks it only hears of: it never sent a
	// row of them and has nothing to send, which this finds without
	// building the row (the rule below reads the same).
	if !d.sent.valid && d.local.state == Closed && d.inFlight.Load() == 0 && d.probe.successes|d.probe.failures == 0 &&
		d.ownTotals(now.UnixNano()).IsZero() {
		return NodeWindow{}, false
	}
	r := d.ownRow(e, now)
	last := d.sent.row
	probed := (r.ProbeSuccesses != 0 || r.ProbeFailures != 0) &&
		(r.ProbeSuccesses != last.ProbeSuccesses || r.ProbeFailures != last.ProbeFailures || r.Generation != last.Generation)
	changed := r.Counts != last.Counts || r.Recent != last.Recent || r.Generation != last.Generation || r.LocalOpen != last.LocalOpen ||
		r.InFlight != last.InFlight || probed
	if !d.sent.valid {
		changed = !r.Counts.IsZero() || r.LocalOpen || r.InFlight != 0 || probed
	}
	due := d.sent.valid && (!r.Counts.IsZero() || r.LocalOpen || r.InFlight != 0) &&
		now.UnixNano()-d.sent.at >= int64(d.pol.Breaker.Window)/2-d.hbJitter
	if !changed && !due {
		return NodeWindow{}, false
	}
	r.Seq = e.seq.Add(1)
	r.Cumulative = d.ownCumulative(now)
	d.sent = sentRow{valid: true, row: r, at: now.UnixNano()}
	// A probe's outcome is news the other holders wait for (they probe at
	// once after a success, and the fleet closes on the pooled successes):
	// it goes straight to every member.
	if probed || d.urgent(e, &r, now.UnixNano()) {
		e.enqueueUrgent(r)
	}
	return r, true
}

// rampRefusal is the share of first attempts the ramp after the latest
// close refuses at now (quantized as the throttle probability is). It runs
// from localBreaker.closedAt, a time on this node's clock (the fleet's
// close as this node learned it, within a gossip round trip of the
// proposer's), so that clock skew between nodes neither shortens nor
// stretches it.
func (d *depState) rampRefusal(now time.Time) float64 {
	if d.local.closedAt.IsZero() {
		return 0
	}
	return quantize(d.pol.Breaker.RampRefusal(now.Sub(d.local.closedAt)))
}

// publish rebuilds the snapshot and stores it if it differs; true if so.
func (d *depState) publish(e *Engine, now time.Time) bool {
	b := &d.pol.Breaker
	s := Snapshot{Dependency: d.name, Policy: d.pol, ConcurrencyLimit: d.shaped.share}
	if o := d.override; o.ActiveAt(now) {
		s.Override, s.OverrideReason, s.OverrideExpires = o.State, o.Reason, o.Expires
	}
	local := d.local.stateAt(b, now)
	if d.shared() {
		rec := d.rec(e)
		s.Generation, s.OpenCount, s.Since = rec.Generation, rec.OpenCount, rec.Since
		s.State = rec.StateAt(*b, now)
		if s.State == HalfOpen {
			var holds bool
			var turn time.Time
			s.ProbeRound, holds, turn, _ = d.probeTurn(e, rec, now)
			s.ProbePermit = holds && !now.Before(turn)
		}
		s.LocalState = local
		if s.State == Closed && local == HalfOpen {
			s.ProbePermit = true
		}
	} else {
		s.State, s.OpenCount, s.Since = local, d.local.openCount, d.local.since
		s.ProbePermit = local == HalfOpen
	}
	if s.State == Closed && s.LocalState == Closed && s.Override == OverrideNone {
		s.RampProbability = d.rampRefusal(now)
		s.ThrottleProbability = max(d.shaped.throttle, s.RampProbability)
	}
	old := d.snap.Load()
	if old != nil {
		s.Version = old.Version
		if s == *old {
			return false
		}
	}
	s.Version++
	p := new(Snapshot) // only a changed snapshot leaves the stack
	*p = s
	d.snap.Store(p)
	return true
}
