package sharedstate

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// DefaultIdleRetention is how long a dependency whose breaker ever moved
// (a record past generation 0) is kept without traffic anywhere: long
// enough for an operator to look at what happened to it.
const DefaultIdleRetention = time.Hour

// ErrEvicted refuses a record of a dependency this engine forgot for want
// of traffic, when the record is not newer than the one it forgot (a
// push-pull copy of it from a peer that has not forgotten it yet, or a
// replay): what was evicted stays evicted for IdleRetention plus
// TombstoneMargin.
var ErrEvicted = errors.New("fusebox: record of an evicted dependency, not newer than the one evicted")

// TombstoneMargin is how much longer than IdleRetention a tombstone is kept:
// copies of a record built before its dependency was evicted can arrive
// that late — a push-pull state a peer built just before it evicted too,
// delivered over a slow TCP exchange and verified record by record. With
// tombstones that lived only IdleRetention, 3,000 once-tripped
// dependencies on three loaded agents (IdleRetention 5s) came back through
// such states seconds after every agent had forgotten them.
const TombstoneMargin = time.Minute

// tombstones remember, per evicted dependency, the records it held, for
// IdleRetention plus TombstoneMargin. Bounded by MaxDependencies (the oldest forgotten first).
type tombstones struct {
	mu sync.Mutex
	m  map[string]tombstone
}

type tombstone struct {
	at   int64 // Unix ns of the eviction
	recs map[string]BreakerRecord
}

// put remembers d's records at its eviction. Caller holds d.mu.
func (t *tombstones) put(e *Engine, d *depState, now int64) {
	recs := make(map[string]BreakerRecord, len(d.records))
	for z, r := range d.records {
		if r.Generation != 0 || r.State != Closed {
			recs[z] = r
		}
	}
	if len(recs) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]tombstone{}
	}
	t.expire(e, now)
	if len(t.m) >= e.maxDeps {
		var oldest string
		for name, ts := range t.m {
			if oldest == "" || ts.at < t.m[oldest].at {
				oldest = name
			}
		}
		delete(t.m, oldest)
	}
	t.m[d.name] = tombstone{at: now, recs: recs}
}

// life is how long a tombstone is kept.
func (e *Engine) tombstoneLife() int64 { return int64(e.idleRetention + TombstoneMargin) }

// expire forgets tombstones older than their life. Caller holds t.mu.
func (t *tombstones) expire(e *Engine, now int64) {
	for name, ts := range t.m {
		if now-ts.at >= e.tombstoneLife() {
			delete(t.m, name)
		}
	}
}

// check refuses r if its dependency was evicted holding a record of r's
// zone that r does not beat in generation or in time.
func (t *tombstones) check(e *Engine, r BreakerRecord, now int64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	ts, ok := t.m[r.Dependency]
	if !ok {
		return nil
	}
	if now-ts.at >= e.tombstoneLife() {
		delete(t.m, r.Dependency)
		return nil
	}
	held, ok := ts.recs[r.Zone]
	if ok && r.Generation <= held.Generation && !r.Since.After(held.Since) {
		return fmt.Errorf("%w: %s generation %d since %s (evicted at generation %d)", ErrEvicted, r.Dependency,
			r.Generation, r.Since.UTC().Format(time.RFC3339), held.Generation)
	}
	return nil
}
