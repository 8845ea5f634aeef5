package sharedstate

import (
	"sync"
	"time"
)

// members is the engine's view of the fleet's membership: the live agents
// (node -> zone) and the nodes reported dead (node -> when, Unix ns). Both
// maps change in place under mu, a leaf lock, so a membership event costs
// the same whatever the fleet's size (a heal reports half the fleet dead,
// then alive again, at every agent).
type members struct {
	mu     sync.RWMutex
	live   map[string]string
	dead   map[string]int64
	oldest int64 // no death in dead is earlier (0: dead is empty)
	// dormant holds the rows MemberDead took from the nodes in dead, for
	// MemberAlive to put back, for dormantRetention at most.
	dormant       map[string][]rowEntry
	dormantOldest int64 // no death with dormant rows is earlier (0: none)
}

func newMembers() members {
	return members{live: map[string]string{}, dead: map[string]int64{}, dormant: map[string][]rowEntry{}}
}

// dormantRetention is how long MemberDead keeps a dead node's rows for
// MemberAlive. A member declared dead wrongly (a heal's turmoil, a pause)
// refutes within seconds, but it did not see itself go and greets no one:
// its rows reached the agents that had dropped them by relays only, and
// at N = 1,000 a few agents lacked a client's row for seconds after a
// heal. A member dead longer comes back with rows it sends anyway.
const dormantRetention = time.Minute

// isDead reports whether node was reported dead and not alive since.
func (m *members) isDead(node string) bool {
	m.mu.RLock()
	_, ok := m.dead[node]
	m.mu.RUnlock()
	return ok
}

// isLive reports whether node is a live agent.
func (m *members) isLive(node string) bool {
	m.mu.RLock()
	_, ok := m.live[node]
	m.mu.RUnlock()
	return ok
}

// eachLive calls fn for every live agent; fn must not change the members.
func (m *members) eachLive(fn func(node, zone string)) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for n, z := range m.live {
		fn(n, z)
	}
}

// MemberDead drops every row of node and ignores its rows until MemberAlive
// (or for an hour). The rows stop counting at once; MemberAlive within
// dormantRetention puts back those that are still fresh.
func (e *Engine) MemberDead(node string) {
	if node == e.node {
		return
	}
	at := e.now().UnixNano()
	m := &e.members
	m.mu.Lock()
	m.dead[node] = at
	if m.oldest == 0 || at < m.oldest {
		m.oldest = at
	}
	delete(m.live, node)
	delete(m.dormant, node)
	m.mu.Unlock()
	var rows []rowEntry
	e.eachDep(func(d *depState) {
		if i, ok := d.rowIdx[node]; ok {
			rows = append(rows, d.rows[i])
			d.removeRow(node)
		}
	})
	if len(rows) == 0 {
		return
	}
	m.mu.Lock()
	if _, dead := m.dead[node]; dead {
		m.dormant[node] = rows
		if m.dormantOldest == 0 || at < m.dormantOldest {
			m.dormantOldest = at
		}
	}
	m.mu.Unlock()
}

// MemberAlive accepts node's rows again and counts it among the live
// agents that rank for proposing trips (see EngineConfig.Proposers); the
// rows MemberDead took from it are back, those still fresh.
func (e *Engine) MemberAlive(node, zone string) {
	m := &e.members
	m.mu.Lock()
	if node != e.node {
		m.live[node] = zone
	}
	delete(m.dead, node)
	rows := m.dormant[node]
	delete(m.dormant, node)
	m.mu.Unlock()
	now := e.nowNanos()
	for i := range rows {
		e.restoreRow(&rows[i], now)
	}
}

// restoreRow puts back a row MemberDead took, as MergeRow takes a row
// (not when its node sent a newer one meanwhile, or past a cap), with the
// time it first arrived, so that it goes stale when it would have; not at
// all when it is stale already (2×window after it arrived, as prune has
// it) or its dependency is gone.
func (e *Engine) restoreRow(r *rowEntry, now int64) {
	d := e.deps.load(r.Dependency)
	if d == nil {
		return
	}
	d.mu.Lock()
	stale := now-r.received >= 2*int64(d.pol.Breaker.Window)
	d.mu.Unlock()
	w := r.NodeWindow
	if stale {
		return
	}
	if ok, _ := e.mergeRow(&w); !ok {
		return
	}
	d.mu.Lock()
	if i, ok := d.rowIdx[w.Node]; ok && d.rows[i].Seq == w.Seq {
		d.rows[i].received = r.received
		d.oldestRow = min(d.oldestRow, r.received)
	}
	d.mu.Unlock()
}

// pruneDead forgets the nodes reported dead deadMemberRetention ago or
// earlier; it walks the dead set only when its oldest death is due.
func (e *Engine) pruneDead(now time.Time) {
	m := &e.members
	cut := now.UnixNano() - int64(deadMemberRetention)
	dcut := now.UnixNano() - int64(dormantRetention)
	m.mu.RLock()
	due := m.oldest != 0 && m.oldest <= cut
	dormantDue := m.dormantOldest != 0 && m.dormantOldest <= dcut
	m.mu.RUnlock()
	if dormantDue {
		m.mu.Lock()
		m.dormantOldest = 0
		for n := range m.dormant {
			switch at := m.dead[n]; {
			case at <= dcut:
				delete(m.dormant, n)
			case m.dormantOldest == 0 || at < m.dormantOldest:
				m.dormantOldest = at
			}
		}
		m.mu.Unlock()
	}
	if !due {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.oldest = 0
	for n, at := range m.dead {
		switch {
		case at <= cut:
			delete(m.dead, n)
		case m.oldest == 0 || at < m.oldest:
			m.oldest = at
		}
	}
}
