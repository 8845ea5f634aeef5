package sharedstate

import (
	"sync"
	"sync/atomic"
	"time"
)

// depState is everything one engine knows about one dependency. The atomic
// fields serve the lock-free hot paths; the rest is guarded by mu.
type depState struct {
	name    string
	win     atomic.Pointer[Window]
	snap    atomic.Pointer[Snapshot]
	evicted atomic.Bool
	// inFlight is this node's calls in flight (Engine.SetInFlight).
	inFlight atomic.Uint64

	mu          sync.Mutex
	doc         []byte  // its own policy document; nil: the default applies
	pol         *Policy // effective; replaced, never modified (snapshots share it)
	polJSON     []byte  // pol's JSON document, made by PolicyJSON when asked
	hbJitter    int64   // heartbeat interval shortening, ns, in [0, window/10)
	override    *Override
	records     map[string]BreakerRecord // by zone ("" for the fleet-wide record)
	rows        []rowEntry
	rowIdx      map[string]int // node -> index in rows
	oldestRow   int64          // no row in rows was received earlier (Unix ns)
	rowCount    *rowCounter    // the engine's rows per node
	rowsVersion uint64
	probe       fleetProbe
	local       localBreaker
	sent        sentRow
	permit      permitCache
	idleSince   int64      // Unix ns; 0 while not idle
	fine        fineRing   // own window in sub-buckets, for the fast path
	urgentAt    int64      // Unix ns of the last urgent row, 0: none
	z           tripBounds // of pol.Breaker.Confidence
	tripHeld    tripHeld
	shaped      shapeState
	found       tripFound // what the last trips found, for the open it proposes (carryIncident)
	followed    bool      // Engine.Follow: no trip rule of its own
	fleet       fleetSum  // the series start and the other nodes' cumulative counts (cumulative.go)
}

type rowEntry struct {
	NodeWindow
	received int64 // Unix ns
	// Classified when the row arrives (and again when the policy changes),
	// so that scans only add.
	active   bool // any count
	requests bool // successes or failures
	failing  bool // nodeFailing under the current policy
	sameZone bool // in this node's zone
	// bit k: the row's suffix Recent[k] meets a threshold on its own.
	fastFailing uint8
}

func (d *depState) classify(e *Engine, r *rowEntry) {
	r.active = !r.Counts.IsZero()
	r.requests = r.Counts.Requests() > 0
	r.failing = nodeFailing(&d.pol.Breaker, r.Counts)
	r.sameZone = r.Zone == e.zone
	r.fastFailing = fastFailingBits(&d.pol.Breaker, &r.Recent)
}

// resetWindow starts this node's window afresh.
func (d *depState) resetWindow() {
	d.win.Store(continueWindow(d.win.Load(), d.pol.Breaker.Window.Std()))
	d.fine = newFineRing(d.pol.Breaker.Window.Std())
}

// localBreaker is this node's own breaker: the breaker itself under scope
// node, the node-local breaker under scope fleet/zone.
type localBreaker struct {
	state      BreakerState // Closed or Open; HalfOpen is derived
	since      time.Time
	openCount  uint32
	inFlight   bool
	inFlightAt time.Time
	successes  int
	// closedAt is when probes last closed it, or this node learned that
	// the fleet's (or zone's) breaker closed (zero: neither, or too long
	// ago); the ramp runs from there.
	closedAt time.Time
	// probeGen: it opened because this node's probe of the fleet's (or
	// zone's) half-open record of this generation failed while other
	// nodes' succeeded; it stays open when that record closes.
	probeGen uint64
}

func (l *localBreaker) stateAt(b *BreakerPolicy, now time.Time) BreakerState {
	if l.state != Open {
		return Closed
	}
	if now.Before(l.since.Add(b.OpenDurationFor(l.openCount))) {
		return Open
	}
	return HalfOpen
}

type sentRow struct {
	valid bool
	row   NodeWindow
	at    int64 // Unix ns
}

type probeSlot uint8

