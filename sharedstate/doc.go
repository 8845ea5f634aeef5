// Package sharedstate is the pure, deterministic engine of Fusebox: the fleet
// circuit breaker and retry budget for each dependency, computed by every node
// from counts it gossips with the others. It does no I/O and starts no
// goroutines; time comes from an injected Clock and randomness from an
// injected Rand, so the whole fleet can be simulated in a test.
//
// # Pieces
//
//   - Policy (policy.go; policy_decode.go, policy_validate.go,
//     policy_lint.go, policy_explain.go): the JSON policy stored in etcd,
//     the struct's JSON tags its only description. A document is read
//     strictly over a copy of a complete policy (DecodePolicy;
//     ParsePolicyOver for a dependency's document over the fleet default,
//     validated; ParsePolicy for a complete one such as _default), with
//     Validate (a *ValidationError naming every violation), Lint (warnings,
//     e.g. retries that cannot fit a deadline) and ExplainPolicy (where each
//     effective value comes from).
//   - Window (window.go): a time-bucketed sliding window of Counts, 10
//     buckets, lock-free and allocation-free to add to. NodeWindow is the row
//     a node gossips with its totals, and its cumulative counts
//     (cumulative.go: Cumulative, Increase, Engine.Cumulative) that sums
//     over nodes can take as counters.
//   - BreakerRecord and Merge (record.go): the replicated breaker decision.
//     Merge takes the higher generation, then open over closed, then the
//     lower origin: commutative, associative and idempotent. Override is an
//     operator's forced-open or forced-closed.
//   - ProbeHolders (probe.go): which members may probe a half-open breaker,
//     by rendezvous hash of (dependency, generation, probe round).
//   - Engine (engine.go; engine_count.go, engine_decide.go, engine_gossip.go,
//     engine_policy.go, engine_members.go, engine_query.go by concern; its
//     per-dependency state in dep.go): one node's state. Inputs: Record, AddCounts
//     (this node's traffic), ApplyRow, ApplyRecord (gossip), SetPolicy,
//     SetPolicyDocument, SetDefaultPolicy, SetOverride (etcd), SetMembers,
//     MemberDead, MemberAlive (membership), and Tick (time). Outputs: Decide,
//     AcquireRetry, AcquireProbe, ProbeOutcome and ProbeResult (decisions),
//     Tick's proposals,
//     RowsToSend, LocalRows, Records (what to gossip), Snapshot, PolicyJSON,
//     Fleet, Rows (what to show), and the OnChange hook.
//   - Snapshot (snapshot.go): an immutable per-dependency view whose
//     DecideFirst lets clientlib decide first attempts with one atomic load.
//   - Throttling and concurrency shares (shape.go): ThrottlePolicy's
//     ThrottleProbability, ConcurrencyShare, Engine.SetInFlight and
//     Engine.Shape; Snapshot.ThrottleProbability, ConcurrencyLimit and
//     DecideFirstAt.
//
// # Rules in brief
//
// A dependency's breaker trips when its pooled counts (scope fleet, zone or
// node) reach minimumRequests with a failure or slow-call rate at its
// threshold and the failures come from at least min(minFailingNodes, nodes
// with requests) nodes; any node that sees this proposes generation+1, open.
// With breaker.confidence > 0 (the default) the rate is the lower bound of
// its Wilson interval, and with breaker.fastPath the rule is applied to the
// freshest suffixes of the window too (trip.go); the reason names the
// horizon that tripped.
// A node whose own window trips while the fleet's does not opens only for
// itself (Snapshot.LocalState, NodeWindow.LocalOpen). An open record turns
// half-open after openDuration × 2^(openCount-1), capped at maxOpenDuration
// and at fleetMaxOpenDuration (never below openDuration; the default, 2s,
// means no doubling); a node's own breaker doubles up to maxOpenDuration.
// Then the top halfOpenProbes members with traffic, by rendezvous hash, may
// each run one probe at a time, the one ranked k from k × probeStagger
// into the round, so that while the dependency stays dead the first
// holder's failed probe reopens the breaker before the others probe; the
// node whose failed probe reopened the breaker and the nodes whose own
// breaker is open hold no permit while another member with traffic does
// (ProbeCandidates). Rounds last probeTimeout: a new round moves the
// permits, and a probe is admitted only if perAttemptTimeout fits in what
// is left of its round, so rounds do not overlap. Probes are judged by the
// closed state's rules (ProbeOutcome): a failure fails, and so does a slow
// success when slow calls can trip the breaker (slowCallRateThreshold < 1,
// or the classic rule). The probes' outcomes are pooled through the rows
// (NodeWindow.ProbeSuccesses): once one succeeded every holder probes, and
// probeSuccessThreshold successes fleet-wide close the breaker
// (generation+1); a failed probe reopens it (generation+1, openCount+1),
// unless other nodes' probes succeeded and no other node's failed: then
// only the failing node's own breaker opens.
// For rampDuration after a close first attempts are admitted with a
// probability rising linearly from rampStart to 1 (published as the
// snapshot's RampProbability, part of its ThrottleProbability, refused as
// ReasonRamp). A node that
// learns the breaker closed under a new generation starts a fresh window,
// and the trip rule counts only rows of the current generation. Overrides
// beat everything;
// shadow mode reports every transition and the reason it would reject, but
// always allows. The retry budget over the window is max(minRetriesPerSecond
// × window, ratio × first attempts) in the scope; a node may retry while its
// retries are below its share, budget × its first attempts / all first
// attempts, and the scope's retries are below the budget.
//
// # Beyond on/off: when to use which
//
// The breaker is binary: it is the answer to a dependency that is down. For
// one that is overloaded but serving, the policy's "throttle" section
// (Google SRE client-side adaptive throttling over the scope's window:
// refuse a first attempt with probability max(0, (requests − k·accepts) /
// (requests + 1)), requests being successes + failures + rejected and
// accepts the successes) keeps the fleet sending about k times what the
// dependency answers; choose k so that the error rate this leaves, 1 − 1/k,
// is below the breaker's failureRateThreshold, or the breaker flaps on top.
// For one with a known capacity in calls, "concurrency.maxInFlight" bounds
// the calls in flight across the fleet, each node's share proportional to
// its part of the scope's first attempts (made or refused), at least 1. For
// tail latency of a healthy one, "retry.hedge" (applied by clientlib)
// starts a second attempt after a delay, each hedge paid from the retry
// budget. Both shapes are recomputed at every Tick and published in the
// Snapshot; the probability moves in steps of 1/200 so that noise does not
// republish. TestShapeSimulation compares them on a simulated overload; its
// table is in clientlib/README.md.
//
// # Counting
//
// Record(dep, FirstAttempt, o) counts a first attempt and its outcome.
// AcquireRetry and AcquireProbe count the attempts they admit (as retries,
// or as first attempts for probes) and the rejections they make, so
// Record(dep, Retry|Probe, o) counts only the outcome. Decide and DecideFirst
// count nothing: a caller that honours a rejection reports it with
// Record(dep, kind, Rejected). AddCounts adds a client's deltas verbatim.
//
// # Policies
//
// A dependency's policy document in etcd may set only some fields: hand it
// to Engine.SetPolicyDocument, which reads it over the current default and
// again whenever SetDefaultPolicy changes the default. ParsePolicyOver(def,
// name, doc) is the check to run at write time.
//
// # Example
//
//	clock := sharedstate.NewManualClock(time.Now())
//	e, err := sharedstate.NewEngine(sharedstate.EngineConfig{Node: "node-a", Zone: "z1", Clock: clock})
//	if err != nil { ... }
//
//	// A caller's request: first attempt, then a retry if the budget allows.
//	if d := e.Decide("shipping-api", sharedstate.FirstAttempt); d.Allowed() {
//		err := call()
//		e.Record("shipping-api", sharedstate.FirstAttempt, outcomeOf(err))
//		if err != nil && e.AcquireRetry("shipping-api").Allowed() {
//			e.Record("shipping-api", sharedstate.Retry, outcomeOf(call()))
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
// clientlib keeps an atomic.Pointer[Snapshot] per dependency, updated from
// the agent's pushes (the agent learns of changes through
// EngineConfig.OnChange), and calls Snapshot.DecideFirst on its hot path.
package sharedstate
