package sharedstate

import (
	"time"
)

// Cumulative is a node's cumulative counts of one dependency, as its rows
// carry them: everything the node counted since it began counting the
// dependency, never going back within one series. A sum over nodes of
// these is what a counter needs: Prometheus can take its rate, and a
// history its exact increase between two rows.
type Cumulative struct {
	Counts
	// Since is when the node began counting the dependency, in Unix
	// milliseconds of its clock: its start, or when it took the dependency
	// up again after forgetting it idle. Another Since is another series,
	// counted from zero. 0: the row carries no cumulative counts (a node of
	// 0.1.x).
	Since int64 `json:"since,omitempty"`
	// At is when the node read the counts, in Unix milliseconds of its
	// clock (at least Since).
	At int64 `json:"at,omitempty"`
}

// Known reports whether the row carried cumulative counts.
func (c Cumulative) Known() bool { return c.Since != 0 }

// valid checks the shape of a received row's cumulative counts: none at
// all, or a series start and a reading at or after it.
func (c *Cumulative) valid() bool {
	if c.Since == 0 {
		return c.At == 0 && c.Counts.IsZero()
	}
	return c.Since > 0 && c.At >= c.Since
}

// Increase is what next, a node's cumulative counts, adds to a sum of
// such counts over nodes after prev, the same node's previous reading
// (held false: none is known). Within one series it is the difference. A
// new series (another Since, or a count that went back) counts from zero.
// A series seen for the first time counts from zero when it began after
// watchedSince (Unix ms; the sum has seen nothing of it before), and is a
// baseline otherwise: it adds nothing, as its counts before are of a time
// the sum did not watch (or already took). Counts saturate at MaxCount.
func Increase(prev Cumulative, held bool, next Cumulative, watchedSince int64) Counts {
	if !next.Known() {
		return Counts{}
	}
	if held && prev.Known() {
		if prev.Since == next.Since {
			if d, ok := next.Counts.minus(prev.Counts); ok {
				return d
			}
		}
		return next.Counts // a restart, or a series that went back
	}
	if next.Since > watchedSince {
		return next.Counts
	}
	return Counts{}
}

// minus returns c − o, and false when a count of c is below o's.
func (c Counts) minus(o Counts) (Counts, bool) {
	a, b := c.values(), o.values()
	var d [numCounters]uint64
	for i := range a {
		if a[i] < b[i] {
			return Counts{}, false
		}
		d[i] = a[i] - b[i]
	}
	return countsOf(d), true
}

func (c Counts) values() [numCounters]uint64 {
	return [numCounters]uint64{c.FirstAttempts, c.Retries, c.Successes, c.Failures, c.SlowCalls, c.Rejected}
}

func countsOf(v [numCounters]uint64) Counts {
	return Counts{FirstAttempts: v[cFirst], Retries: v[cRetries], Successes: v[cSuccesses], Failures: v[cFailures],
		SlowCalls: v[cSlow], Rejected: v[cRejected]}
}

// ---- this node's cumulative counts: the window keeps them ----

// cumulative returns everything ever added to w and to the windows it
// continues (continueWindow): a bucket's counts move into w.retired when
// the bucket is reused, under w.mu, so that nothing is counted twice or
// lost. Successive calls never return less.
func (w *Window) cumulative() Counts {
	s := w.base
	add := func(v [numCounters]uint64) {
		for i := range s {
			s[i] = satAdd(s[i], v[i])
		}
	}
	add(w.own())
	if w.prev != nil {
		add(w.prev.own()) // adds that were on their way when w replaced it
	}
	return countsOf(s)
}

// own is what w itself holds: its retired counts and every bucket, whatever
// time it holds.
func (w *Window) own() [numCounters]uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.retired
	for k := range w.s {
		for i := range w.s[k].b {
			b := &w.s[k].b[i]
			for j := range s {
				s[j] = satAdd(s[j], b.c[j].Load())
			}
		}
	}
	return s
}

