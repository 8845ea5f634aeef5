package history

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate"
)

const dep = "shipping-api"

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// TestColdStartCreditsNothingOld: rows of a coordinator that just started
// hold windows of traffic it did not see: it credits only what comes after.
func TestColdStartCreditsNothingOld(t *testing.T) {
	h := New(Config{})
	row := sharedstate.NodeWindow{Node: "n", Dependency: dep, Seq: 1,
		Counts: sharedstate.Counts{FirstAttempts: 100, Successes: 100}}
	row.Recent[6] = sharedstate.RecentCounts{Successes: 60}
	for k := range 6 {
		row.Recent[k] = sharedstate.RecentCounts{Successes: uint32(k + 1)}
	}
	h.ObserveRow(t0, row, 10*time.Second)
	segs, _ := h.Range(dep, t0.Add(-time.Minute), t0.Add(time.Second))
	for _, s := range segs {
		for _, sl := range s.Slots {
			if !sl.IsZero() {
				t.Fatalf("a cold first row credited %+v", sl)
			}
		}
	}
	// The next row, 300 ms later, adds 5 successes in its newest sub-bucket.
	next := row
	next.Seq = 2
	next.Counts.Successes, next.Counts.FirstAttempts = 105, 105
	next.Recent = sharedstate.Recent{}
	for k := range 7 {
		next.Recent[k] = sharedstate.RecentCounts{Successes: 5 + uint32(min(k, 6))}
	}
	h.ObserveRow(t0.Add(300*time.Millisecond), next, 10*time.Second)
	segs, _ = h.Range(dep, t0.Add(-time.Minute), t0.Add(time.Second))
	var sum Slot
	for _, s := range segs {
		for _, sl := range s.Slots {
			sum.Add(sl)
		}
	}
	if sum.FirstAttempts != 5 || sum.Successes == 0 || sum.Successes > 8 {
		t.Fatalf("after a second row: %+v, want 5 first attempts and a few successes", sum)
	}
}

// TestLimits: a dependency past MaxDependencies and a node past MaxNodes
// are refused with their reasons; an idle dependency gives its place back.
func TestLimits(t *testing.T) {
	drops := map[string]int{}
	h := New(Config{MaxDependencies: 2, MaxNodes: 1, FineHorizon: time.Minute, CoarseHorizon: 2 * time.Minute,
		OnDrop: func(r string) { drops[r]++ }})
	row := func(dep, node string, seq uint64) sharedstate.NodeWindow {
		return sharedstate.NodeWindow{Node: node, Dependency: dep, Seq: seq, Counts: sharedstate.Counts{Successes: 1}}
	}
	h.ObserveRow(t0, row("a", "n1", 1), 10*time.Second)
	h.ObserveRow(t0, row("b", "n1", 1), 10*time.Second)
	h.ObserveRow(t0, row("c", "n1", 1), 10*time.Second)
	h.ObserveRow(t0, row("a", "n2", 1), 10*time.Second)
	if drops[DropTooManyDependencies] != 1 || drops[DropTooManyNodes] != 1 {
		t.Fatalf("drops %v: want one of each limit", drops)
	}
	if _, err := h.Range("c", t0, t0.Add(time.Second)); err == nil {
		t.Fatal("a refused dependency has a history")
	}
	// Three minutes later, nothing left of a and b: c may come in.
	h.Tick(t0.Add(3*time.Minute), func(string) time.Duration { return 10 * time.Second })
	if st := h.Stats(); st.Dependencies != 0 {
		t.Fatalf("after the horizon: %+v, want nothing kept", st)
	}
	h.ObserveRow(t0.Add(3*time.Minute), row("c", "n1", 2), 10*time.Second)
	if !h.Has("c") {
		t.Fatal("c refused after the others left")
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
			h.ObserveRow(now, sharedstate.NodeWindow{Node: fmt.Sprintf("node-%02d", i), Dependency: name, Seq: 1,
				Counts: sharedstate.Counts{Successes: 1}}, 10*time.Second)
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
