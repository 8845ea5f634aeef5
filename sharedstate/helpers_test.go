package sharedstate

import "time"

// tb is what the helpers need from *testing.T, *testing.B and *rapid.T.
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
}

// newTestEngine builds an engine; mutate may adjust the config.
func newTestEngine(t tb, node, zone string, clock Clock, mutate func(*EngineConfig)) *Engine {
	t.Helper()
	cfg := EngineConfig{Node: node, Zone: zone, Clock: clock}
	if mutate != nil {
		mutate(&cfg)
	}
	e, err := NewEngine(cfg)
	if err != nil {
		t.Fatalf("NewEngine: %v", err)
	}
	return e
}

// policyWith returns the default policy changed by mutate.
func policyWith(mutate func(p *Policy)) *Policy {
	p := DefaultPolicy()
	if mutate != nil {
		mutate(&p)
	}
	return &p
}

func record(t tb, e *Engine, dep string, kind AttemptKind, o Outcome, n int) {
	t.Helper()
	for range n {
		if err := e.Record(dep, kind, o); err != nil {
			t.Fatalf("Record: %v", err)
		}
	}
}

// gossipAll delivers every row each engine wants to send to all the others.
func gossipAll(es []*Engine) {
	for _, from := range es {
		rows := from.RowsToSend()
		for _, to := range es {
			if to != from {
				for _, r := range rows {
					to.ApplyRow(r)
				}
			}
		}
	}
}

// gossip delivers every row a wants to send to each of the others.
func gossip(from *Engine, to ...*Engine) {
	rows := from.RowsToSend()
	for _, e := range to {
		for _, r := range rows {
			e.ApplyRow(r)
		}
	}
}

// Membership in one call, for tests: agents report it member by member
// (MemberAlive, MemberDead).

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
	var gone []string
	for _, d := range e.deps.sortedValues() {
		d.mu.Lock()
		for _, r := range d.rows {
			if !alive[r.Node] {
				gone = append(gone, r.Node)
			}
		}
		d.mu.Unlock()
	}
	for _, n := range gone {
		e.MemberDead(n)
	}
	m := &e.members
	m.mu.Lock()
	clear(m.live)
	m.mu.Unlock()
	for _, mb := range members {
		e.MemberAlive(mb.Node, mb.Zone)
	}
}

// Window in Counts and time.Time, for tests: the engine works in Unix ns.

// Length is the window's length.
func (w *Window) Length() time.Duration { return time.Duration(w.width * WindowBuckets) }

// Add adds c to the bucket holding now.
func (w *Window) Add(now time.Time, c Counts) {
	w.slot(now.UnixNano()).add(c)
}

// Totals sums the buckets that are inside the window at now.
func (w *Window) Totals(now time.Time) Counts { return w.totals(now.UnixNano()) }