const (
	slotNone probeSlot = iota
	slotFleet
	slotLocal
)

// setPolicy installs an effective policy. A new window length starts a new
// window.
func (d *depState) setPolicy(e *Engine, p Policy, rnd uint64) {
	if d.pol == nil || *d.pol != p {
		d.pol, d.polJSON = &p, nil
	}
	if w := d.win.Load(); w == nil || w.width != NewWindow(p.Breaker.Window.Std()).width {
		d.resetWindow()
	}
	d.z = boundsFor(&p.Breaker)
	for i := range d.rows {
		d.classify(e, &d.rows[i])
	}
	d.hbJitter = int64(rnd % uint64(p.Breaker.Window/10+1))
	d.permit.valid = false
}

// scopeKey is the zone key of the record that governs this node.
func (d *depState) scopeKey(e *Engine) string {
	if d.pol.Breaker.Scope == ScopeZone {
		return e.zone
	}
	return ""
}

// shared reports whether a replicated record governs this dependency
// (scope fleet or zone).
func (d *depState) shared() bool { return d.pol.Breaker.Scope != ScopeNode }

// rec returns the record that governs this node (zero record if none yet).
func (d *depState) rec(e *Engine) BreakerRecord {
	key := d.scopeKey(e)
	if r, ok := d.records[key]; ok {
		return r
	}
	return BreakerRecord{Dependency: d.name, Zone: key}
}

// round returns the probe round of a half-open record at now and when it ends.
func (d *depState) round(r BreakerRecord, now time.Time) (uint64, time.Time) {
	start := r.HalfOpenAt(d.pol.Breaker)
	pt := d.pol.Breaker.ProbeTimeout.Std()
	if now.Before(start) {
		return 0, start.Add(pt)
	}
	n := uint64(now.Sub(start) / pt)
	return n, start.Add(time.Duration(n+1) * pt)
}

func (d *depState) ownTotals(now int64) Counts { return d.win.Load().totals(now) }

type scanResult struct {
	own                   Counts
	fleet, zone           Counts
	fleetNodes, zoneNodes int
	eff                   Counts // in scope, generation >= minGen, own included
	effNodes              int    // with requests
	effFailing            int    // whose own rates meet a threshold
	effActive             int    // with any count
	effFastFailing        int    // whose own freshest suffixes meet a threshold
	ownInFlight           uint64 // this node's calls in flight
	effInFlight           uint64 // in scope, own included
}

// scan sums the live rows. Rows are live for 2×window after their receipt.
func (d *depState) scan(e *Engine, now int64, minGen uint64) scanResult {
	var s scanResult
	b := &d.pol.Breaker
	own := rowEntry{NodeWindow: NodeWindow{Counts: d.ownTotals(now), Recent: d.fine.recent, InFlight: d.inFlight.Load()}, received: now}
	d.classify(e, &own)
	own.sameZone = true
	s.own, s.ownInFlight = own.Counts, own.InFlight
	stale := 2 * int64(b.Window)
	// Sums in place (no closure, no struct copies): this loop runs over
	// every row of a dependency several times a tick.
	s.addRow(&own, true)
	for i := range d.rows {
		r := &d.rows[i]
		if now-r.received >= stale {
			continue
		}
		s.addRow(r, d.inScope(r, minGen))
	}
	return s
}

// addRow adds a live row to the sums; eff: the row is in scope.
func (s *scanResult) addRow(r *rowEntry, eff bool) {
	s.fleet.add(&r.Counts)
	s.fleetNodes += b2i(r.active)
	if r.sameZone {
		s.zone.add(&r.Counts)
		s.zoneNodes += b2i(r.active)
	}
	if eff {
		s.eff.add(&r.Counts)
		s.effActive += b2i(r.active)
		s.effNodes += b2i(r.requests)
		s.effFailing += b2i(r.failing)
		s.effFastFailing += b2i(r.fastFailing != 0)
		s.effInFlight = satAdd(s.effInFlight, r.InFlight)
	}
}

