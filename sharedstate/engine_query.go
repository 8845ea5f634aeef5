package sharedstate

import (
	"slices"
	"strings"
)

// Rows returns the live rows for dep, this node's own current counts
// included, ordered by node.
func (e *Engine) Rows(dep string) []NodeWindow {
	d := e.deps.load(dep)
	if d == nil {
		return nil
	}
	now := e.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	stale := 2 * int64(d.pol.Breaker.Window)
	out := []NodeWindow{d.ownRow(e, now)}
	out[0].Cumulative = d.ownCumulative(now)
	for _, r := range d.rows {
		if now.UnixNano()-r.received < stale {
			out = append(out, r.NodeWindow)
		}
	}
	slices.SortFunc(out, func(a, b NodeWindow) int { return strings.Compare(a.Node, b.Node) })
	return out
}

// Snapshot returns the current snapshot of dep, or nil if the engine does not
// track it.
func (e *Engine) Snapshot(dep string) *Snapshot {
	if d := e.deps.load(dep); d != nil {
		return d.snap.Load()
	}
	return nil
}

// Dependencies returns the names of the tracked dependencies, sorted.
func (e *Engine) Dependencies() []string {
	ds := e.deps.sortedValues()
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.name
	}
	return out
}

// FleetTotals are the totals of one dependency as this node sees them.
type FleetTotals struct {
	Dependency string
	Scope      Scope

	Fleet      Counts // every live row and this node's own window
	FleetNodes int    // nodes with any count in Fleet
	Zone       Counts // the rows of this node's zone, own window included
	ZoneNodes  int
	Node       Counts // this node's own window

	// Evaluated is what the trip rule and the retry budget see: the rows in
	// the policy's scope whose generation is the current record's or newer.
	Evaluated      Counts
	EvaluatedNodes int // nodes with requests in Evaluated
	FailingNodes   int // of those, nodes whose own rates meet a threshold

	RetryBudget float64 // retries the scope may make over the window
	RetryShare  float64 // this node's share of it
}

// Fleet returns dep's totals as this node sees them, and false if the engine
// does not track dep.
func (e *Engine) Fleet(dep string) (FleetTotals, bool) {
	d := e.deps.load(dep)
	if d == nil {
		return FleetTotals{}, false
	}
	now := e.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.scan(e, now.UnixNano(), d.rec(e).Generation)
	budget, share := d.pol.Retry.Budget.compute(d.pol.Breaker.Window.Std(), s)
	return FleetTotals{
		Dependency: d.name, Scope: d.pol.Breaker.Scope,
		Fleet: s.fleet, FleetNodes: s.fleetNodes, Zone: s.zone, ZoneNodes: s.zoneNodes, Node: s.own,
		Evaluated: s.eff, EvaluatedNodes: s.effNodes, FailingNodes: s.effFailing,
		RetryBudget: budget, RetryShare: share,
	}, true
}
