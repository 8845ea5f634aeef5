package agent

import (
	"testing"

	"github.com/fusebox-dev/fusebox/protocol"
	"github.com/fusebox-dev/fusebox/protocol/convert"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

func droppedTotal(g *Gossip) uint64 {
	var n uint64
	for _, v := range g.Stats().Dropped {
		n += v
	}
	return n
}

// Fuzzed payloads into the gossip receive paths (NotifyMsg and
// MergeRemoteState) never panic; whatever does not decode, or decodes to
// the wrong frame type, or carries invalid items, is counted as dropped.
// The seeds run in every normal test run; `go test -fuzz FuzzGossipReceive`
// explores further.
func FuzzGossipReceive(f *testing.F) {
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
	for _, seed := range [][]byte{batch, pushPull, invalid, nil, {1}, {2, 1}, {1, 9, 0}, {1, 1, 0xff, 0xff}, batch[:len(batch)-1]} {
		f.Add(seed)
	}
	a := newAgent(f, testConfig(f, "fuzz"))
	d := (*gossipDelegate)(a.gossip)

	f.Fuzz(func(t *testing.T, data []byte) {
		_, decErr := codec.Decode(data)
		before := droppedTotal(a.gossip)
		in := append([]byte(nil), data...)
		d.NotifyMsg(in)
		clear(in) // memberlist reuses its buffers: nothing may be kept
		afterMsg := droppedTotal(a.gossip)
		if decErr != nil && afterMsg == before {
			t.Fatalf("NotifyMsg: undecodable frame (%v) not counted as dropped", decErr)
		}
		d.MergeRemoteState(append([]byte(nil), data...), false)
		if decErr != nil && len(data) > 0 && droppedTotal(a.gossip) == afterMsg {
			t.Fatalf("MergeRemoteState: undecodable state (%v) not counted as dropped", decErr)
		}
	})
}