// inScope reports whether a row counts towards the trip rule and the
// budget: the policy's scope pools it and it is of generation minGen or newer.
func (d *depState) inScope(r *rowEntry, minGen uint64) bool {
	b := &d.pol.Breaker
	return b.Scope == ScopeFleet && r.Generation >= minGen || b.Scope == ScopeZone && r.sameZone && r.Generation >= minGen
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// compute returns the retry budget of the scope over the window and this
// node's share of it:
//
//	budget = max(minRetriesPerSecond × window, ratio × firstAttempts)
//	share  = budget × ownFirstAttempts / firstAttempts
//	         (budget / active nodes when nobody made a first attempt)
func (bp BudgetPolicy) compute(window time.Duration, s scanResult) (budget, share float64) {
	f := float64(s.eff.FirstAttempts)
	budget = max(bp.MinRetriesPerSecond*window.Seconds(), bp.Ratio*f)
	if f > 0 {
		share = budget * float64(s.own.FirstAttempts) / f
	} else {
		share = budget / float64(max(1, s.effActive))
	}
	return budget, share
}

// retryAdmitted applies the budget: a retry is admitted while this node's
// retries are below its share and the scope's retries are below the budget.
// The second condition keeps the fleet within the budget when shares shrink
// as other nodes' first attempts arrive (a node that used a large early share
// cannot give it back).
func (d *depState) retryAdmitted(e *Engine, now time.Time) bool {
	s := d.scan(e, now.UnixNano(), d.rec(e).Generation)
	budget, share := d.pol.Retry.Budget.compute(d.pol.Breaker.Window.Std(), s)
	return float64(s.own.Retries) < share && float64(s.eff.Retries) < budget
}

// decide is Decide under d.mu, returning which probe slot an AllowProbe would take.
func (d *depState) decide(e *Engine, now time.Time, kind AttemptKind) (Decision, probeSlot) {
	dec, slot := d.breakerDecision(e, now, kind)
	if dec.Verdict == Allow && kind == Retry && dec.Reason == ReasonNone && !d.retryAdmitted(e, now) {
		dec = reject(ReasonBudgetExhausted)
	}
	if d.pol.Breaker.Mode == ModeShadow && dec.Verdict == Reject && dec.Reason != ReasonForcedOpen {
		dec.Verdict = Allow
		slot = slotNone
	}
	return dec, slot
}

func (d *depState) breakerDecision(e *Engine, now time.Time, kind AttemptKind) (Decision, probeSlot) {
	b := &d.pol.Breaker
	if o := d.override; o.ActiveAt(now) {
		if o.State == ForcedOpen {
			return reject(ReasonForcedOpen), slotNone
		}
		return allow, slotNone
	}
	if d.shared() {
		r := d.rec(e)
		switch r.StateAt(*b, now) {
		case Open:
			return reject(ReasonOpen), slotNone
		case HalfOpen:
			if kind == Retry {
				return reject(ReasonHalfOpenNoPermit), slotNone
			}
			_, holds, turn, end := d.probeTurn(e, r, now)
			if (d.probe.gen == r.Generation && d.probe.inFlight) ||
				now.Add(d.pol.Retry.PerAttemptTimeout.Std()).After(end) ||
				!holds || now.Before(turn) {
				return reject(ReasonHalfOpenNoPermit), slotNone
			}
			return allowProbe, slotFleet
		}
	}
	switch d.local.stateAt(b, now) {
	case Open:
		return reject(ReasonOpen), slotNone
	case HalfOpen:
		if kind == Retry || d.local.inFlight {
			return reject(ReasonHalfOpenNoPermit), slotNone
		}
		return allowProbe, slotLocal
	}
	return allow, slotNone
}

// applyRecord merges r into the held records; true if anything changed.
func (d *depState) applyRecord(e *Engine, r BreakerRecord, now time.Time) bool {
	cur, ok := d.records[r.Zone]
	if !ok {
		cur = BreakerRecord{Dependency: d.name, Zone: r.Zone}
	}
	m := Merge(cur, r)
	if SameRecord(m, cur) {
		return false
	}
	d.records[r.Zone] = m
	if d.shared() && r.Zone == d.scopeKey(e) {
		if m.Generation != d.probe.gen {
			d.probe = fleetProbe{gen: m.Generation}
		}
		if m.State == Closed && m.Generation > cur.Generation {
			// Closed under a new generation: start afresh, so that the
			// failures that opened the breaker do not trip it again, and
			// ramp from now (this node's clock: when it learned the close)
			// unless the close is older than a ramp (an agent that
			// restarted, or learned it late by push-pull).
			d.resetWindow()
			if d.local.state != Open || d.local.probeGen == 0 || d.local.probeGen+1 != m.Generation {
				d.local = localBreaker{}
				if m.Generation > 0 && now.Sub(m.Since) < d.pol.Breaker.RampDuration.Std() {
					d.local.closedAt = now
				}
			}
			d.permit.valid = false
		}
	}
	return true
}

// propose makes this node propose the next record of its scope, applies it
// and queues it for Tick.
func (d *depState) propose(e *Engine, now time.Time, state BreakerState, openCount uint32, reason string) BreakerRecord {
	cur := d.rec(e)
	if cur.Generation >= MaxGeneration {
		return cur // generations never wrap: a record at the top stays (unreachable by real transitions)
	}
	p := BreakerRecord{
		Dependency: d.name, Zone: cur.Zone, Generation: cur.Generation + 1, State: state,
		Since: now.Round(0).UTC(), OpenCount: openCount, Origin: e.node, Reason: reason,
	}
	d.carryIncident(e, now, &p, cur)
	d.applyRecord(e, p, now)
	e.enqueue(p)
	return p
}

// refresh applies what time alone changes (override expiry, probe slot
// release) and publishes the snapshot; true if the snapshot changed.
func (d *depState) refresh(e *Engine, now time.Time) bool {
	b := &d.pol.Breaker
	if d.override != nil && !d.override.ActiveAt(now) {
		d.override = nil
	}
	if d.shared() {
		r := d.rec(e)
		if d.probe.gen != r.Generation {
			d.probe = fleetProbe{gen: r.Generation}
		}
		if d.probe.inFlight {
			if r.StateAt(*b, now) != HalfOpen {
				d.probe.inFlight = false
			} else if round, _ := d.round(r, now); round != d.probe.round {
				d.probe.inFlight = false
			}
		}
	}
	if d.local.inFlight && now.Sub(d.local.inFlightAt) >= b.ProbeTimeout.Std() {
		d.local.inFlight = false
	}
	return d.publish(e, now)
}

// tick runs the periodic rules; it returns whether the snapshot changed and
// whether the dependency looks idle enough to forget.
func (d *depState) tick(e *Engine, now time.Time) (changed, idle bool) {
	ns := now.UnixNano()
	b := &d.pol.Breaker
	d.prune(e, ns)
	d.fine.advance(d.win.Load(), ns)
	changed = d.refresh(e, now)
	if !d.override.ActiveAt(now) && !d.followed {
		fleetClosed := true
		if d.shared() {
			r := d.rec(e)
			if r.StateAt(*b, now) == Closed {
				s := d.scan(e, ns, r.Generation)
				if ok, why := d.trips(e, ns, &s, r.Generation); ok {
					if d.mayPropose(e, r.Generation+1, now) {
						d.propose(e, now, Open, 1, why)
					}
					// Not a proposer (yet): the record comes by gossip.
					fleetClosed = false
				} else {
					d.tripHeld.valid = false
				}
			} else {
				if r.StateAt(*b, now) == HalfOpen {
					d.halfOpenTick(e, now, r)
				}
				fleetClosed = false
			}
		}
		if fleetClosed && d.local.state == Closed && d.tripsLocally(d.ownTotals(ns)) {
			d.local = localBreaker{state: Open, since: now, openCount: 1}
		}
	}
	d.shapeTick(e, ns)
	changed = d.publish(e, now) || changed
	return changed, d.idle(e, now)
}
