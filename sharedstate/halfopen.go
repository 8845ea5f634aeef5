package sharedstate

import (
	"fmt"
	"time"
)

// Half-open under scope fleet or zone: who probes, when, and what the
// fleet's probes decide together.
//
// Permits go to the top halfOpenProbes candidates by rendezvous rank of
// (dependency, generation, round); the candidates are the members with
// traffic, less the node whose failed probe reopened the breaker and the
// nodes whose node-local breaker is open, unless that leaves none. The
// holder ranked k probes k × probeStagger into its round, so that while the
// dependency stays dead the first holder's failed probe reopens the breaker
// before the others send theirs; once any probe of the generation succeeded
// every holder probes at once.
//
// The probes' outcomes are pooled: each node's row carries its probe
// successes (and its failed probes that did not reopen) under the record's
// generation. probeSuccessThreshold successes fleet-wide close the breaker.
// A failed probe reopens it, unless other nodes' probes succeeded and no
// other node's failed: then the dependency answers the others, and the
// failure is this node's own, so its node-local breaker opens instead. So
// one node whose calls fail (its network, or a local process reporting
// failures under the dependency's name) can reopen the fleet's breaker at
// most once in a row: the next generation's permits go to the others.

// fleetProbe is this node's probing state for the half-open record of
// generation gen.
type fleetProbe struct {
	gen       uint64
	inFlight  bool
	round     uint64
	successes int // probes that succeeded under gen
	failures  int // probes that failed under gen and opened the node-local breaker
}

// permitCache is this node's view of the half-open record of generation
// gen in probe round round: its permit and the other nodes' pooled probe
// outcomes, recomputed when the rows, the round, the generation or this
// node's own standing change.
type permitCache struct {
	valid                bool
	gen, round, rowsVers uint64
	ownActive            bool
	ownExcluded          bool
	failed               string // the failed prober the exclusion was computed for
	holds                bool
	rank                 int // among the holders, 0 = best
	// Of the other nodes' rows of generation gen: their probe successes,
	// and how many of them report a failed probe.
	othersSucceeded uint64
	othersFailing   int
}

// failedProber is the node whose failed probe reopened r: the origin of an
// open record after the first (a trip proposes open count 1, a failed probe
// the count + 1), or "".
func failedProber(r BreakerRecord) string {
	if r.State == Open && r.OpenCount >= 2 {
		return r.Origin
	}
	return ""
}

