package sharedstate

import (
	"slices"
	"time"
)

// Decide answers whether an attempt of the given kind may be made now. It
// neither counts nor reserves anything: report what happened with Record, and
// use AcquireRetry and AcquireProbe to take budget and probe permits. An
// untracked dependency is allowed. On a closed breaker a FirstAttempt or
// Probe is decided without a lock or an allocation.
//
// Answers: forced-open rejects (ReasonForcedOpen) and forced-closed allows,
// whatever else holds; an open breaker rejects (ReasonOpen); a half-open one
// answers AllowProbe where this node holds a free probe permit and rejects
// the rest (ReasonHalfOpenNoPermit, always for a Retry); a closed one allows,
// a Retry only within the retry budget (ReasonBudgetExhausted). In shadow mode
// every rejection except forced-open becomes Allow with the Reason kept.
func (e *Engine) Decide(dep string, kind AttemptKind) Decision {
	d := e.deps.load(dep)
	if d == nil {
		return allow
	}
	if kind != Retry {
		if s := d.snap.Load(); s.State == Closed && s.LocalState == Closed && s.Override == OverrideNone {
			if kind == FirstAttempt && s.ThrottleProbability > 0 {
				return s.DecideFirstAt(uniform())
			}
			return allow
		}
	}
	now := e.now()
	d.mu.Lock()
	changed := d.refresh(e, now)
	dec, _ := d.decide(e, now, kind)
	e.unlock(d, changed)
	return dec
}

// AcquireRetry decides a retry as Decide does and, when it is allowed, takes
// it from the budget (counts it as a retry); a rejection is counted as
// rejected. Report the retry's outcome with Record(dep, Retry, outcome).
func (e *Engine) AcquireRetry(dep string) Decision {
	return e.acquire(dep, Retry)
}

// AcquireProbe asks for a probe. AllowProbe means the caller holds this
// node's probe slot and must report the result with ProbeResult (and the
// outcome with Record(dep, Probe, outcome)); the slot is released by the
// result, by the end of the probe round, or after probeTimeout for a
// node-local breaker. Allow means the breaker is closed (or forced closed):
// a normal call. Allowed calls are counted as first attempts, rejections as
// rejected.
func (e *Engine) AcquireProbe(dep string) Decision {
	return e.acquire(dep, Probe)
}

func (e *Engine) acquire(dep string, kind AttemptKind) Decision {
	d, err := e.state(dep)
	if err != nil {
		return allow
	}
	now := e.now()
	d.mu.Lock()
	changed := d.refresh(e, now)
	dec, slot := d.decide(e, now, kind)
	b := d.win.Load().slot(now.UnixNano())
	switch {
	case !dec.Allowed():
		b.c[cRejected].Add(1)
	case kind == Retry:
		b.c[cRetries].Add(1)
	default:
		b.c[cFirst].Add(1)
	}
	if dec.Verdict == AllowProbe {
		switch slot {
		case slotFleet:
			rec := d.rec(e)
			d.probe.inFlight = true
			d.probe.round, _ = d.round(rec, now)
		case slotLocal:
			d.local.inFlight = true
			d.local.inFlightAt = now
		}
	}
	e.unlock(d, changed)
	return dec
}

// ProbeResult reports the result of the probe admitted by AcquireProbe:
// ProbeOutcome with Success or Failure. Callers that measure how long the
// probe took should use ProbeOutcome, so that a slow probe is judged as one.
func (e *Engine) ProbeResult(dep string, success bool) (BreakerRecord, bool) {
	return e.ProbeOutcome(dep, OutcomeOf(!success, false))
}

// ProbeOutcome reports the outcome of the probe admitted by AcquireProbe
// (Success, Failure, Slow or SlowFailure; Rejected is ignored: it is not
// the outcome of a call). Half-open judges a probe by the closed state's
// rules: a failure fails, and a slow success (Slow) fails when slow calls
// can trip the breaker — slowCallRateThreshold below 1, or the classic rule
// (confidence 0) — and counts as a success otherwise. Under scope fleet or
// zone the probes of a generation count together: this node's successes
// travel in its rows (NodeWindow.ProbeSuccesses), and a success that brings
// the fleet's, as this node knows them, to probeSuccessThreshold makes this
// node propose to close. A failed probe makes it propose to reopen (open,
// openCount+1), unless other nodes' probes of the generation succeeded and
// none failed: then this node's own breaker opens instead and nothing is
// proposed. A proposal is returned with true, applied locally and also
// queued for the next Tick. For a node-local breaker (its own probes alone
// count) the transition stays local and nothing is returned. A result with
// no probe in flight (late, or after the round ended) is ignored.
func (e *Engine) ProbeOutcome(dep string, o Outcome) (BreakerRecord, bool) {
	if o >= Rejected {
		return BreakerRecord{}, false
	}
	d := e.deps.load(dep)
	if d == nil {
		return BreakerRecord{}, false
	}
	now := e.now()
	d.mu.Lock()
	changed := d.refresh(e, now)
	p, ok := d.probeResult(e, now, o)
	changed = d.publish(e, now) || changed
	e.unlock(d, changed)
	return p, ok
}

// Tick evaluates, for every dependency, the rules that depend on time and on
// the gossiped rows: it drops stale rows, expires overrides, applies the trip
// rule to the fleet's (or zone's) totals and to this node's own window,
// releases probe slots whose round ended, rotates probe permits and forgets
// idle dependencies. It returns every record this node proposed since the
// previous Tick (including those ProbeResult returned), ordered by
// dependency; the caller gossips them.
func (e *Engine) Tick() []BreakerRecord {
	now := e.now()
	var changed []string
	for _, d := range e.deps.sortedValues() {
		d.mu.Lock()
		ch, idle := d.tick(e, now)
		d.mu.Unlock()
		if ch {
			changed = append(changed, d.name)
		}
		if idle && e.evict(d, now) {
			changed = append(changed, d.name)
		}
	}
	e.pruneDead(now)
	e.floors.apply(e.members.isLive)
	for _, dep := range changed {
		e.notify(dep)
	}
	e.outMu.Lock()
	out := e.outbox
	e.outbox = nil
	e.outMu.Unlock()
	slices.SortStableFunc(out, compareRecords)
	return out
}

func (e *Engine) enqueue(r BreakerRecord) {
	e.outMu.Lock()
	e.outbox = append(e.outbox, r)
	e.outMu.Unlock()
}

// evict forgets an idle dependency. Counts recorded concurrently with the
// eviction may be lost (Record re-counts those it sees evicted).
func (e *Engine) evict(d *depState, now time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.idle(e, now) {
		return false
	}
	d.evicted.Store(true)
	e.tombs.put(e, d, now.UnixNano())
	e.deps.delete(d.name)
	e.ndeps--
	e.evicted.Add(1)
	return true
}
