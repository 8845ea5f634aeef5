package agent

import (
	"context"
	"sync"

	"google.golang.org/grpc/peer"

	"github.com/fusebox-dev/fusebox/agent/proxy"
	"github.com/fusebox-dev/fusebox/protocol/convert"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// Confirmation: a dependency name someone local chose reaches the fleet
// only once real traffic confirmed it. Until then the agent decides it as
// any other (its counts go into the local engine, its breaker follows
// them and whatever the fleet says of it) but does not gossip its own
// rows of it, nor the records it proposes for it: a local process cannot
// fill the other agents' tables, nor speak for a dependency in the
// fleet's counts, by naming it. A name is confirmed by
//
//   - a --proxy-routes entry (the operator named it);
//   - a client of the local API over the unix socket (group-restricted,
//     mode 0660) or in process, which follows it or reports outcomes
//     for it; not over --grpc-addr, which every local user reaches;
//   - the egress proxy, whenever it holds a connection to the request's
//     upstream (proxy.Config.Confirm): traffic reached a real server.
//
// Confirmations are forgotten with the dependency (the engine evicts it):
// the traffic that brings it back confirms it again. The set is bounded by
// --max-dependencies; when full, names the engine no longer tracks make
// room, and past that a new name stays unconfirmed.
type confirmations struct {
	static map[string]bool // the routes' dependencies: confirmed for good
	max    int

	mu sync.RWMutex
	m  map[string]struct{}
}

func newConfirmations(routes []string, max int) *confirmations {
	c := &confirmations{static: map[string]bool{}, max: max, m: map[string]struct{}{}}
	for _, e := range routes {
		if r, err := proxy.ParseRoute(e); err == nil { // validated
			c.static[r.Dependency] = true
		}
	}
	return c
}

// has reports whether dep is confirmed.
func (c *confirmations) has(dep string) bool {
	if c.static[dep] {
		return true
	}
	c.mu.RLock()
	_, ok := c.m[dep]
	c.mu.RUnlock()
	return ok
}

// add confirms dep; tracked tells which names the engine still holds
// (called without c's lock: the engine calls forget from its own locks).
func (c *confirmations) add(dep string, tracked func(string) bool) {
	if c.has(dep) {
		return
	}
	c.mu.RLock()
	full := len(c.m) >= c.max
	var names []string
	if full {
		names = make([]string, 0, len(c.m))
		for d := range c.m {
			names = append(names, d)
		}
	}
	c.mu.RUnlock()
	var stale []string
	for _, d := range names {
		if !tracked(d) {
			stale = append(stale, d)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, d := range stale {
		delete(c.m, d)
	}
	if len(c.m) < c.max {
		c.m[dep] = struct{}{}
	}
}

// forget drops dep's confirmation (the engine forgot dep).
func (c *confirmations) forget(dep string) {
	c.mu.Lock()
	delete(c.m, dep)
	c.mu.Unlock()
}

// count is the number of names confirmed by traffic (routes aside).
func (c *confirmations) count() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}

// confirm confirms dep (the proxy's hook, and the local API's for its
// trusted callers).
func (a *Agent) confirm(dep string) {
	a.confirmed.add(dep, func(d string) bool { return a.eng.Snapshot(d) != nil })
}

// trustedCaller reports whether a local API call came over the unix
// socket or in process (no peer): the callers whose names confirm.
func trustedCaller(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	return !ok || p.Addr == nil || p.Addr.Network() == "unix"
}

// gossipedRows keeps the rows of confirmed dependencies; the others are
// withheld and counted.
func (a *Agent) gossipedRows(rows []sharedstate.NodeWindow) []sharedstate.NodeWindow {
	out := rows[:0]
	for _, r := range rows {
		if a.confirmed.has(r.Dependency) {
			out = append(out, r)
		} else {
			a.m.withheld[withheldRow].Inc()
		}
	}
	return out
}

// gossipedRecord reports whether a record this agent proposed may go out
// (its dependency is confirmed); one that may not is counted.
func (a *Agent) gossipedRecord(r sharedstate.BreakerRecord) bool {
	if a.confirmed.has(r.Dependency) {
		return true
	}
	a.m.withheld[withheldRecord].Inc()
	return false
}

// stateRecords are the records of LocalState: every record but those this
// agent proposed for unconfirmed dependencies.
func (a *Agent) stateRecords() []*fuseboxv1.BreakerRecord {
	var out []*fuseboxv1.BreakerRecord
	for _, r := range a.eng.Records() {
		if r.Origin == a.cfg.Name && !a.confirmed.has(r.Dependency) {
			continue
		}
		out = append(out, convert.RecordToProto(r))
	}
	return out
}

// stateRows are this agent's rows of confirmed dependencies.
func (a *Agent) stateRows() []*fuseboxv1.NodeWindow {
	var out []*fuseboxv1.NodeWindow
	for _, r := range a.eng.LocalRows() {
		if a.confirmed.has(r.Dependency) {
			out = append(out, convert.RowToProto(r))
		}
	}
	return out
}
