// Package history keeps, per dependency, what the coordinator's fleet
// observer saw: the fleet's pooled counts at the resolution of the trip
// rule's fast path, and the breaker records and overrides that were in
// force. It is what a what-if replay (package replay) runs a policy over.
//
// # What is kept
//
// For every dependency (at most Config.MaxDependencies of them), two rings of
// Slots, the counts the fleet's nodes added in a slice of time:
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
// traffic in every slot costs 977 KiB at the defaults (fine 9,000 slots,
// coarse 10,800), measured as heap growth by TestBytesPerDependency, plus
// about 0.8 KiB per node that reports it (a 720-byte tracker and its map
// entry); an idle one costs nothing once its slots leave the horizons.
//
// Records are the breaker records the observer merged (fleet-wide and per
// zone) and the overrides and policy changes it saw, at most
// Config.MaxRecords per dependency (the oldest go first).
//
// # From rows to slots
//
// Nodes gossip rows: window totals, and the counts of the freshest 1, 2, 4,
// … 64 sub-buckets of their window (sharedstate.Recent). The history keeps
// each node's previous row and adds, at each new one, what it says happened
// since: the successes, failures and slow calls from the difference of the
// suffixes (the newest two sub-buckets exactly, older ones spread evenly over
// their power-of-two group), the first attempts, retries and rejections from
// the difference of the window totals plus what left the window (the
// history remembers what it attributed to each of the node's last ten
// buckets). A row carries no time: it is dated by its receipt, later when
// its suffixes show it must be further from the node's previous row (they
// hold that row's counts only from some shift on), so counts land up to a
// gossip round after the node counted them. Fractions, and estimates that
// came out below zero, are carried from row to row. Measured against what
// real engines counted through an incident, with rows that arrive 5 to
// 450 ms late and superseded (TestHistoryAddsUpWhatTheNodesCounted):
// successes within 2% and, at any moment, within a second of traffic;
// failures likewise, except that a burst shorter than a gossip round (the
// 100 ms of failures before a fast trip) may lose up to a third; first
// attempts, retries and rejections, which only the window totals carry,
// within 4% and two seconds. A node's first row
// is taken as new traffic only once the history has run for two windows (a
// coordinator that just started sees windows of traffic it did not watch); a
// node whose breaker closed under a new generation starts its window afresh,
// and so does the history's account of it.
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
//	segs, err := h.Range("shipping-api", now.Add(-time.Hour), now)
package history
