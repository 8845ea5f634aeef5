package sharedstate

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
