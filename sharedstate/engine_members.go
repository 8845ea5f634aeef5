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
}

func newMembers() members {
	return members{live: map[string]string{}, dead: map[string]int64{}}
}

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
// (or for an hour).
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
	m.mu.Unlock()
	e.eachDep(func(d *depState) { d.removeRow(node) })
}

// MemberAlive accepts node's rows again and counts it among the live
// agents that rank for proposing trips (see EngineConfig.Proposers).
func (e *Engine) MemberAlive(node, zone string) {
	m := &e.members
	m.mu.Lock()
	defer m.mu.Unlock()
	if node != e.node {
		m.live[node] = zone
	}
	delete(m.dead, node)
}

// pruneDead forgets the nodes reported dead deadMemberRetention ago or
// earlier; it walks the dead set only when its oldest death is due.
func (e *Engine) pruneDead(now time.Time) {
	m := &e.members
	cut := now.UnixNano() - int64(deadMemberRetention)
	m.mu.RLock()
	due := m.oldest != 0 && m.oldest <= cut
	m.mu.RUnlock()
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
