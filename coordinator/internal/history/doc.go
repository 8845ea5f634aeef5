// Package history is the coordinator's one history of the fleet: per
// dependency, the counts the fleet's nodes added in each slot of time
// (window/100 for Config.FineHorizon, a second for Config.CoarseHorizon),
// added up exactly from the rows' cumulative counts, and the breaker
// records, overrides and policy changes the observer saw. The dashboard
// plots it (GET /api/v1/series) and package replay runs policies over it.
// A History is safe for concurrent use: Observe* are called from gossip
// goroutines, Tick from the coordinator's tick loop.
//
//	h := history.New(history.Config{OnDrop: func(reason string) { dropped.WithLabelValues(reason).Inc() }})
//	h.ObserveRow(now, row, policy.Breaker.Window.Std()) // every row the observer accepts
//	h.ObserveRecord(now, record)                      // every record it merges
//	h.Tick(now, windowOf)                             // about once a second
//	segs, err := h.Range("shipping-api", now.Add(-time.Hour), now.Add(-history.Settle))
//
// What it keeps, how a row's counts land in slots, which dependencies get
// a place (the room rule) and what it costs: coordinator/README.md,
// "The history".
package history
