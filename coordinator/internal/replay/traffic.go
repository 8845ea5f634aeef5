package replay

import (
	"math/bits"
	"time"

	"github.com/fusebox-dev/fusebox/coordinator/internal/history"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

func (r *runner) setOverride(o override) {
	for _, n := range r.nodes {
		if o.State == sharedstate.ForcedOpen || o.State == sharedstate.ForcedClosed {
			_ = n.e.SetOverride(r.dep, &sharedstate.Override{State: o.State, Reason: o.Reason, Actor: "replay", Expires: o.Expires})
		} else {
			_ = n.e.SetOverride(r.dep, nil)
		}
	}
}

// traffic deals one step's calls out to the virtual nodes and makes them.
// ref is the step whose outcomes the calls take.
func (r *runner) traffic(st, ref step, realOpen bool) {
	s := st.s
	demand := uint64(s.FirstAttempts)
	if realOpen {
		demand += uint64(s.Rejected)
	}
	if demand == 0 {
		return
	}
	active := r.nodesOf(s.ActiveNodes)
	if len(active) == 0 {
		active = r.nodesOf(ref.s.ActiveNodes)
	}
	if len(active) == 0 {
		active = r.nodes
	}
	failing := r.nodesOf(ref.s.FailingNodes)
	var pf, ps float64
	if req := ref.s.Requests(); req > 0 {
		pf = float64(ref.s.Failures) / float64(req)
		ps = min(1, float64(ref.s.SlowCalls)/float64(req))
	}
	if realOpen {
		// The fleet sent only probes: what its breaker learned of the
		// dependency, nearest in time, says more than a few calls.
		if ev, ok := r.nearestEvidence(st.at); ok {
			pf, ps, failing = 0, 0, active
			if ev.failed {
				pf = 1
			}
		}
	}
	if len(failing) == 0 {
		failing = active
	}
	// Failures on the failing nodes, at the rate that gives the step its
	// failures overall.
	boost := float64(len(active)) / float64(len(failing))
	for _, n := range r.nodes {
		n.share, n.failRate, n.slowRate = 0, 0, 0
	}
	isFailing := map[*vnode]bool{}
	for _, n := range failing {
		isFailing[n] = true
	}
	base, extra := demand/uint64(len(active)), demand%uint64(len(active))
	off := int(uint64(st.at.UnixNano()/int64(max(st.dur, 1))) % uint64(len(active)))
	for i, n := range active {
		n.share = base
		if uint64((i+len(active)-off)%len(active)) < extra {
			n.share++
		}
		if isFailing[n] {
			n.failRate, n.slowRate = min(1, pf*boost), min(1, ps*boost)
		}
	}
	r.did.Demand += demand
	for _, n := range active {
		r.calls(n, n.share)
	}
}

func (r *runner) nodesOf(mask uint64) []*vnode {
	var out []*vnode
	seen := map[int]bool{}
	for mask != 0 {
		b := bits.TrailingZeros64(mask)
		mask &^= 1 << b
		if k := r.bitNode[b]; !seen[k] {
			seen[k] = true
			out = append(out, r.nodes[k])
		}
	}
	return out
}

// calls makes n first attempts at node v, each decided from its snapshot.
func (r *runner) calls(v *vnode, n uint64) {
	dep := r.dep
	e := v.e
	for n > 0 {
		snap := e.Snapshot(dep)
		d := snap.DecideFirst()
		switch {
		case d.Verdict == sharedstate.Reject:
			r.refuse(v, n)
			return
		case d.Verdict == sharedstate.AllowProbe:
			p := e.AcquireProbe(dep)
			n--
			switch p.Verdict {
			case sharedstate.Reject:
				// AcquireProbe counted the rejection; the rest of the step's
				// calls here meet the same answer.
				r.did.Refused++
				if v.refuse.hit(v.failRate) {
					r.did.RefusedWouldFail++
				}
				r.refuse(v, n)
				return
			case sharedstate.AllowProbe:
				failed := v.fail.hit(v.failRate)
				slow := v.slow.hit(v.slowRate)
				_ = e.Record(dep, sharedstate.Probe, outcome(failed, slow))
				r.did.Probes++
				if failed {
					r.did.FailedLetThrough++
				}
				if rec, ok := e.ProbeResult(dep, !failed); ok {
					r.deliver(e, rec)
				}
			default: // closed meanwhile: a normal call, counted by AcquireProbe
				failed := v.fail.hit(v.failRate)
				_ = e.Record(dep, sharedstate.Probe, outcome(failed, v.slow.hit(v.slowRate)))
				if failed {
					r.did.FailedLetThrough++
					r.retries(v, 1)
				}
			}
		default:
			if d.Reason != sharedstate.ReasonNone {
				r.did.ShadowRefused += n // shadow mode: would have refused
			}
			throttled := uint64(0)
			if p := snap.ThrottleProbability; p > 0 && !r.shadow {
				throttled = v.refuse.take(n, p)
			}
			if throttled > 0 {
				_ = e.AddCounts(dep, sharedstate.Counts{Rejected: throttled})
				r.did.Refused += throttled
				r.did.RefusedWouldFail += v.fail.take(throttled, v.failRate)
			}
			m := n - throttled
			f := v.fail.take(m, v.failRate)
			sl := v.slow.take(m, v.slowRate)
			c := sharedstate.Counts{FirstAttempts: m, Successes: m - f, Failures: f, SlowCalls: min(sl, m)}
			for _, part := range split(c) { // a step may hold more than one delta
				_ = e.AddCounts(dep, part)
			}
			r.did.FailedLetThrough += f
			r.retries(v, f)
			return
		}
	}
}

// split cuts c into equal parts of at most sharedstate.MaxDelta per count.
func split(c sharedstate.Counts) []sharedstate.Counts {
	big := max(c.FirstAttempts, c.Retries, c.Successes, c.Failures, c.SlowCalls, c.Rejected)
	k := (big + sharedstate.MaxDelta - 1) / sharedstate.MaxDelta
	if k <= 1 {
		return []sharedstate.Counts{c}
	}
	out := make([]sharedstate.Counts, 0, k)
	part := func(v uint64, i uint64) uint64 { return v*(i+1)/k - v*i/k }
	for i := range k {
		p := sharedstate.Counts{FirstAttempts: part(c.FirstAttempts, i), Retries: part(c.Retries, i),
			Successes: part(c.Successes, i), Failures: part(c.Failures, i), SlowCalls: part(c.SlowCalls, i), Rejected: part(c.Rejected, i)}
		p.SlowCalls = min(p.SlowCalls, p.Successes+p.Failures)
		out = append(out, p)
	}
	return out
}

func outcome(failed, slow bool) sharedstate.Outcome {
	switch {
	case failed && slow:
		return sharedstate.SlowFailure
	case failed:
		return sharedstate.Failure
	case slow:
		return sharedstate.Slow
	}
	return sharedstate.Success
}

// refuse counts n first attempts refused at v.
func (r *runner) refuse(v *vnode, n uint64) {
	if n == 0 {
		return
	}
	for _, part := range split(sharedstate.Counts{Rejected: n}) {
		_ = v.e.AddCounts(r.dep, part)
	}
	r.did.Refused += n
	r.did.RefusedWouldFail += v.refuse.take(n, v.failRate)
}

// retries asks for a retry of each of n failed attempts at v, and of each
// retry that fails, up to maxAttempts attempts per request. Once the budget
// refuses one, the step's other retries at v are refused too (the budget
// does not grow within a step).
func (r *runner) retries(v *vnode, n uint64) {
	if !r.retry {
		return
	}
	for attempt := 2; n > 0 && attempt <= r.pol.Retry.MaxAttempts; attempt++ {
		var failed uint64
		for k := range n {
			if !v.e.AcquireRetry(r.dep).Allowed() {
				rest := n - k - 1 // AcquireRetry counted this one
				if rest > 0 {
					_ = v.e.AddCounts(r.dep, sharedstate.Counts{Rejected: rest})
				}
				r.did.RetriesRefused += n - k
				n = 0
				break
			}
			r.did.RetriesAllowed++
			f := v.fail.hit(v.failRate)
			_ = v.e.Record(r.dep, sharedstate.Retry, outcome(f, v.slow.hit(v.slowRate)))
			if f {
				r.did.FailedLetThrough++
				failed++
			}
		}
		if n == 0 {
			return
		}
		n = failed
	}
}

// tick ticks every virtual node and exchanges what they send, at once.
func (r *runner) tick() {
	var recs []sharedstate.BreakerRecord
	var rows []sharedstate.NodeWindow
	from := map[int]int{} // index in rows -> node
	for i, n := range r.nodes {
		recs = append(recs, n.e.Tick()...)
		for _, row := range n.e.RowsToSend() {
			from[len(rows)] = i
			rows = append(rows, row)
		}
		n.e.UrgentRows()
	}
	for _, rec := range recs {
		r.note(rec)
	}
	for i, n := range r.nodes {
		for _, rec := range recs {
			_ = n.e.ApplyRecord(rec)
		}
		for k, row := range rows {
			if from[k] != i {
				_ = n.e.ApplyRow(row)
			}
		}
	}
}

// deliver takes a record one node proposed out of its Tick (a probe's
// result) to every other node at once.
func (r *runner) deliver(from *sharedstate.Engine, rec sharedstate.BreakerRecord) {
	r.note(rec)
	for _, n := range r.nodes {
		if n.e != from {
			_ = n.e.ApplyRecord(rec)
		}
	}
}

func (r *runner) note(rec sharedstate.BreakerRecord) {
	if rec.Zone == "" && rec.Dependency == r.dep {
		mergeInto(r.recs, rec)
	}
}

// allClosed reports whether every virtual node's breakers are closed and
// no override is in force.
func (r *runner) allClosed() bool {
	for _, n := range r.nodes {
		if s := n.e.Snapshot(r.dep); s != nil && (s.State != sharedstate.Closed || s.LocalState != sharedstate.Closed || s.Override != sharedstate.OverrideNone) {
			return false
		}
	}
	return true
}

// sampleLocal notes the worst state of the virtual nodes' own breakers
// after step st (scope node).
func (r *runner) sampleLocal(st step) {
	state := StateClosed
	for _, n := range r.nodes {
		snap := n.e.Snapshot(r.dep)
		if snap == nil {
			continue
		}
		switch {
		case snap.Override == sharedstate.ForcedOpen:
			state = StateForcedOpen
		case snap.Override == sharedstate.ForcedClosed && state == StateClosed:
			state = StateForcedClosed
		case snap.State == sharedstate.Open && state != StateForcedOpen:
			state = StateOpen
		case snap.State == sharedstate.HalfOpen && (state == StateClosed || state == StateForcedClosed):
			state = StateHalfOpen
		}
	}
	from, to := st.at.Add(st.dur), st.at.Add(2*st.dur)
	if n := len(r.local); n > 0 && r.local[n-1].State == state {
		r.local[n-1].To = to
		return
	}
	r.local = append(r.local, Interval{State: state, From: from, To: to})
}

func clip(ivs []Interval, from, to time.Time) []Interval {
	var out []Interval
	for _, iv := range ivs {
		iv.From, iv.To = history.Later(iv.From, from), history.Earlier(iv.To, to)
		if iv.From.Before(iv.To) {
			out = append(out, iv)
		}
	}
	return out
}
