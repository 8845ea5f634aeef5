package sharedstate

import "time"

// Cumulative is a node's cumulative counts of one dependency, as its rows
// carry them: everything it counted since it began counting the dependency.
// They never go back within one series, so a sum over nodes is a counter.
type Cumulative struct {
	Counts
	// Since names the series: when the node began counting the dependency
	// (its start, or taking the dependency up again after forgetting it
	// idle), Unix ms of its clock. 0: the row carries no cumulative counts
	// (a node of 0.1.x).
	Since int64 `json:"since,omitempty"`
	// At is when the node read the counts, Unix ms of its clock (≥ Since).
	At int64 `json:"at,omitempty"`
}

// Known reports whether the row carried cumulative counts.
func (c Cumulative) Known() bool { return c.Since != 0 }

// valid: no cumulative counts at all, or a series and a reading after it.
func (c *Cumulative) valid() bool {
	if c.Since == 0 {
		return c.At == 0 && c.Counts.IsZero()
	}
	return c.Since > 0 && c.At >= c.Since
}

// Increase is what next, a node's cumulative counts, adds to a sum over
// nodes after prev, the node's previous reading (held false: none known):
// the difference within a series; all of next for a new series (another
// Since, or a count that went back); for a series first seen, all of it if
// it began after watchedSince (Unix ms: the sum saw none of it), else
// nothing (a baseline: its counts are of a time the sum did not watch).
func Increase(prev Cumulative, held bool, next Cumulative, watchedSince int64) Counts {
	switch {
	case !next.Known():
		return Counts{}
	case held && prev.Known():
		if d, ok := next.Counts.minus(prev.Counts); ok && prev.Since == next.Since {
			return d
		}
		return next.Counts
	case next.Since > watchedSince:
		return next.Counts
	}
	return Counts{}
}

// minus returns c − o, and false when a count of c is below o's.
func (c Counts) minus(o Counts) (Counts, bool) {
	a, b := c.values(), o.values()
	for i := range a {
		if a[i] < b[i] {
			return Counts{}, false
		}
		a[i] -= b[i]
	}
	return countsOf(a), true
}

func (c Counts) values() [numCounters]uint64 {
	return [numCounters]uint64{c.FirstAttempts, c.Retries, c.Successes, c.Failures, c.SlowCalls, c.Rejected}
}

func countsOf(v [numCounters]uint64) Counts {
	return Counts{FirstAttempts: v[cFirst], Retries: v[cRetries], Successes: v[cSuccesses], Failures: v[cFailures],
		SlowCalls: v[cSlow], Rejected: v[cRejected]}
}

// cumulative is everything ever added to w and the windows it continues: a
// reused bucket's counts move into w.retired under w.mu, so a reading
// (under w.mu too) counts each add once and never goes back.
func (w *Window) cumulative() Counts {
	s := w.base
	for _, v := range [][numCounters]uint64{w.own(), w.prev.own()} {
		for i := range s {
			s[i] = satAdd(s[i], v[i])
		}
	}
	return countsOf(s)
}

// own is w's retired counts plus all its buckets, whatever time they hold
// (zero for a nil w).
func (w *Window) own() (s [numCounters]uint64) {
	if w == nil {
		return s
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	s = w.retired
	for k := range w.s {
		for i := range w.s[k].b {
			for j := range s {
				s[j] = satAdd(s[j], w.s[k].b[i].c[j].Load())
			}
		}
	}
	return s
}

// continueWindow returns an empty window of the given length whose
// cumulative counts go on from old's (nil: from zero). old stays readable
// until this window is replaced in turn: an add that picked old's bucket
// before the swap still counts (one that raced two replacements, seconds
// apart in practice, would not).
func continueWindow(old *Window, length time.Duration) *Window {
	w := NewWindow(length)
	if old != nil {
		w.base, w.prev = old.base, old
		for i, v := range old.prev.own() {
			w.base[i] = satAdd(w.base[i], v)
		}
	}
	return w
}

// fleetSum is the sum over the other nodes of their cumulative counts of
// one dependency, as this node saw them: each row adds its Increase over
// the node's held row or, for a node whose row went, over the last counts
// remembered of it (up to max(64, 2×live rows) nodes; past that the
// longest gone is forgotten, and a series first seen that began before its
// last reading becomes a baseline). Guarded by the dependency's lock.
type fleetSum struct {
	since   int64 // this node's series of the dependency, Unix ms
	watched int64 // Increase's watchedSince
	sum     Counts
	gone    map[string]goneSeries
	goneN   uint64
}

type goneSeries struct {
	last Cumulative
	n    uint64 // order of going
}

func newFleetSum(now time.Time) fleetSum {
	ms := max(now.UnixMilli(), 1)
	return fleetSum{since: ms, watched: ms}
}

// add takes next, a new row's counts, over prev, the replaced row's.
func (f *fleetSum) add(node string, prev, next Cumulative) {
	held := prev.Known()
	if g, ok := f.gone[node]; ok && !held {
		prev, held = g.last, true
		delete(f.gone, node)
	}
	f.sum = f.sum.Plus(Increase(prev, held, next, f.watched))
}

// remove remembers the last counts of a node whose row goes.
func (f *fleetSum) remove(node string, last Cumulative, rows int) {
	if !last.Known() {
		return
	}
	if f.gone == nil {
		f.gone = map[string]goneSeries{}
	}
	f.goneN++
	f.gone[node] = goneSeries{last: last, n: f.goneN}
	if len(f.gone) <= max(64, 2*rows) {
		return
	}
	oldest := node
	for n, g := range f.gone {
		if g.n < f.gone[oldest].n {
			oldest = n
		}
	}
	f.watched = max(f.watched, f.gone[oldest].last.At)
	delete(f.gone, oldest)
}

// CumulativeCounts are a dependency's cumulative counts at this node.
type CumulativeCounts struct {
	// Node is what this node counted since Since (Unix ms).
	Node  Counts
	Since int64
	// Fleet is Node plus what the other nodes' rows added since, across
	// their restarts and departures: it never goes back while the engine
	// tracks the dependency. Nodes of 0.1.x (no cumulative counts) are not
	// in it.
	Fleet Counts
}

// Cumulative returns dep's cumulative counts, and false if the engine does
// not track dep (one forgotten idle and taken up again starts from zero,
// with a new Since).
func (e *Engine) Cumulative(dep string) (CumulativeCounts, bool) {
	d := e.deps.load(dep)
	if d == nil {
		return CumulativeCounts{}, false
	}
	own := d.win.Load().cumulative()
	d.mu.Lock()
	defer d.mu.Unlock()
	return CumulativeCounts{Node: own, Since: d.fleet.since, Fleet: own.Plus(d.fleet.sum)}, true
}

// ownCumulative is this node's cumulative counts at now, for its row.
func (d *depState) ownCumulative(now time.Time) Cumulative {
	return Cumulative{Counts: d.win.Load().cumulative(), Since: d.fleet.since, At: max(now.UnixMilli(), d.fleet.since)}
}
