package sharedstate

import "time"

// idle reports whether the dependency has had nothing worth keeping: no
// policy or override, not followed, no rows, no counts, no node-local breaker open, no
// probe out, for 2×window while its records never moved, for
// IdleRetention (at least 2×window) otherwise — whatever its records say:
// an open or half-open record nobody sends traffic for resolves by being
// forgotten (its copies refused for IdleRetention+TombstoneMargin more,
// ErrEvicted).
func (d *depState) idle(e *Engine, now time.Time) bool {
	ns := now.UnixNano()
	busy := d.doc != nil || d.override != nil || d.followed || len(d.rows) > 0 || d.local.state != Closed ||
		d.probe.inFlight || (d.sent.valid && (!d.sent.row.Counts.IsZero() || d.sent.row.LocalOpen)) ||
		!d.ownTotals(ns).IsZero()
	if busy {
		d.idleSince = 0
		return false
	}
	if d.idleSince == 0 {
		d.idleSince = ns
	}
	keep := 2 * int64(d.pol.Breaker.Window)
	for _, r := range d.records {
		if r.Generation != 0 || r.State != Closed {
			keep = max(keep, int64(e.idleRetention))
			break
		}
	}
	return ns-d.idleSince >= keep
}

// prune drops rows received 2×window ago or earlier; their seqs raise
// their nodes' replay floors. It walks the rows only when the oldest one
// may be stale: every Tick visits every dependency.
func (d *depState) prune(e *Engine, now int64) {
	stale := 2 * int64(d.pol.Breaker.Window)
	if len(d.rows) == 0 || now-d.oldestRow < stale {
		return
	}
	d.oldestRow = now
	for i := 0; i < len(d.rows); {
		r := &d.rows[i]
		if now-r.received >= stale {
			e.floors.raise(r.Node, r.Seq)
			d.removeRow(r.Node)
			continue
		}
		d.oldestRow = min(d.oldestRow, r.received)
		i++
	}
}

func (d *depState) removeRow(node string) {
	i, ok := d.rowIdx[node]
	if !ok {
		return
	}
	d.fleet.remove(d.rows[i].Node, d.rows[i].Cumulative, len(d.rows)-1)
	last := len(d.rows) - 1
	if i != last {
		d.rows[i] = d.rows[last]
		d.rowIdx[d.rows[i].Node] = i
	}
	d.rows[last] = rowEntry{}
	d.rows = d.rows[:last]
	delete(d.rowIdx, node)
	d.rowCount.release(node)
	d.rowsVersion++
}
