package demo

import (
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// What only the tests read of a running demo: compiled into the test
// binary, never into fusebox-demo.

// AdminToken returns the bearer token of the demo's admin identity ("" with
// Config.Agent).
func (d *Demo) AdminToken() string { return d.token }

// Agents returns the demo's agents: agent-a, agent-b, agent-c, in zones
// zone-a, zone-b, zone-c, serving services checkout, orders and returns
// (none with Config.Agent).
func (d *Demo) Agents() []*agent.Agent { return slices.Clone(d.agents) }

// Policy returns the fleet default policy the demo wrote.
func (d *Demo) Policy() sharedstate.Policy { return d.policy }

// Phase returns the window of one phase of one cycle (cycle 0 is the
// first).
func (d *Demo) Phase(cycle int, p Phase) PhaseWindow { return d.sched.window(cycle, p) }

// Probes returns the half-open probes dep served, overall.
func (d *Demo) Probes(dep string) ProbeStats {
	for _, x := range d.deps {
		if x.name == dep {
			return x.probeStats()
		}
	}
	return ProbeStats{}
}

// Wait waits until Done or ctx is done, and returns the summary so far.
func (d *Demo) Wait(ctx context.Context) (Summary, error) {
	select {
	case <-d.done:
		return d.Summary(), nil
	case <-ctx.Done():
		return d.Summary(), ctx.Err()
	}
}

// TransitionsOf returns the transitions of one dependency, in order.
func (s Summary) TransitionsOf(dep string) []Transition {
	var out []Transition
	for _, t := range s.Transitions {
		if t.Dependency == dep {
			out = append(out, t)
		}
	}
	return out
}

// sampleInterval is the resolution of Recorder.Between.
const sampleInterval = 100 * time.Millisecond

// Recorder samples a demo's cumulative counters every sampleInterval until
// the demo is Done, so that a test can ask what happened between two
// instants (e.g. the first attempts in the budget window before an
// outage).
type Recorder struct {
	d *Demo

	mu      sync.Mutex
	samples []sample // oldest first
}

// sample is the cumulative counts of every dependency at one instant.
type sample struct {
	at     time.Time
	counts []Counts // in the order of Demo.deps
}

// RecordCounts starts a Recorder: its first sample at once, the last when
// the demo is Done.
func (d *Demo) RecordCounts() *Recorder {
	r := &Recorder{d: d}
	r.record()
	go func() {
		t := time.NewTicker(sampleInterval)
		defer t.Stop()
		for {
			select {
			case <-d.done:
				r.record()
				return
			case <-t.C:
				r.record()
			}
		}
	}()
	return r
}

func (r *Recorder) record() {
	s := sample{at: time.Now()}
	for _, c := range r.d.ctrs {
		s.counts = append(s.counts, c.load())
	}
	r.mu.Lock()
	r.samples = append(r.samples, s)
	r.mu.Unlock()
}

// atLocked returns the cumulative counts of dependency i at the last sample
// taken at or before t (zero counts before the first sample).
func (r *Recorder) atLocked(i int, t time.Time) Counts {
	n := sort.Search(len(r.samples), func(k int) bool { return r.samples[k].at.After(t) })
	if n == 0 {
		return Counts{}
	}
	return r.samples[n-1].counts[i]
}

// Between returns what the services did with dep in (from, to], to the
// resolution of the samples.
func (r *Recorder) Between(dep string, from, to time.Time) Counts {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, x := range r.d.deps {
		if x.name == dep {
			return r.atLocked(i, to).Minus(r.atLocked(i, from))
		}
	}
	return Counts{}
}