// continueWindow returns an empty window of the given length whose
// cumulative counts go on from old's (nil: from zero). old stays readable
// by cumulative until the next window replaces this one, so that an add
// that had picked old's bucket before the swap still counts.
func continueWindow(old *Window, length time.Duration) *Window {
	w := NewWindow(length)
	if old == nil {
		return w
	}
	w.base = old.base
	if old.prev != nil {
		p := old.prev.own()
		for i := range w.base {
			w.base[i] = satAdd(w.base[i], p[i])
		}
	}
	w.prev = old
	return w
}

// ---- the fleet's cumulative counts, as this node sees them ----

// goneSeries is what a fleet sum remembers of a node whose row it no
// longer holds: the node's last cumulative counts, so that its next row
// adds only what is new.
type goneSeries struct {
	last Cumulative
	n    uint64 // order of going
}

// minGoneSeries is how many gone nodes' series a dependency remembers at
// least; it remembers up to twice its live rows when they are more.
const minGoneSeries = 64

// fleetSum is the sum over the other nodes of their cumulative counts of
// one dependency (this node's own are its window's), kept monotonic across
// their restarts and departures: each row adds its Increase over the
// node's previous one, which the held row is, or a gone node's last. Guarded
// by the dependency's lock.
type fleetSum struct {
	since   int64 // this dependency's series start here, Unix ms
	watched int64 // Unix ms: series that began before are a baseline when first seen
	sum     Counts
	gone    map[string]goneSeries
	goneN   uint64
}

func newFleetSum(now time.Time) fleetSum {
	ms := max(now.UnixMilli(), 1)
	return fleetSum{since: ms, watched: ms}
}

// add takes next, a new row's cumulative counts, over prev, those of the
// row it replaces (the zero value for a node without a held row).
func (f *fleetSum) add(node string, prev, next Cumulative) {
	held := prev.Known()
	if !held {
		if g, ok := f.gone[node]; ok {
			prev, held = g.last, true
			delete(f.gone, node)
		}
	}
	f.sum = f.sum.Plus(Increase(prev, held, next, f.watched))
}

// remove remembers the last counts of a node whose row goes, up to
// max(minGoneSeries, 2×rows) nodes; past that the longest gone is
// forgotten, and from then on a series first seen that began before that
// node's last reading (on its clock) is a baseline: that node's next row
// adds nothing rather than its whole series again.
func (f *fleetSum) remove(node string, last Cumulative, rows int) {
	if !last.Known() {
		return
	}
	if f.gone == nil {
		f.gone = map[string]goneSeries{}
	}
	f.goneN++
	f.gone[node] = goneSeries{last: last, n: f.goneN}
	if len(f.gone) <= max(minGoneSeries, 2*rows) {
		return
	}
	oldest := ""
	for n, g := range f.gone {
		if oldest == "" || g.n < f.gone[oldest].n {
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
	// Fleet is Node plus what the other nodes' rows added since, each
	// node's restarts and departures included: it never goes back while the
	// engine tracks the dependency. Nodes whose rows carry no cumulative
	// counts (0.1.x) are not in it.
	Fleet Counts
}

// Cumulative returns dep's cumulative counts, and false if the engine does
// not track dep (a dependency forgotten idle and taken up again starts
// from zero, with a new Since).
func (e *Engine) Cumulative(dep string) (CumulativeCounts, bool) {
	d := e.lookup(dep)
	if d == nil {
		return CumulativeCounts{}, false
	}
	own := d.win.Load().cumulative()
	d.mu.Lock()
	defer d.mu.Unlock()
	return CumulativeCounts{Node: own, Since: d.fleet.since, Fleet: own.Plus(d.fleet.sum)}, true
}

// ownCumulative is this node's row's cumulative counts at now.
func (d *depState) ownCumulative(now time.Time) Cumulative {
	return Cumulative{Counts: d.win.Load().cumulative(), Since: d.fleet.since, At: max(now.UnixMilli(), d.fleet.since)}
}
