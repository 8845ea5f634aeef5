package history

import (
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate"
)

const dep = "shipping-api"

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// row is a node's row of dep with n calls in its window and c calls (all
// successes) in its series begun at since (Unix ms), read at at.
func row(dep, node string, seq, n, c uint64, since int64, at time.Time) sharedstate.NodeWindow {
	r := sharedstate.NodeWindow{Node: node, Dependency: dep, Seq: seq, Counts: sharedstate.Counts{FirstAttempts: n, Successes: n}}
	if since != 0 {
		r.Cumulative = sharedstate.Cumulative{Counts: sharedstate.Counts{FirstAttempts: c, Successes: c}, Since: since, At: at.UnixMilli()}
	}
	return r
}

func sum(t *testing.T, h *History, dep string, from, to time.Time) Slot {
	t.Helper()
	segs, err := h.Range(dep, from, to)
	if err != nil && !errors.Is(err, ErrNoHistory) {
		t.Fatal(err)
	}
	var s Slot
	for _, seg := range segs {
		for _, sl := range seg.Slots {
			s.Add(sl)
		}
	}
	return s
}

// TestRowsAddTheirIncrease: each row adds what the node's cumulative
// counts grew by since its previous row, in the slot of the node's reading
// (never more than Settle before the row arrived, never after); a series
// that began before the history watched is a baseline; a restart starts a
// series from zero; a row without cumulative counts (0.1.x) adds nothing
// and says so.
func TestRowsAddTheirIncrease(t *testing.T) {
	drops := map[string]int{}
	h := New(Config{OnDrop: func(r string) { drops[r]++ }})
	const w = 10 * time.Second
	h.Tick(t0, func(string) time.Duration { return w })
	old := t0.Add(-time.Hour).UnixMilli()    // a node up before the coordinator
	fresh := t0.Add(time.Second).UnixMilli() // a node started after it
	steps := []struct {
		name string
		r    sharedstate.NodeWindow
		recv time.Duration // after t0
		want uint32        // successes credited so far
		at   time.Duration // in the slot at t0+at, 100 ms wide (-1: none new)
	}{
		{"an old series: a baseline", row(dep, "a", 1, 5, 1000, old, t0.Add(2*time.Second)), 2100 * time.Millisecond, 0, -1},
		{"it grows by 7", row(dep, "a", 2, 12, 1007, old, t0.Add(3*time.Second)), 3100 * time.Millisecond, 7, 3 * time.Second},
		{"a fresh series: all of it", row(dep, "b", 1, 4, 4, fresh, t0.Add(4*time.Second)), 4050 * time.Millisecond, 11, 4 * time.Second},
		{"an older row is ignored", row(dep, "b", 1, 4, 4, fresh, t0.Add(4*time.Second)), 4060 * time.Millisecond, 11, -1},
		{"a reading 10 s before the row: dated Settle before it", row(dep, "b", 2, 6, 6, fresh, t0.Add(-5*time.Second)), 5 * time.Second, 13, 3 * time.Second},
		{"a reading in the future: dated at the receipt", row(dep, "a", 3, 13, 1008, old, t0.Add(time.Minute)), 6 * time.Second, 14, 6 * time.Second},
		{"a restarts: from zero", row(dep, "a", 4, 3, 3, t0.Add(7*time.Second).UnixMilli(), t0.Add(7500*time.Millisecond)), 7600 * time.Millisecond, 17, 7500 * time.Millisecond},
		{"c of 0.1.x: nothing", row(dep, "c", 1, 50, 0, 0, time.Time{}), 8 * time.Second, 17, -1},
	}
	for _, st := range steps {
		before := sum(t, h, dep, t0.Add(-time.Minute), t0.Add(time.Minute))
		h.ObserveRow(t0.Add(st.recv), st.r, w)
		after := sum(t, h, dep, t0.Add(-time.Minute), t0.Add(time.Minute))
		if after.Successes != st.want || after.FirstAttempts != st.want {
			t.Fatalf("%s: %d successes credited, want %d", st.name, after.Successes, st.want)
		}
		if st.at >= 0 {
			got := sum(t, h, dep, t0.Add(st.at), t0.Add(st.at+100*time.Millisecond))
			if d := after.Successes - before.Successes; got.Successes < d {
				t.Errorf("%s: %d of %d new successes in the slot at t0+%v", st.name, got.Successes, d, st.at)
			}
		}
	}
	if drops[DropNoTotals] != 1 {
		t.Errorf("drops %v: want one row without cumulative counts", drops)
	}
}

