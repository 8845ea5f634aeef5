package agent

import (
	"testing"

	"github.com/fusebox-dev/fusebox/protocol"
	"github.com/fusebox-dev/fusebox/protocol/convert"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/protocol/gossip/gossiptest"
)

// Fuzzed gossip payloads that decode reach the agent's gossip handler (and
// so its engine) without a panic, and every invalid row or record in them
// is refused. Package gossip fuzzes the frame layer (FuzzReceive); this
// fuzzes what lies behind it. The seeds run in every normal test run; `go
// test -fuzz FuzzGossipReceive` explores further.
func FuzzGossipReceive(f *testing.F) {
	var codec protocol.Codec
	for _, seed := range gossiptest.FuzzSeeds() {
		f.Add(seed)
	}
	a := newAgent(f, testConfig(f, "fuzz"))
	h := (*gossipHandler)(a.Agent)

	f.Fuzz(func(t *testing.T, data []byte) {
		fr, err := codec.Decode(data)
		if err != nil {
			return // counted as dropped by package gossip
		}
		var rows []*fuseboxv1.NodeWindow
		var recs []*fuseboxv1.BreakerRecord
		var refused int
		switch fr.Type {
		case protocol.FrameBatch:
			rows, recs = fr.Batch.GetRows(), fr.Batch.GetRecords()
			_, refused = h.ApplyBatch(fr.Batch)
		case protocol.FramePushPull:
			rows, recs = fr.PushPull.GetRows(), fr.PushPull.GetRecords()
			_, refused = h.ApplyState(fr.PushPull, false)
		}
		invalid := 0
		for _, m := range rows {
			if convert.RowFromProto(m).Validate() != nil {
				invalid++
			}
		}
		for _, m := range recs {
			if r, ok := convert.RecordFromProto(m); !ok || r.Validate() != nil {
				invalid++
			}
		}
		if refused != invalid {
			t.Fatalf("handler refused %d items, %d are invalid", refused, invalid)
		}
	})
}
