package sharedstate

import (
	"maps"
	"time"
)

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
