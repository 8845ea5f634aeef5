// Package sharedstate is Fusebox's engine: the pure, deterministic rules of
// the fleet-wide circuit breaker, retry budget and traffic shaping of each
// dependency, computed by every node from the counts it gossips with the
// others. It does no I/O and starts no goroutines; time comes from an
// injected Clock and randomness from an injected Rand, so a whole fleet
// can be simulated in a test. Every agent runs an Engine, and so do the
// coordinator's observer and its what-if replay; clientlib decides first
// attempts from an Engine's Snapshot, with one atomic load.
//
//	clock := sharedstate.NewManualClock(time.Now())
//	e, err := sharedstate.NewEngine(sharedstate.EngineConfig{Node: "node-a", Zone: "z1", Clock: clock})
//	if err != nil { ... }
//
//	// A caller's request: a first attempt, then a retry if the budget allows.
//	if d := e.Decide("shipping-api", sharedstate.FirstAttempt); d.Allowed() {
//		err := call()
//		e.Record("shipping-api", sharedstate.FirstAttempt, sharedstate.OutcomeOf(err != nil, false))
//		if err != nil && e.AcquireRetry("shipping-api").Allowed() {
//			e.Record("shipping-api", sharedstate.Retry, sharedstate.OutcomeOf(call() != nil, false))
//		}
//	}
//
//	// Every 100 ms: evaluate the rules and gossip what changed.
//	for _, rec := range e.Tick() {
//		broadcast(rec) // peers call e.ApplyRecord(rec)
//	}
//	for _, row := range e.RowsToSend() {
//		broadcast(row) // peers call e.ApplyRow(row)
//	}
//
// The model (rows, breaker records and their merge, scopes, transitions,
// the retry budget, shaping) is sharedstate/DESIGN.md; what each policy
// field does and what the rules measure is sharedstate/README.md.
package sharedstate