// TestWatchesFromItsStart: the history watches from Config.Start (the
// coordinator's start), not from the first row it receives: a series that
// began after the start counts from zero however late its first row comes
// (a dependency first seen mid-series), one that began before is a
// baseline (a coordinator started after the agents).
func TestWatchesFromItsStart(t *testing.T) {
	h := New(Config{Start: t0})
	const w = 10 * time.Second
	after := t0.Add(500 * time.Millisecond).UnixMilli()
	before := t0.Add(-time.Hour).UnixMilli()
	now := t0.Add(3 * time.Second) // the first thing the history hears of
	h.ObserveRow(now, row(dep, "late-first-row", 1, 40, 40, after, now), w)
	h.ObserveRow(now, row(dep, "up-before", 1, 40, 900, before, now), w)
	if got := sum(t, h, dep, t0.Add(-time.Minute), t0.Add(time.Minute)); got.Successes != 40 {
		t.Fatalf("%d successes credited, want the 40 of the series that began after the start (the other is a baseline)", got.Successes)
	}
	h.ObserveRow(now.Add(time.Second), row(dep, "up-before", 2, 45, 905, before, now.Add(time.Second)), w)
	if got := sum(t, h, dep, t0.Add(-time.Minute), t0.Add(time.Minute)); got.Successes != 45 {
		t.Fatalf("%d successes credited, want 45: the baseline's growth counts", got.Successes)
	}
}

// TestRoomForRealDependencies: a flood of 1,000 names with one call each
// fills the history; a busy dependency that appears next gets a history at
// its first row and a what-if replay range at once, and keeps it while the
// flood goes on; a dependency with a policy (pinned) keeps its history
// through the flood; a name with no traffic never takes a place.
func TestRoomForRealDependencies(t *testing.T) {
	drops := map[string]int{}
	h := New(Config{MaxDependencies: 64, OnDrop: func(r string) { drops[r]++ },
		Pinned: func(dep string) bool { return dep == "quiet-with-policy" }})
	const w = 10 * time.Second
	h.Tick(t0, func(string) time.Duration { return w })
	since := t0.Add(time.Second).UnixMilli()
	now := t0.Add(2 * time.Second)
	h.ObserveRow(now, row("quiet-with-policy", "a", 1, 1, 1, since, now), w)
	flood := func(from, n int) {
		for i := from; i < from+n; i++ {
			now = now.Add(time.Millisecond)
			h.ObserveRow(now, row(fmt.Sprintf("junk-%04d", i), "a", 1, 1, 1, since, now), w)
		}
	}
	flood(0, 1000)
	if n := h.Stats().Dependencies; n != 64 {
		t.Fatalf("%d histories after the flood, want 64", n)
	}
	if !h.Has("quiet-with-policy") {
		t.Fatal("the flood took the history of a dependency with a policy")
	}
	h.ObserveRow(now, row("silent", "a", 1, 0, 0, since, now), w)
	if h.Has("silent") {
		t.Error("a name without traffic took a place")
	}
	// The busy dependency's first rows, from three nodes: 50 calls each,
	// a baseline (its history begins now), then 50 more each.
	for i, node := range []string{"a", "b", "c", "a", "b", "c"} {
		now = now.Add(10 * time.Millisecond)
		h.ObserveRow(now, row("ledger-api", node, uint64(2+i), 50, uint64(50+50*(i/3)), since, now), w)
		if !h.Has("ledger-api") {
			t.Fatalf("the busy dependency got no history at its row %d (drops %v)", i, drops)
		}
	}
	segs, err := h.Range("ledger-api", now.Add(-time.Minute), now.Add(time.Second))
	if err != nil || len(segs) == 0 {
		t.Fatalf("Range of the busy dependency: %v, %d segments", err, len(segs))
	}
	// More junk, a minute on: the busy dependency keeps its place.
	now = now.Add(time.Minute)
	flood(1000, 1000)
	for _, dep := range []string{"ledger-api", "quiet-with-policy"} {
		if !h.Has(dep) {
			t.Errorf("%s lost its history to the second flood", dep)
		}
	}
	if got := sum(t, h, "ledger-api", t0, now); got.FirstAttempts != 150 {
		t.Errorf("the busy dependency's history holds %d first attempts, want 150", got.FirstAttempts)
	}
	if drops[DropEvicted] == 0 || drops[DropTooManyDependencies] == 0 {
		t.Errorf("drops %v: want evictions and refusals counted", drops)
	}
}

