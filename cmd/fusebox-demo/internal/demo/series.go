package demo

import (
	"sort"
	"sync"
	"time"
)

// sampleInterval is the resolution of Demo.CountsBetween.
const sampleInterval = 100 * time.Millisecond

// seriesCapacity bounds the samples kept: 10 minutes at sampleInterval.
// When it is reached the older half goes, so between 5 and 10 minutes of
// history remain.
const seriesCapacity = 6000

// sample is the cumulative counts of every dependency at one instant.
type sample struct {
	at     time.Time
	counts []Counts // in the order of series.deps
}

// series keeps a ring of samples of the cumulative counters, so callers can
// ask what happened between two instants (e.g. the first attempts in the
// budget window before an outage).
type series struct {
	deps []string
	ctrs []*counters

	mu      sync.Mutex
	samples []sample // oldest first, at most seriesCapacity
}

func newSeries(deps []string, ctrs []*counters) *series {
	return &series{deps: deps, ctrs: ctrs}
}

// record takes a sample at now.
func (s *series) record(now time.Time) {
	sm := sample{at: now, counts: make([]Counts, len(s.ctrs))}
	for i, c := range s.ctrs {
		sm.counts[i] = c.load()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.samples) == seriesCapacity {
		s.samples = append(s.samples[:0], s.samples[seriesCapacity/2:]...)
	}
	s.samples = append(s.samples, sm)
}

// atLocked returns the cumulative counts of dependency i at the last sample
// taken at or before t (zero counts before the first sample).
func (s *series) atLocked(i int, t time.Time) Counts {
	n := sort.Search(len(s.samples), func(k int) bool { return s.samples[k].at.After(t) })
	if n == 0 {
		return Counts{}
	}
	return s.samples[n-1].counts[i]
}

// between returns the counts of dep in (from, to], to the resolution of
// the samples; ok is false for an unknown dependency.
func (s *series) between(dep string, from, to time.Time) (Counts, bool) {
	for i, name := range s.deps {
		if name == dep {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.atLocked(i, to).Minus(s.atLocked(i, from)), true
		}
	}
	return Counts{}, false
}
