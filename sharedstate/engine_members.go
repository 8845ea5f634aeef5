package sharedstate

import (
	"maps"
	"slices"
	"time"
)

// Member is a node the membership layer reports alive.
type Member struct {
	Node string
	Zone string
}

// SetMembers declares the complete list of live members: rows of every other
// node are dropped (as for MemberDead) and the listed nodes are alive.
func (e *Engine) SetMembers(members []Member) {
	alive := make(map[string]bool, len(members))
	for _, m := range members {
		alive[m.Node] = true
	}
	now := e.now()
	e.mu.Lock()
	dead := maps.Clone(*e.dead.Load())
	maps.DeleteFunc(dead, func(n string, _ int64) bool { return alive[n] })
	for _, d := range e.deps.sortedValues() {
		d.mu.Lock()
		for _, r := range slices.Clone(d.rows) {
			if !alive[r.Node] {
				dead[r.Node] = now.UnixNano()
				d.removeRow(r.Node)
			}
		}
		d.mu.Unlock()
	}
	e.dead.Store(&dead)
	live := make(map[string]string, len(members))
	for _, m := range members {
		if m.Node != e.node {
			live[m.Node] = m.Zone
		}
	}
	e.live.Store(&live)
	e.mu.Unlock()
}

// MemberDead drops every row of node and ignores its rows until MemberAlive
// (or for an hour).
func (e *Engine) MemberDead(node string) {
	if node == e.node {
		return
	}
	now := e.now()
	e.mu.Lock()
	dead := maps.Clone(*e.dead.Load())
	dead[node] = now.UnixNano()
	e.dead.Store(&dead)
	if _, ok := (*e.live.Load())[node]; ok {
		live := maps.Clone(*e.live.Load())
		delete(live, node)
		e.live.Store(&live)
	}
	e.mu.Unlock()
	e.eachDep(func(d *depState) { d.removeRow(node) })
}

// MemberAlive accepts node's rows again and counts it among the live
// agents that rank for proposing trips (see EngineConfig.Proposers).
func (e *Engine) MemberAlive(node, zone string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if z, ok := (*e.live.Load())[node]; node != e.node && (!ok || z != zone) {
		live := maps.Clone(*e.live.Load())
		live[node] = zone
		e.live.Store(&live)
	}
	if _, ok := (*e.dead.Load())[node]; !ok {
		return
	}
	dead := maps.Clone(*e.dead.Load())
	delete(dead, node)
	e.dead.Store(&dead)
}

// pruneDead forgets the nodes reported dead deadMemberRetention ago or
// earlier; it copies the dead set only when there is one to forget.
func (e *Engine) pruneDead(now time.Time) {
	old := func(_ string, at int64) bool { return now.UnixNano()-at >= int64(deadMemberRetention) }
	for n, at := range *e.dead.Load() {
		if old(n, at) {
			e.mu.Lock()
			defer e.mu.Unlock()
			dead := maps.Clone(*e.dead.Load())
			maps.DeleteFunc(dead, old)
			e.dead.Store(&dead)
			return
		}
	}
}