// ProbeCandidates returns the members among which the probe permits of the
// half-open record r are drawn (ProbeHolders): withTraffic (the members with
// traffic for the dependency in r's scope) less the node whose failed probe
// reopened r (r's origin, when r's open count is 2 or more) and the nodes
// whose node-local breaker is open (localOpen; nil: none), or all of
// withTraffic when that leaves none. The engines compute their permits
// this way; tools call it to show who probes.
func ProbeCandidates(r BreakerRecord, withTraffic []string, localOpen func(node string) bool) []string {
	failed := failedProber(r)
	var out []string
	for _, m := range withTraffic {
		if m != failed && (localOpen == nil || !localOpen(m)) {
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		return withTraffic
	}
	return out
}

// probeTurn is this node's probe permit for the half-open record r at now:
// the round, whether this node holds a permit in it, when its turn to probe
// starts and when the round ends. The holder ranked k (0 = best) may start
// probing k × probeStagger into the round, so that while the dependency
// stays dead the first holder's failed probe reopens the breaker before the
// others send theirs: about one probe per round fleet-wide instead of
// halfOpenProbes. Once a probe of the generation succeeded (here or, as the
// rows say, elsewhere) every holder's turn has come.
func (d *depState) probeTurn(e *Engine, r BreakerRecord, now time.Time) (round uint64, holds bool, turn, end time.Time) {
	round, end = d.round(r, now)
	v := d.halfOpenView(e, now, r, round)
	turn = end.Add(-d.pol.Breaker.ProbeTimeout.Std())
	if d.succeeded(r.Generation, v) == 0 {
		turn = turn.Add(time.Duration(v.rank) * d.pol.probeStagger())
	}
	return round, v.holds, turn, end
}

// probeStagger is the time between the turns of successive probe holders
// in a round: the part of the round in which a probe still fits
// (probeTimeout − perAttemptTimeout) shared among the halfOpenProbes
// holders, and at least perAttemptTimeout, so that a holder's turn comes
// only after a probe its predecessor sent at its own turn has answered or
// timed out.
func (p *Policy) probeStagger() time.Duration {
	pt, pat := p.Breaker.ProbeTimeout.Std(), p.Retry.PerAttemptTimeout.Std()
	return max(pat, (pt-pat)/time.Duration(max(1, p.Breaker.HalfOpenProbes)))
}

// succeeded is the fleet's successful probes under generation gen as this
// node knows them: its own and those the rows in v report.
func (d *depState) succeeded(gen uint64, v *permitCache) uint64 {
	own := uint64(0)
	if d.probe.gen == gen {
		own = uint64(d.probe.successes)
	}
	return own + v.othersSucceeded
}

// halfOpenView returns this node's permit for the half-open record r in
// probe round round, and the other nodes' probe outcomes under r's
// generation (see permitCache). The permit: this node has traffic and is
// among the top halfOpenProbes candidates (ProbeCandidates) by rendezvous
// score; its rank among them.
func (d *depState) halfOpenView(e *Engine, now time.Time, r BreakerRecord, round uint64) *permitCache {
	ns := now.UnixNano()
	gen, failed := r.Generation, failedProber(r)
	ownActive := !d.ownTotals(ns).IsZero()
	ownExcluded := e.node == failed || d.local.state != Closed
	pc := &d.permit
	if pc.valid && pc.gen == gen && pc.round == round && pc.rowsVers == d.rowsVersion && pc.ownActive == ownActive &&
		pc.ownExcluded == ownExcluded && pc.failed == failed {
		return pc
	}
	b := &d.pol.Breaker
	mine := probeScore(d.name, gen, round, e.node)
	stale := 2 * int64(b.Window)
	var betterAll, betterCand, candidates int
	var succeeded uint64
	failing := 0
	for i := range d.rows {
		row := &d.rows[i]
		if ns-row.received >= stale || (b.Scope == ScopeZone && !row.sameZone) {
			continue
		}
		if row.Generation == gen {
			succeeded += uint64(row.ProbeSuccesses)
			failing += b2i(row.ProbeFailures > 0)
		}
		if !row.active {
			continue
		}
		better := ranksBefore(probeScore(d.name, gen, round, row.Node), row.Node, mine, e.node)
		betterAll += b2i(better)
		if row.Node != failed && !row.LocalOpen {
			candidates++
			betterCand += b2i(better)
		}
	}
	holds, rank := false, 0
	switch {
	case !ownActive:
	case candidates == 0 && ownExcluded: // everyone with traffic is excluded: all are candidates
		holds, rank = betterAll < b.HalfOpenProbes, betterAll
	case !ownExcluded:
		holds, rank = betterCand < b.HalfOpenProbes, betterCand
	}
	*pc = permitCache{valid: true, gen: gen, round: round, rowsVers: d.rowsVersion, ownActive: ownActive,
		ownExcluded: ownExcluded, failed: failed, holds: holds, rank: rank, othersSucceeded: succeeded, othersFailing: failing}
	return pc
}

// probeFailure is why a probe that ended with o fails under b, or "" when
// it counts as a success. Half-open judges a probe by the closed state's
// rules: a failure fails, and so does a slow success (at least
// slowCallDuration) when slow calls can trip the breaker, that is when a
// window of calls as slow as the probe would trip it: slowCallRateThreshold
// below 1, or 1 under the classic rule (confidence 0), which compares the
// rate itself. With confidence > 0 and a threshold of 1 the slow-call rule
// can never trip, and a slow success is a success.
func (b *BreakerPolicy) probeFailure(o Outcome) string {
	switch o {
	case Success:
		return ""
	case Slow:
		if !b.slowCallsTrip() {
			return ""
		}
		return fmt.Sprintf("probe slow (at least slowCallDuration %v, slow-call rate threshold %.2f)", b.SlowCallDuration, b.SlowCallRateThreshold)
	}
	return "probe failed"
}

// slowCallsTrip reports whether a window of slow calls alone can trip the
// breaker (see probeFailure).
func (b *BreakerPolicy) slowCallsTrip() bool {
	return b.SlowCallRateThreshold < 1 || b.Confidence == 0
}

// probeResult applies a probe's outcome (Success, Failure, Slow or
// SlowFailure).
func (d *depState) probeResult(e *Engine, now time.Time, o Outcome) (BreakerRecord, bool) {
	b := &d.pol.Breaker
	failed := b.probeFailure(o)
	if d.shared() && !d.override.ActiveAt(now) {
		r := d.rec(e)
		if r.StateAt(*b, now) == HalfOpen && d.probe.gen == r.Generation && d.probe.inFlight {
			d.probe.inFlight = false
			round, _ := d.round(r, now)
			v := d.halfOpenView(e, now, r, round)
			if failed != "" {
				if v.othersSucceeded > 0 && v.othersFailing == 0 && d.probe.successes == 0 {
					// The others' probes succeed: the failure is this
					// node's own. Its own breaker opens; the fleet's
					// stays half-open for the others.
					d.probe.failures++
					d.local = localBreaker{state: Open, since: now, openCount: 1, probeGen: r.Generation}
					return BreakerRecord{}, false
				}
				return d.propose(e, now, Open, r.OpenCount+1, failed), true
			}
			d.probe.successes++
			return d.closeOnEvidence(e, now, r, v)
		}
	}
	if d.local.inFlight && d.local.stateAt(b, now) == HalfOpen {
		d.local.inFlight = false
		switch {
		case failed != "":
			d.local = localBreaker{state: Open, since: now, openCount: d.local.openCount + 1}
		case d.local.successes+1 >= b.ProbeSuccessThreshold:
			d.local = localBreaker{closedAt: now}
			d.resetWindow()
		default:
			d.local.successes++
		}
	}
	return BreakerRecord{}, false
}

// closeOnEvidence proposes to close the half-open record r when the
// fleet's probes under its generation reached probeSuccessThreshold
// successes and this node's own probes are among them.
func (d *depState) closeOnEvidence(e *Engine, now time.Time, r BreakerRecord, v *permitCache) (BreakerRecord, bool) {
	if d.probe.gen != r.Generation || d.probe.successes == 0 {
		return BreakerRecord{}, false
	}
	n := d.succeeded(r.Generation, v)
	if n < uint64(d.pol.Breaker.ProbeSuccessThreshold) {
		return BreakerRecord{}, false
	}
	why := fmt.Sprintf("%d probe successes", n)
	if mine := uint64(d.probe.successes); mine < n {
		why = fmt.Sprintf("%d probe successes (%d at %s, %d at other nodes)", n, mine, e.node, n-mine)
	}
	return d.propose(e, now, Closed, 0, why), true
}

// halfOpenTick closes the half-open record r when the rows that arrived
// since this node's last probe result brought the fleet's successes to the
// threshold.
func (d *depState) halfOpenTick(e *Engine, now time.Time, r BreakerRecord) {
	if d.probe.gen != r.Generation || d.probe.successes == 0 {
		return
	}
	round, _ := d.round(r, now)
	d.closeOnEvidence(e, now, r, d.halfOpenView(e, now, r, round))
}
