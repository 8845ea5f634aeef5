package sharedstate

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// ApplyRow is MergeRow without the reason of a refusal.
func (e *Engine) ApplyRow(r NodeWindow) bool {
	ok, _ := e.mergeRow(&r)
	return ok
}

// MergeRow takes a row gossiped by another node. It returns true if the row
// is new (a higher Seq than the one held for that node and dependency), in
// which case the caller may pass it on. Rows from this node and from nodes
// reported dead are ignored (false, nil); malformed rows, replays (a seq at
// or below one of the node's rows this engine dropped as stale,
// ErrReplayed), rows past MaxRowsPerNode and rows that would take a new
// dependency past 9/10 of MaxDependencies are refused with an error (see
// RefusalReason).
func (e *Engine) MergeRow(r NodeWindow) (bool, error) {
	return e.mergeRow(&r)
}

// mergeRow is MergeRow on a row the caller owns (rows are a few hundred
// bytes: merging one copies it once, into the table). It is what every
// gossip round runs per row, so it checks in the cheapest order that keeps
// MergeRow's contract: the dependency's name is validated only when the
// engine does not hold it (a held name was validated when it was created).
func (e *Engine) mergeRow(r *NodeWindow) (bool, error) {
	d := e.deps.load(r.Dependency)
	if d == nil {
		if err := ValidateDependencyName(r.Dependency); err != nil {
			e.invalidRows.Add(1)
			return false, err
		}
	}
	if err := r.validateShape(); err != nil {
		e.invalidRows.Add(1)
		return false, err
	}
	if r.Node == e.node {
		return false, nil
	}
	if e.members.isDead(r.Node) {
		return false, nil
	}
	if err := e.replayed(r.Node, r.Seq); err != nil {
		return false, err
	}
	if d == nil {
		var err error
		if d, err = e.create(r.Dependency, e.remoteLimit()); err != nil {
			return false, err
		}
	}
	now := e.nowNanos()
	d.mu.Lock()
	var row *rowEntry
	if i, ok := d.rowIdx[r.Node]; ok {
		row = &d.rows[i]
		if row.Seq >= r.Seq {
			d.mu.Unlock()
			return false, nil
		}
		r.Node = row.Node // share one copy of the name
	} else {
		if !e.rowCount.take(r.Node, e.maxRowsPerNode) {
			d.mu.Unlock()
			return false, fmt.Errorf("%w: %s has %d rows", ErrTooManyRows, r.Node, e.maxRowsPerNode)
		}
		r.Node = strings.Clone(r.Node)
		d.rowIdx[r.Node] = len(d.rows)
		d.rows = append(d.rows, rowEntry{})
		row = &d.rows[len(d.rows)-1]
	}
	r.Dependency = d.name // likewise
	d.fleet.add(r.Node, row.Cumulative, r.Cumulative)
	row.NodeWindow = *r
	row.received = now
	if len(d.rows) == 1 || now < d.oldestRow {
		d.oldestRow = now
	}
	d.classify(e, row)
	d.rowsVersion++
	// Another node's probe outcome may give this one its turn to probe
	// (or close the breaker): publish at once rather than at the next Tick.
	// Rare: only rows of a half-open breaker carry one.
	published := false
	if r.ProbeSuccesses|r.ProbeFailures != 0 && d.shared() {
		t := e.now()
		if rec := d.rec(e); r.Generation == rec.Generation && rec.StateAt(d.pol.Breaker, t) == HalfOpen {
			d.halfOpenTick(e, t, rec)
			published = d.refresh(e, t)
		}
	}
	e.unlock(d, published)
	return true, nil
}

// ApplyRecord is MergeRecord without the reason of a refusal.
func (e *Engine) ApplyRecord(r BreakerRecord) bool {
	ok, _ := e.MergeRecord(r)
	return ok
}

