package sharedstate

// The fast path of the trip rule, per dependency (see trip.go).

// fastFailingBits has bit k set when the suffix r[k] meets a threshold on
// its own (no minimum): the node counts towards minFailingNodes there.
func fastFailingBits(b *BreakerPolicy, r *Recent) uint8 {
	// Suffixes grow (Recent.valid): without a failure or slow call in the
	// widest one, none meets a threshold (the common, healthy row).
	if w := r[len(r)-1]; w.Failures|w.SlowCalls == 0 {
		return 0
	}
	var bits uint8
	for k, c := range r {
		if nodeFailing(b, Counts{Successes: uint64(c.Successes), Failures: uint64(c.Failures), SlowCalls: uint64(c.SlowCalls)}) {
			bits |= 1 << k
		}
	}
	return bits
}

// fastScan pools the fast path's suffixes of this node and of the live rows
// in scope.
func (d *depState) fastScan(e *Engine, now int64, minGen uint64) fastSums {
	var s fastSums
	fw := d.fine.width
	s.add(&d.fine.recent, 0, fw, fastFailingBits(&d.pol.Breaker, &d.fine.recent))
	stale := 2 * int64(d.pol.Breaker.Window)
	for i := range d.rows {
		r := &d.rows[i]
		if age := now - r.received; age < stale && d.inScope(r, minGen) {
			s.add(&r.Recent, age, fw, r.fastFailing)
		}
	}
	return s
}

// trips applies the trip rule to the scope's pooled counts s (the fast path
// first, freshest suffix first, then the whole window).
func (d *depState) trips(e *Engine, now int64, s *scanResult, minGen uint64) (bool, string) {
	b := &d.pol.Breaker
	// A suffix's pooled rate meets the threshold only if some node's does,
	// and it needs failures from min(minFailingNodes, nodes) nodes: most
	// ticks of a healthy dependency skip the fast path.
	if b.FastPath && d.z.fast > 0 && s.effFastFailing >= max(1, min(b.MinFailingNodes, s.effNodes)) && fastWorthIt(b, s.eff) {
		fs := d.fastScan(e, now, minGen)
		if found, ok := fastTrip(b, d.z, &fs, s.effNodes, d.fine.width); ok {
			d.found = found // the evidence of the open it may propose (carryIncident)
			return true, found.why
		}
	}
	found, ok := tripRule(b, d.z, s.eff, s.effNodes, s.effFailing)
	d.found = found
	return ok, found.why
}

// tripsLocally applies the trip rule to this node's own counts.
func (d *depState) tripsLocally(own Counts) bool {
	b := &d.pol.Breaker
	if b.FastPath && d.z.fast > 0 && fastWorthIt(b, own) {
		var fs fastSums
		fs.add(&d.fine.recent, 0, d.fine.width, fastFailingBits(b, &d.fine.recent))
		if _, ok := fastTrip(b, d.z, &fs, 1, d.fine.width); ok {
			return true
		}
	}
	_, ok := tripRule(b, d.z, own, 1, b2i(nodeFailing(b, own)))
	return ok
}

// Urgent rows: what the fast path needs from the others is their freshest
// counts, and gossip brings them in rounds. A row whose newest suffixes
// start failing (at least urgentFailures failures at a rate at the
// threshold within the last 8 sub-buckets) while the breaker is closed is
// also sent straight to every member, at most once per window/2.
const (
	urgentFailures = 2
	urgentHorizons = 4 // suffixes of up to 2^3 sub-buckets
)

func (d *depState) urgent(e *Engine, r *NodeWindow, now int64) bool {
	b := &d.pol.Breaker
	if !b.FastPath || d.z.fast == 0 || r.LocalOpen || d.override != nil ||
		(d.shared() && d.rec(e).State != Closed) || (d.urgentAt != 0 && now-d.urgentAt < int64(b.Window)/2) {
		return false
	}
	for k := range urgentHorizons {
		c := r.Recent[k]
		req := float64(c.Successes) + float64(c.Failures)
		if (c.Failures >= urgentFailures && float64(c.Failures) >= b.FailureRateThreshold*req) ||
			(c.SlowCalls >= urgentFailures && float64(c.SlowCalls) >= b.SlowCallRateThreshold*req) {
			d.urgentAt = now
			return true
		}
	}
	return false
}
