// Package convert maps between package sharedstate's types and the
// fuseboxv1 protocol messages: breaker records and node rows for gossip,
// decision snapshots and decisions for the agent's local API, outcomes and
// attempt kinds from clients. The agent, the coordinator's fleet observer
// and clientlib share it, so every side reads the wire the same way.
//
// Usage:
//
//	msg := convert.RecordToProto(rec)          // for a GossipBatch
//	rec, ok := convert.RecordFromProto(msg)    // ok is false for a state that never travels
//	msg := convert.SnapshotToProto(engine.Snapshot("shipping-api"))
//	_, msg.PolicyJson = engine.PolicyJSON("shipping-api") // its policy, once
//	…
//	snap := convert.SnapshotFromProto(msg)
//	pol, err := sharedstate.ParsePolicy(msg.GetPolicyJson())
//	snap.Policy = &pol                                    // decides exactly as the agent's
package convert