// MergeRecord merges a breaker record from elsewhere into this node's state.
// It returns true if the record changed this node's state, in which case the
// caller should pass it on (epidemic re-broadcast). It refuses, with an
// error RefusalReason names: malformed records; records at MaxGeneration
// (generations never wrap); records more than MaxGenerationStep past the
// held generation; records whose since is more than MaxClockSkew in the
// future; zone records of a dependency whose policy is not scope zone, or
// past MaxZones; records that would take a new dependency past 9/10 of
// MaxDependencies. Among the records that pass, Merge decides (see there);
// the bounds only ever refuse, so what is merged stays a semilattice.
func (e *Engine) MergeRecord(r BreakerRecord) (bool, error) {
	if err := r.Validate(); err != nil {
		e.invalidRecords.Add(1)
		return false, fmt.Errorf("%w: %v", ErrInvalidRecord, err)
	}
	if r.Generation > MaxGeneration {
		return false, fmt.Errorf("%w: %s generation %d", ErrGenerationMax, r.Dependency, r.Generation)
	}
	now := e.now()
	if err := e.tombs.check(e, r, now.UnixNano()); err != nil {
		return false, err
	}
	d := e.deps.load(r.Dependency)
	if d == nil {
		// A refused record must not leave a dependency behind: check it
		// against what a new dependency would hold first.
		e.mu.Lock()
		probe := depState{name: r.Dependency, pol: e.defaultFor(r.Dependency), records: map[string]BreakerRecord{}}
		e.mu.Unlock()
		if err := probe.checkRecord(e, r, now); err != nil {
			return false, err
		}
		var err error
		if d, err = e.create(r.Dependency, e.remoteLimit()); err != nil {
			return false, err
		}
	}
	d.mu.Lock()
	if err := d.checkRecord(e, r, now); err != nil {
		d.mu.Unlock()
		return false, err
	}
	changed := d.applyRecord(e, r, now)
	e.unlock(d, changed && d.refresh(e, now))
	return changed, nil
}

// RowsToSend returns this node's rows that changed since they were last
// returned, and rows due for a heartbeat (every window/2, slightly jittered,
// while the counts are not all zero). Each returned row has a new Seq; the
// caller gossips them.
func (e *Engine) RowsToSend() []NodeWindow {
	now := e.now()
	var out []NodeWindow
	e.eachDep(func(d *depState) {
		if r, ok := d.rowToSend(e, now); ok {
			out = append(out, r)
		}
	})
	return out
}

// UrgentRows returns the rows RowsToSend returned since the previous call
// that announce a failure burst at this node while the breaker is closed
// (see the fast path of the trip rule), or a new outcome of its half-open
// probes: the caller sends them straight to every member, besides
// gossiping them, so that the fleet pools the fresh failures, or the probe
// outcomes, within a network round trip. A node marks at most one row per
// dependency as urgent per window/2 for failures, and one per probe
// outcome.
func (e *Engine) UrgentRows() []NodeWindow {
	e.outMu.Lock()
	defer e.outMu.Unlock()
	out := e.urgent
	e.urgent = nil
	return out
}

func (e *Engine) enqueueUrgent(r NodeWindow) {
	e.outMu.Lock()
	e.urgent = append(e.urgent, r)
	e.outMu.Unlock()
}

// LocalRows returns the rows RowsToSend last returned for every dependency
// this node has something to report for (non-zero counts, or its own breaker
// open): the node's rows for a push-pull exchange.
func (e *Engine) LocalRows() []NodeWindow {
	var out []NodeWindow
	e.eachDep(func(d *depState) {
		if d.sent.valid && (!d.sent.row.Counts.IsZero() || d.sent.row.LocalOpen || d.sent.row.InFlight != 0) {
			out = append(out, d.sent.row)
		}
	})
	return out
}

// Records returns every breaker record this node holds beyond the initial
// closed state, ordered by dependency and zone: the records for a push-pull
// exchange.
func (e *Engine) Records() []BreakerRecord {
	var out []BreakerRecord
	e.eachDep(func(d *depState) { out = slices.AppendSeq(out, maps.Values(d.records)) })
	slices.SortFunc(out, compareRecords)
	return out
}

// compareRecords orders records by dependency, then zone.
func compareRecords(a, b BreakerRecord) int {
	return cmp.Or(strings.Compare(a.Dependency, b.Dependency), strings.Compare(a.Zone, b.Zone))
}
