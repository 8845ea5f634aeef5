package sharedstate

import (
	"maps"
	"sync"
	"sync/atomic"
)

// depMap maps dependency names to their state. Lookups of known names read
// an immutable map through an atomic pointer, with no lock and no interface
// hashing. Stores and deletes go to the authoritative map under mu; the read
// map is replaced by a copy of it once lookups have missed it as many times
// as it has entries, so copying costs amortised O(1) per miss. A read-map hit
// on an evicted state falls through to the authoritative map.
type depMap struct {
	read   atomic.Pointer[map[string]*depState]
	mu     sync.Mutex
	all    map[string]*depState
	misses int
}

func newDepMap() *depMap {
	m := &depMap{all: map[string]*depState{}}
	m.read.Store(&map[string]*depState{})
	return m
}

func (m *depMap) load(name string) *depState {
	if d, ok := (*m.read.Load())[name]; ok && !d.evicted.Load() {
		return d
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.all[name]
	if m.misses++; m.misses >= len(m.all) {
		m.promote()
	}
	return d
}

// promote publishes a copy of the authoritative map. Caller holds mu.
func (m *depMap) promote() {
	r := maps.Clone(m.all)
	m.read.Store(&r)
	m.misses = 0
}

func (m *depMap) store(name string, d *depState) {
	m.mu.Lock()
	m.all[name] = d
	m.mu.Unlock()
}

func (m *depMap) delete(name string) {
	m.mu.Lock()
	delete(m.all, name)
	m.mu.Unlock()
}

// values returns the states, in no particular order.
func (m *depMap) values() []*depState {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*depState, 0, len(m.all))
	for _, d := range m.all {
		out = append(out, d)
	}
	return out
}
