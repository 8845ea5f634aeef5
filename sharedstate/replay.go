package sharedstate

import (
	"errors"
	"fmt"
	"sync"
)

// ErrReplayed refuses a row whose seq is at or below the highest seq of
// the rows of its node this engine dropped as stale: a copy of an old row
// sent again (a replay), never the node's current one, since a node's
// sequence numbers only grow and a row goes stale only 2×window after it
// arrived.
var ErrReplayed = errors.New("fusebox: row replayed (seq at or below a stale row of its node)")

// floorTable holds, per node, the highest seq of its rows the engine
// dropped as stale. The map changes in place under mu (a leaf lock): the
// rows pruned in one Tick are applied at its end.
type floorTable struct {
	mu      sync.RWMutex // guards m
	m       map[string]uint64
	pendMu  sync.Mutex // leaf lock: guards pending
	pending map[string]uint64
}

// maxFloors bounds the nodes with a floor; past it, the floors of nodes
// that are not live agents are forgotten first.
const maxFloors = 16384

func (f *floorTable) of(node string) uint64 {
	f.mu.RLock()
	s := f.m[node]
	f.mu.RUnlock()
	return s
}

// raise notes a stale row's seq; applied at the end of the Tick.
func (f *floorTable) raise(node string, seq uint64) {
	f.pendMu.Lock()
	if f.pending == nil {
		f.pending = map[string]uint64{}
	}
	f.pending[node] = max(f.pending[node], seq)
	f.pendMu.Unlock()
}

// apply publishes the pending floors. live reports whether a node is a
// live agent (kept first when the table is full).
func (f *floorTable) apply(live func(string) bool) {
	f.pendMu.Lock()
	pending := f.pending
	f.pending = nil
	f.pendMu.Unlock()
	if len(pending) == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[string]uint64{}
	}
	for n, s := range pending {
		f.m[n] = max(f.m[n], s)
	}
	for n := range f.m {
		if len(f.m) <= maxFloors {
			break
		}
		if !live(n) {
			delete(f.m, n)
		}
	}
}

// replayed reports whether a row of node with seq is a replay.
func (e *Engine) replayed(node string, seq uint64) error {
	if f := e.floors.of(node); seq <= f {
		return fmt.Errorf("%w: %s seq %d, stale rows up to %d", ErrReplayed, node, seq, f)
	}
	return nil
}

// RowKnown reports whether merging a row of node for dependency with seq
// would change nothing: the engine holds a row of that node and dependency
// with that seq or a higher one, or the node is this one. The gossip layer
// asks before it verifies a row's signature, so that the copies gossip
// delivers cost no verification. (A replay, ErrReplayed, is not "known":
// MergeRow refuses it, and it is counted.)
func (e *Engine) RowKnown(node, dependency string, seq uint64) bool {
	if node == e.node {
		return true
	}
	d := e.deps.load(dependency)
	if d == nil {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	i, ok := d.rowIdx[node]
	return ok && d.rows[i].Seq >= seq
}

// RecordKnown reports whether merging r would change nothing: the engine
// holds r, or a record that beats it, for r's dependency and zone.
func (e *Engine) RecordKnown(r BreakerRecord) bool {
	d := e.deps.load(r.Dependency)
	if d == nil {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	cur, ok := d.records[r.Zone]
	return ok && SameRecord(Merge(cur, r), cur)
}
