package history

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate"
)

const dep = "shipping-api"

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// truth is what the nodes really counted, per second since t0.
type truth map[int64]*Slot

func (tr truth) add(at time.Time, f func(s *Slot)) {
	sec := at.Sub(t0).Milliseconds() / 1000
	s, ok := tr[sec]
	if !ok {
		s = &Slot{}
		tr[sec] = s
	}
	f(s)
}

// fleetRun drives n real engines (no gossip between them: each counts its
// own callers) through healthy, failing (only the nodes in failing fail)
// and recovered phases, and feeds their rows to h as gossip would: each
// node's newest row replaces an unsent one, a gossip round every 100 to
// 300 ms delivers what is pending 5 to 150 ms later. It returns the truth.
func fleetRun(t *testing.T, h *History, n int, seed uint64, failing map[int]bool, start, healthy, failFor, after time.Duration) truth {
	t.Helper()
	clock := sharedstate.NewManualClock(t0)
	rng := rand.New(rand.NewPCG(seed, seed^0x51))
	var engines []*sharedstate.Engine
	for i := range n {
		e, err := sharedstate.NewEngine(sharedstate.EngineConfig{Node: fmt.Sprintf("node-%d", i), Zone: fmt.Sprintf("z%d", i%2), Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		engines = append(engines, e)
	}
	type pending struct {
		row sharedstate.NodeWindow
		at  time.Time // delivery time
	}
	queued := make([]*sharedstate.NodeWindow, n)
	var inFlight []pending
	nextRound := make([]time.Time, n)
	tr := truth{}
	h.Tick(t0, func(string) time.Duration { return 10 * time.Second })
	end := start + healthy + failFor + after
	for now := t0; now.Before(t0.Add(end)); now = clock.Advance(10 * time.Millisecond) {
		el := now.Sub(t0)
		for i, e := range engines {
			if el < start {
				break
			}
			// 30 to 60 calls a second per node.
			calls := 0
			if rng.Float64() < 0.3+0.3*float64(i%2) {
				calls = 1
			}
			for range calls {
				fail := failing[i] && el >= start+healthy && el < start+healthy+failFor
				o := sharedstate.Success
				if fail {
					o = sharedstate.Failure
				}
				switch d := e.Snapshot(dep).DecideFirst(); d.Verdict {
				case sharedstate.Reject:
					_ = e.Record(dep, sharedstate.FirstAttempt, sharedstate.Rejected)
					tr.add(now, func(s *Slot) { s.Rejected++ })
					continue
				case sharedstate.AllowProbe:
					p := e.AcquireProbe(dep)
					if !p.Allowed() {
						tr.add(now, func(s *Slot) { s.Rejected++ })
						continue
					}
					_ = e.Record(dep, sharedstate.Probe, o)
					tr.add(now, func(s *Slot) {
						s.FirstAttempts++
						if fail {
							s.Failures++
						} else {
							s.Successes++
						}
					})
					if p.Verdict == sharedstate.AllowProbe {
						if rec, ok := e.ProbeResult(dep, !fail); ok {
							for _, o := range engines {
								o.ApplyRecord(rec)
							}
							h.ObserveRecord(now, rec)
						}
					}
					continue
				}
				_ = e.Record(dep, sharedstate.FirstAttempt, o)
				tr.add(now, func(s *Slot) {
					s.FirstAttempts++
					if fail {
						s.Failures++
					} else {
						s.Successes++
					}
				})
				if fail {
					if e.AcquireRetry(dep).Allowed() {
						_ = e.Record(dep, sharedstate.Retry, sharedstate.Failure)
						tr.add(now, func(s *Slot) { s.Retries++; s.Failures++ })
					} else {
						tr.add(now, func(s *Slot) { s.Rejected++ })
					}
				}
			}
		}
		if el%(50*time.Millisecond) == 0 {
			var recs []sharedstate.BreakerRecord
			var rows []sharedstate.NodeWindow
			for i, e := range engines {
				recs = append(recs, e.Tick()...)
				for _, r := range e.RowsToSend() {
					r := r
					queued[i] = &r
					rows = append(rows, r)
				}
			}
			// The fleet shares its rows and records at once; the observer
			// merges the records.
			for _, e := range engines {
				for _, r := range rows {
					e.ApplyRow(r)
				}
				for _, r := range recs {
					e.ApplyRecord(r)
				}
			}
			for _, r := range recs {
				h.ObserveRecord(now, r)
			}
		}
		for i := range engines {
			if now.Before(nextRound[i]) {
				continue
			}
			nextRound[i] = now.Add(100*time.Millisecond + time.Duration(rng.IntN(200))*time.Millisecond)
			if queued[i] != nil {
				inFlight = append(inFlight, pending{row: *queued[i], at: now.Add(5*time.Millisecond + time.Duration(rng.IntN(145))*time.Millisecond)})
				queued[i] = nil
			}
		}
		keep := inFlight[:0]
		for _, p := range inFlight {
			if now.Before(p.at) {
				keep = append(keep, p)
				continue
			}
			h.ObserveRow(now, p.row, 10*time.Second)
		}
		inFlight = keep
		if el%time.Second == 0 {
			h.Tick(now, func(string) time.Duration { return 10 * time.Second })
		}
	}
	return tr
}

// TestHistoryAddsUpWhatTheNodesCounted: the history rebuilt from rows that
// arrive late and superseded holds what a fleet of real engines counted
// through an incident (two of four nodes fail, the breaker opens, probes,
// closes): successes and failures within 2% over the run and, at every
// second, what it credited so far within a second of traffic of the truth
// (counts land when their row arrives, up to a few hundred ms late); first
// attempts, retries and rejections, which only the window totals carry,
// within 4% and two seconds (plus a few counts: around a transition a
// node's bucket may be taken to leave its window a row early or late). Only
// the failing nodes have failure bits.
func TestHistoryAddsUpWhatTheNodesCounted(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			h := New(Config{})
			failing := map[int]bool{0: true, 1: true}
			tr := fleetRun(t, h, 4, seed, failing, 25*time.Second, 20*time.Second, 15*time.Second, 20*time.Second)
			end := t0.Add(80 * time.Second)
			segs, err := h.Range(dep, t0, end)
			if err != nil {
				t.Fatal(err)
			}
			if len(segs) != 1 || segs[0].Step != 100*time.Millisecond {
				t.Fatalf("segments %d, step %v: want one fine segment of 100ms", len(segs), segs[0].Step)
			}
			got := map[int64]*Slot{}
			var failBits uint64
			for i, s := range segs[0].Slots {
				at := segs[0].From.Add(time.Duration(i) * segs[0].Step)
				sec := at.Sub(t0).Milliseconds() / 1000
				if got[sec] == nil {
					got[sec] = &Slot{}
				}
				got[sec].Add(s)
				failBits |= s.FailingNodes
			}
			type field struct {
				name string
				f    func(s *Slot) uint32
				// within: the share of the total, and seconds of the busiest
				// second's traffic, the history may stray by. Outcomes come
				// from the rows' fine suffixes; first attempts, retries and
				// rejections from their window totals, coarser.
				share, seconds, slack float64
			}
			fields := []field{
				{"first attempts", func(s *Slot) uint32 { return s.FirstAttempts }, 0.04, 2, 15},
				{"retries", func(s *Slot) uint32 { return s.Retries }, 0.04, 2, 15},
				{"successes", func(s *Slot) uint32 { return s.Successes }, 0.02, 1, 8},
				{"failures", func(s *Slot) uint32 { return s.Failures }, 0.02, 1, 8},
				{"rejected", func(s *Slot) uint32 { return s.Rejected }, 0.04, 2, 15},
			}
			for _, f := range fields {
				var cumT, cumG, worst, rate float64
				for sec := int64(0); sec < 80; sec++ {
					if s := tr[sec]; s != nil {
						cumT += float64(f.f(s))
						rate = max(rate, float64(f.f(s)))
					}
					if s := got[sec]; s != nil {
						cumG += float64(f.f(s))
					}
					worst = max(worst, abs(cumG-cumT))
				}
				t.Logf("%s: true %v, history %v, worst running difference %v (busiest second %v)", f.name, cumT, cumG, worst, rate)
				if abs(cumG-cumT) > f.share*cumT+f.slack {
					t.Errorf("%s: the history holds %v, the nodes counted %v", f.name, cumG, cumT)
				}
				if worst > f.seconds*rate+f.slack {
					t.Errorf("%s: the history's running total strays %v from the truth, more than %v s of its busiest second (%v)", f.name, worst, f.seconds, rate)
				}
			}
			if n := bits.OnesCount64(failBits); n != 2 {
				t.Errorf("failure bits %b: want the two failing nodes only", failBits)
			}
		})
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

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
// in every slot of both horizons and rows from 10 nodes: the README's
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
