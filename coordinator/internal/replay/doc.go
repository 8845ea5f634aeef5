// Package replay answers "what would this policy have done?": it runs the
// fleet history the coordinator kept (package history) through the real
// engine (sharedstate.Engine) under a policy, on up to MaxVirtualNodes
// virtual nodes and one manual clock, and compares what that policy would
// have done with what the fleet did and with another policy. The rules are
// the engine's own; what the history cannot say (demand while the fleet's
// breaker was open, outcomes, retries) is modelled the same way for every
// policy, deterministically.
//
//	res, err := replay.Run(replay.Input{Dependency: dep, Policy: proposed, Fleet: &current,
//		Segments: segs, Records: h.Records(dep, from, to), From: from, To: to})
//
// How a replay runs, its model and what it cannot know: coordinator/README.md,
// "How a replay runs" and "What a replay cannot know".
package replay
