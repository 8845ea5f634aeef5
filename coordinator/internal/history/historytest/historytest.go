// Package historytest drives a simulated fleet of real engines and feeds
// what it gossips to a history.History as the observer would receive it:
// late, and superseded by the node's newer rows. Only tests import it.
package historytest

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/coordinator/internal/history"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// Config is one simulated run.
type Config struct {
	// Dependency is the one the callers call (required).
	Dependency string
	// Nodes is the fleet's size (required).
	Nodes int
	// Seed drives the traffic and the gossip delays.
	Seed uint64
	// Policy is every node's policy of Dependency (required, valid).
	Policy sharedstate.Policy
	// Rate is each node's calls per second (required; at most 100).
	Rate func(node int) float64
	// Fails says whether a call from node at el (since Start) fails.
	Fails func(node int, el time.Duration) bool
	// Slow says whether that call takes at least the policy's
	// slowCallDuration (optional: none is slow).
	Slow func(node int, el time.Duration) bool
	// Start is the clock's start; traffic begins at Begin after it and
	// ends at Stop after it (0: runs to the end).
	Start       time.Time
	Begin, Stop time.Duration
	// Retries: a failed first attempt asks for one retry.
	Retries bool
}

// Fleet is a run's truth.
type Fleet struct {
	// Truth is what the nodes counted, per second since Start.
	Truth map[int64]*history.Slot
	// Records are the breaker records the fleet took (one per generation,
	// the winner), in order.
	Records []sharedstate.BreakerRecord
}

// Run drives cfg's fleet for d, feeding h: each node's newest row replaces
// its unsent one, a gossip round every 100 to 300 ms delivers what is
// pending 5 to 150 ms later; records reach h at once.
func Run(t testing.TB, h *history.History, cfg Config, d time.Duration) *Fleet {
	t.Helper()
	clock := sharedstate.NewManualClock(cfg.Start)
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x51))
	dep := cfg.Dependency
	window := cfg.Policy.Breaker.Window.Std()
	pol := cfg.Policy
	pol.Dependency = sharedstate.DefaultPolicyName
	var engines []*sharedstate.Engine
	for i := range cfg.Nodes {
		e, err := sharedstate.NewEngine(sharedstate.EngineConfig{Node: fmt.Sprintf("node-%d", i), Zone: fmt.Sprintf("z%d", i%2),
			Clock: clock, DefaultPolicy: &pol})
		if err != nil {
			t.Fatal(err)
		}
		engines = append(engines, e)
	}
	f := &Fleet{Truth: map[int64]*history.Slot{}}
	byGen := map[uint64]sharedstate.BreakerRecord{}
	count := func(at time.Time, fn func(s *history.Slot)) {
		sec := at.Sub(cfg.Start).Milliseconds() / 1000
		s, ok := f.Truth[sec]
		if !ok {
			s = &history.Slot{}
			f.Truth[sec] = s
		}
		fn(s)
	}
	took := func(now time.Time, rs ...sharedstate.BreakerRecord) {
		for _, r := range rs {
			if old, ok := byGen[r.Generation]; ok {
				r = sharedstate.Merge(old, r)
			}
			byGen[r.Generation] = r
			h.ObserveRecord(now, r)
		}
	}
	type pending struct {
		row sharedstate.NodeWindow
		at  time.Time
	}
	queued := make([]*sharedstate.NodeWindow, cfg.Nodes)
	var inFlight []pending
	nextRound := make([]time.Time, cfg.Nodes)
	h.Tick(cfg.Start, func(string) time.Duration { return window })
	for now := cfg.Start; now.Before(cfg.Start.Add(d)); now = clock.Advance(10 * time.Millisecond) {
		el := now.Sub(cfg.Start)
		for i, e := range engines {
			if el < cfg.Begin || (cfg.Stop > 0 && el >= cfg.Stop) || rng.Float64() >= cfg.Rate(i)/100 {
				continue
			}
			fail := cfg.Fails(i, el)
			slow := cfg.Slow != nil && cfg.Slow(i, el)
			o := sharedstate.OutcomeOf(fail, slow)
			counted := func(s *history.Slot) {
				s.FirstAttempts++
				if fail {
					s.Failures++
				} else {
					s.Successes++
				}
				if slow {
					s.SlowCalls++
				}
			}
			switch dec := e.Snapshot(dep).DecideFirst(); dec.Verdict {
			case sharedstate.Reject:
				_ = e.Record(dep, sharedstate.FirstAttempt, sharedstate.Rejected)
				count(now, func(s *history.Slot) { s.Rejected++ })
				continue
			case sharedstate.AllowProbe:
				p := e.AcquireProbe(dep)
				if !p.Allowed() {
					count(now, func(s *history.Slot) { s.Rejected++ })
					continue
				}
				_ = e.Record(dep, sharedstate.Probe, o)
				count(now, counted)
				if p.Verdict == sharedstate.AllowProbe {
					if rec, ok := e.ProbeOutcome(dep, o); ok {
						for _, o := range engines {
							o.ApplyRecord(rec)
						}
						took(now, rec)
					}
				}
				continue
			}
			_ = e.Record(dep, sharedstate.FirstAttempt, o)
			count(now, counted)
			if fail && cfg.Retries {
				if e.AcquireRetry(dep).Allowed() {
					_ = e.Record(dep, sharedstate.Retry, sharedstate.Failure)
					count(now, func(s *history.Slot) { s.Retries++; s.Failures++ })
				} else {
					count(now, func(s *history.Slot) { s.Rejected++ })
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
			for _, e := range engines {
				for _, r := range rows {
					e.ApplyRow(r)
				}
				for _, r := range recs {
					e.ApplyRecord(r)
				}
			}
			took(now, recs...)
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
			h.ObserveRow(now, p.row, window)
		}
		inFlight = keep
		if el%time.Second == 0 {
			h.Tick(now, func(string) time.Duration { return window })
		}
	}
	for _, r := range byGen {
		f.Records = append(f.Records, r)
	}
	slices.SortFunc(f.Records, func(a, b sharedstate.BreakerRecord) int { return cmp.Compare(a.Generation, b.Generation) })
	return f
}
