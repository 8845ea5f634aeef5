package agent

import (
	"testing"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

// Gossip rows and records are validated in one place, the engine's merge:
// the handler converts and hands both over, and a malformed one of each
// is refused there (the engine counts it) and reported as invalid.
func TestGossipItemsValidatedByTheEngine(t *testing.T) {
	a := startAgent(t, testConfig(t, "validator"))
	before := a.eng.Stats()
	_, refused := (*gossipHandler)(a.Agent).ApplyBatch(&fuseboxv1.GossipBatch{
		Rows: []*fuseboxv1.NodeWindow{{Node: "peer", Dependency: "bad name!", Seq: 1}},
		Records: []*fuseboxv1.BreakerRecord{{Dependency: "d", Generation: 1, Origin: "peer",
			State: fuseboxv1.BreakerState_BREAKER_STATE_HALF_OPEN}}, // records never carry half-open
	})
	after := a.eng.Stats()
	if refused != 2 || after.InvalidRows != before.InvalidRows+1 || after.InvalidRecords != before.InvalidRecords+1 {
		t.Fatalf("refused %d; engine counted %d invalid rows and %d invalid records more, want 2, 1 and 1", refused,
			after.InvalidRows-before.InvalidRows, after.InvalidRecords-before.InvalidRecords)
	}
	if a.eng.Snapshot("d") != nil {
		t.Fatal("a refused record left a dependency behind")
	}
}
