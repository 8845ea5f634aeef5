// Package history is the coordinator's one history of the fleet: per
// dependency, what the fleet's nodes counted, at the resolution of the
// trip rule's fast path, and the breaker records and overrides that were
// in force. The dashboard plots it (GET /api/v1/series) and a what-if
// replay (package replay) runs a policy over it.
//
// # What is kept
//
// For every dependency that has a place (at most Config.MaxDependencies,
// see the room rule below), two rings of Slots, the counts the fleet's
// nodes added in a slice of time:
//
//   - fine: slots of window/100 (the fast path's sub-buckets; at least
//     100 ms) for Config.FineHorizon (default 15 min);
//   - coarse: slots of 1 s for Config.CoarseHorizon (default 3 h).
//
// A Slot holds first attempts, retries, successes, failures, slow calls
// and rejections (each saturating at 2^32-1), a bit per node that counted
// anything and a bit per node (and per zone) that counted failures or slow
// calls. Nodes get bits in the order they appear, up to 64 at a time per
// dependency (a node silent for two windows gives its bit back); past 64
// nodes share bits by hash, which only merges their identities.
// Memory is allocated in chunks of 255 slots (48 bytes each) as traffic
// needs them and freed when they leave the horizon: a dependency with
// traffic in every slot costs 971 KiB at the defaults (fine 9,000 slots,
// coarse 10,800), measured as heap growth by TestBytesPerDependency, plus
// about 0.2 KiB per node that reports it; an idle one costs nothing once
// its slots leave the horizons.
//
// Records are the breaker records the observer merged (fleet-wide and per
// zone) and the overrides and policy changes it saw, at most
// Config.MaxRecords per dependency (the oldest go first).
//
// # From rows to slots
//
// Every row carries its node's cumulative counts of the dependency
// (sharedstate.Cumulative): everything the node counted since it began
// counting it, and when it read them. The history keeps each node's last
// reading and adds, at each new row, what the counts grew by
// (sharedstate.Increase), exactly, into the slot of the node's reading:
// never earlier than Settle (2 s) before the row arrived, never after, and
// never before the node's previous date. So counts land where the node
// counted them, up to the gossip round that carried them (a row
// superseded before its round went out hands its counts to the next), and
// the history before now − Settle no longer changes. A node that restarts,
// or forgot the dependency idle and took it up again, starts a new series,
// counted from zero. A node's first row counts from zero when its series
// began after the history watched it (the coordinator's start, or the last
// time it let a dependency's history go), and is only a baseline
// otherwise: counts from before are of a time the history did not watch
// (or kept once already). A node whose rows carry no cumulative counts
// (0.1.x) counts for nothing (OnDrop "no_totals").
//
// # The room rule
//
// While Config.MaxDependencies dependencies have a history, a newcomer
// takes the place of the unpinned one least used, when the newcomer is
// pinned or brings more calls (what its row counted over the node's
// window) than that one's use. Use is the calls counted, each weighing
// e^(−age/FineHorizon). Pinned are dependencies with a policy or an
// override in force (Config.Pinned) and those whose breaker is open: they
// keep their place whatever their traffic. So a flood of names with a few
// calls each only ever takes the places of one another and of quiet
// dependencies; a real dependency with traffic gets a place at its first
// row and keeps it; a name with no traffic never takes one. What is let go
// is counted (OnDrop "evicted"), as is a newcomer left without a place
// ("too_many_dependencies"). A dependency with nothing in either horizon
// and no record for the coarse horizon gives its place back.
//
// A coordinator restart loses the history: nothing is written to disk.
//
// # Concurrency
//
// A History is safe for concurrent use; one mutex guards it. Observe* are
// called from gossip goroutines, Tick from the coordinator's tick loop.
//
// Usage:
//
//	h := history.New(history.Config{OnDrop: func(reason string) { dropped.WithLabelValues(reason).Inc() }})
//	h.ObserveRow(now, row, policy.Breaker.Window.Std())   // every row the observer accepts
//	h.ObserveRecord(now, record)                        // every record it merges
//	h.Tick(now, windowOf)                               // about once a second
//	segs, err := h.Range("shipping-api", now.Add(-time.Hour), now.Add(-history.Settle))
package history