// TestOpenBreakerKeepsItsHistory: a dependency whose breaker is open keeps
// its history whatever its traffic, and an open record makes room for
// itself; once closed, it is ranked by its traffic again.
func TestOpenBreakerKeepsItsHistory(t *testing.T) {
	h := New(Config{MaxDependencies: 2})
	const w = 10 * time.Second
	h.Tick(t0, func(string) time.Duration { return w })
	since := t0.Add(time.Second).UnixMilli()
	now := t0.Add(2 * time.Second)
	h.ObserveRow(now, row("a", "n", 1, 100, 100, since, now), w)
	h.ObserveRow(now, row("b", "n", 2, 100, 100, since, now), w)
	h.ObserveRecord(now, sharedstate.BreakerRecord{Dependency: "c", Generation: 1, State: sharedstate.Open, OpenCount: 1, Origin: "n"})
	if !h.Has("c") || h.Stats().Dependencies != 2 {
		t.Fatalf("an open record got no history: %+v", h.Stats())
	}
	h.ObserveRow(now, row("d", "n", 3, 1000, 1000, since, now), w)
	if !h.Has("c") {
		t.Fatal("a busier dependency took the place of one whose breaker is open")
	}
	h.ObserveRecord(now, sharedstate.BreakerRecord{Dependency: "c", Generation: 2, State: sharedstate.Closed, Origin: "n"})
	h.ObserveRow(now.Add(time.Second), row("e", "n", 4, 1000, 1000, since, now.Add(time.Second)), w)
	if h.Has("c") || !h.Has("e") {
		t.Error("once closed, the quiet dependency kept its place against a busier one")
	}
}

// TestLimits: a node past MaxNodes is refused while every tracked node is
// recent, and takes the place of one silent for two windows.
func TestLimits(t *testing.T) {
	drops := map[string]int{}
	h := New(Config{MaxNodes: 1, OnDrop: func(r string) { drops[r]++ }})
	const w = 10 * time.Second
	since := t0.Add(time.Second).UnixMilli()
	h.Tick(t0, func(string) time.Duration { return w })
	h.ObserveRow(t0.Add(2*time.Second), row(dep, "n1", 1, 1, 1, since, t0.Add(2*time.Second)), w)
	h.ObserveRow(t0.Add(2*time.Second), row(dep, "n2", 1, 1, 1, since, t0.Add(2*time.Second)), w)
	if drops[DropTooManyNodes] != 1 {
		t.Fatalf("drops %v: want a node refused", drops)
	}
	later := t0.Add(time.Minute)
	h.ObserveRow(later, row(dep, "n2", 2, 1, 2, since, later), w)
	if got := sum(t, h, dep, t0, later.Add(time.Second)); got.Successes != 1 || h.Stats().Nodes != 1 {
		t.Errorf("after n1 went quiet: %d successes, %d nodes; want n2 in as a baseline (its series began before n1 was let go)", got.Successes, h.Stats().Nodes)
	}
}

// TestBytesPerDependency measures the memory of a dependency with traffic
// in every slot of both horizons and rows from 10 nodes: coordinator/README.md's
// figure. Bytes() is the history's own account; the heap growth of 20 such
// dependencies is measured too.
func TestBytesPerDependency(t *testing.T) {
	fill := func(h *History, name string) {
		now := t0
		for i := range 10 {
			h.ObserveRow(now, row(name, fmt.Sprintf("node-%02d", i), 1, 1, 1, now.UnixMilli(), now), 10*time.Second)
		}
		h.mu.Lock()
		d := h.deps[name]
		for _, tr := range []*tier{&d.fine, &d.coarse} {
			span := time.Duration(len(tr.chunks)-1) * chunkSlots * time.Duration(tr.step)
			for at := now.Add(-span); at.Before(now); at = at.Add(time.Duration(tr.step)) {
				if s := tr.slot(at.UnixNano()); s != nil {
					s.Successes++
				}
			}
		}
		h.mu.Unlock()
	}
	h := New(Config{})
	fill(h, dep)
	b := h.Bytes(dep)
	t.Logf("one dependency at the defaults (fine %v at 100ms, coarse %v at 1s, 10 nodes): %d bytes (%.0f KiB)",
		DefaultFineHorizon, DefaultCoarseHorizon, b, float64(b)/1024)
	if b < 800<<10 || b > 1100<<10 {
		t.Errorf("a full dependency accounts for %d bytes, want 0.8-1.1 MiB", b)
	}

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	h2 := New(Config{})
	for i := range 20 {
		fill(h2, fmt.Sprintf("dep-%02d", i))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / 20
	t.Logf("heap growth of 20 full dependencies: %.0f KiB each (account: %.0f KiB)", per/1024, float64(h2.Stats().Bytes)/20/1024)
	runtime.KeepAlive(h2)
}
