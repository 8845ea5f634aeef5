package history_test

import (
	"fmt"
	"math/bits"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/coordinator/internal/history"
	"github.com/fusebox-dev/fusebox/coordinator/internal/history/historytest"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// TestHistoryAddsUpWhatTheNodesCounted: the history built from rows that
// arrive late (5 to 450 ms) and superseded holds exactly what a fleet of
// real engines counted through an incident (two of four nodes fail, the
// breaker opens, probes, closes), each count in the slot of the row that
// first carried it: at every second the running total trails the truth
// by no more than the calls of one gossip round (100 to 300 ms here: a row
// superseded before its round went out hands its counts to the next). Only
// the failing nodes have failure bits.
func TestHistoryAddsUpWhatTheNodesCounted(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			h := history.New(history.Config{})
			t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
			const dep = "shipping-api"
			// Two of four nodes fail from 45 s to 60 s; calls end at 75 s.
			fleet := historytest.Run(t, h, historytest.Config{Dependency: dep, Nodes: 4, Seed: seed, Policy: sharedstate.DefaultPolicy(),
				Rate:  func(i int) float64 { return 30 + 30*float64(i%2) },
				Fails: func(i int, el time.Duration) bool { return i < 2 && el >= 45*time.Second && el < 60*time.Second },
				Start: t0, Begin: 25 * time.Second, Stop: 75 * time.Second, Retries: true}, 80*time.Second)
			tr := fleet.Truth
			segs, err := h.Range(dep, t0, t0.Add(80*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if len(segs) != 1 || segs[0].Step != 100*time.Millisecond {
				t.Fatalf("segments %d, step %v: want one fine segment of 100ms", len(segs), segs[0].Step)
			}
			got := map[int64]*history.Slot{}
			var failBits uint64
			for i, s := range segs[0].Slots {
				at := segs[0].From.Add(time.Duration(i) * segs[0].Step)
				sec := at.Sub(t0).Milliseconds() / 1000
				if got[sec] == nil {
					got[sec] = &history.Slot{}
				}
				got[sec].Add(s)
				failBits |= s.FailingNodes
			}
			fields := []struct {
				name string
				f    func(s *history.Slot) uint32
			}{
				{"first attempts", func(s *history.Slot) uint32 { return s.FirstAttempts }},
				{"retries", func(s *history.Slot) uint32 { return s.Retries }},
				{"successes", func(s *history.Slot) uint32 { return s.Successes }},
				{"failures", func(s *history.Slot) uint32 { return s.Failures }},
				{"slow calls", func(s *history.Slot) uint32 { return s.SlowCalls }},
				{"rejected", func(s *history.Slot) uint32 { return s.Rejected }},
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
					if cumG > cumT {
						t.Errorf("%s: by second %d the history holds %v, more than the nodes counted (%v)", f.name, sec, cumG, cumT)
					}
					worst = max(worst, cumT-cumG)
				}
				t.Logf("%s: true %v, history %v, most behind %v (busiest second %v)", f.name, cumT, cumG, worst, rate)
				if cumG != cumT {
					t.Errorf("%s: the history holds %v, the nodes counted %v", f.name, cumG, cumT)
				}
				if worst > 0.3*rate+2 {
					t.Errorf("%s: the history's running total trails the truth by %v, more than a 300 ms gossip round of its busiest second (%v)", f.name, worst, rate)
				}
			}
			if n := bits.OnesCount64(failBits); n != 2 {
				t.Errorf("failure bits %b: want the two failing nodes only", failBits)
			}
		})
	}
}

// TestRangeAcrossHorizons: past the fine horizon, Range answers 1 s slots
// up to where the fine ones begin, then the fine ones, in order, without a
// gap; both hold the same counts for the time they share.
func TestRangeAcrossHorizons(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	h := history.New(history.Config{FineHorizon: time.Minute, CoarseHorizon: 5 * time.Minute})
	fleet := historytest.Run(t, h, historytest.Config{Dependency: "db", Nodes: 2, Policy: sharedstate.DefaultPolicy(),
		Rate: func(int) float64 { return 20 }, Fails: func(int, time.Duration) bool { return false }, Start: t0,
		Stop: 170 * time.Second}, 3*time.Minute)
	segs, err := h.Range("db", t0, t0.Add(3*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) != 2 || segs[0].Step != time.Second || segs[1].Step != 100*time.Millisecond {
		t.Fatalf("%d segments: want a coarse one then a fine one", len(segs))
	}
	if end := segs[0].To(); end.Before(segs[1].From) || end.Sub(segs[1].From) > time.Second {
		t.Errorf("the coarse segment ends at %v, the fine one begins at %v", end, segs[1].From)
	}
	if age := t0.Add(3 * time.Minute).Sub(segs[1].From); age < time.Minute || age > time.Minute+30*time.Second {
		t.Errorf("the fine segment covers the last %v, want about the fine horizon (1m)", age)
	}
	var got, want uint64
	for _, s := range segs[0].Slots {
		got += uint64(s.Successes)
	}
	for _, s := range segs[1].Slots {
		got += uint64(s.Successes)
	}
	for _, s := range fleet.Truth {
		want += uint64(s.Successes)
	}
	if got != want {
		t.Errorf("the two segments hold %d successes, the nodes made %d", got, want)
	}
}
