// Package replay answers "what would this policy have done?": it runs the
// fleet history a coordinator kept (package history) through the real
// engine (sharedstate.Engine) under a policy, and compares what that policy
// would have done with what the fleet did and with another policy.
//
// # How a replay runs
//
// The history's nodes become up to MaxVirtualNodes virtual nodes, each a
// real sharedstate.Engine on one manual clock; they exchange rows and
// records at every step, as gossip would with no delay. Every slot of the
// history is one step: its callers' first attempts are dealt out to the
// virtual nodes that had traffic in it, and each node decides them from its
// snapshot as clientlib does: allowed calls are counted with their
// outcomes, rejected ones as rejections, a probe permit sends probes one at
// a time through AcquireProbe and ProbeResult, and every failed attempt
// asks AcquireRetry for a retry until maxAttempts. The breaker's trip rule,
// its fast path, half-open, probe permits, the retry budget, shadow mode
// and throttling are the engine's own, so a replay follows whatever rules
// the engine has.
//
// What the history cannot say is guessed, the same way for every policy:
//
//   - Demand. While the fleet's breaker was closed, the callers' first
//     attempts are the slot's first attempts; while it was open, half-open
//     or forced open, also its rejections (a breaker rejects first
//     attempts; the retries it would have rejected were never asked for).
//   - Outcomes. A call fails with the slot's failure rate (slow calls
//     likewise), on the nodes that failed in it; a slot without outcomes
//     (the fleet was open and sent nothing) takes those of the nearest slot
//     that has some, usually the fleet's own probes. Outcomes are dealt out
//     deterministically (error diffusion), not drawn at random: a replay
//     gives the same answer every time.
//   - Retries. Each failed attempt asks for a retry after no backoff (in
//     the same step), up to maxAttempts, and a retry fails at the slot's
//     rate; unless the fleet's callers never retried over the range (no
//     retry, and no rejection while its breaker was closed), in which case
//     nobody retries.
//   - Probes answer within their step.
//
// # Known limits
//
//   - Per-node detail: the history keeps pooled counts and up to 64 node
//     identities per slot; the replay deals a slot's calls out evenly over
//     the nodes that had traffic, and its failures over the nodes that
//     failed. With more than MaxVirtualNodes nodes, nodes are merged: each
//     virtual node then sends more calls, so probing goes faster than the
//     fleet's did.
//   - Node-local breakers open on a virtual node's traffic, which is not any
//     real node's: the replay does not reproduce the fleet's node-local
//     opens.
//   - Half-open: what a probe would have answered is known only where the
//     fleet called the dependency at about that time. A policy that probes
//     while the fleet's breaker was open learns the outcome of the fleet's
//     nearest probes, which may be seconds away.
//   - Scope zone is replayed as one fleet-wide breaker; scope node as each
//     virtual node's own breaker (a fleet state is open while any is).
//   - The replay starts closed, with empty windows, a window before the
//     range it reports, and uses the policy for the whole range (a policy
//     change during it is listed in the notes).
//   - Slots older than the fine horizon are a second wide: the fast path
//     sees a second's calls at once.
package replay
