// Package gossiptest holds what the gossip fuzz tests of package gossip
// (the frame layer) and of the agent (its handler behind it) share. Only
// _test.go files import it.
package gossiptest

import (
	"github.com/fusebox-dev/fusebox/protocol"
	"github.com/fusebox-dev/fusebox/protocol/convert"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// FuzzSeeds returns the seed corpus of the gossip receive fuzzers: a valid
// batch and push/pull state, a batch of invalid items, a truncated batch
// and a few short or malformed frames.
func FuzzSeeds() [][]byte {
	var codec protocol.Codec
	batch, _ := codec.EncodeBatch(&fuseboxv1.GossipBatch{
		Rows: []*fuseboxv1.NodeWindow{convert.RowToProto(sharedstate.NodeWindow{Node: "peer", Zone: "z1",
			Dependency: "dep", Seq: 7, Generation: 2, Counts: sharedstate.Counts{FirstAttempts: 3, Failures: 3}})},
		Records: []*fuseboxv1.BreakerRecord{convert.RecordToProto(sharedstate.BreakerRecord{Dependency: "dep", Zone: "z1",
			Generation: 3, State: sharedstate.Open, OpenCount: 1, Origin: "peer"})},
	})
	pushPull, _ := codec.EncodePushPull(&fuseboxv1.PushPullState{Node: "peer",
		Records: []*fuseboxv1.BreakerRecord{{Dependency: "x", Generation: 1, State: fuseboxv1.BreakerState_BREAKER_STATE_OPEN, Origin: "peer"}}})
	invalid, _ := codec.EncodeBatch(&fuseboxv1.GossipBatch{Rows: []*fuseboxv1.NodeWindow{{Node: "", Dependency: "bad name"}},
		Records: []*fuseboxv1.BreakerRecord{{Dependency: "y", State: fuseboxv1.BreakerState_BREAKER_STATE_HALF_OPEN}}})
	return [][]byte{batch, pushPull, invalid, nil, {1}, {2, 1}, {1, 9, 0}, {1, 1, 0xff, 0xff}, batch[:len(batch)-1]}
}
