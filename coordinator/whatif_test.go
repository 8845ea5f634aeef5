package coordinator

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

// TestWhatIfAfterAFloodOfNames: a flood of 1,000 dependency names with one
// call each reaches the observer (more than --history-max-dependencies);
// a busy dependency that appears next can be simulated at once, and the
// flood's evictions are counted.
func TestWhatIfAfterAFloodOfNames(t *testing.T) {
	c := startCoordinator(t, testConfig(t))
	ctx := ctxFor(t, 30*time.Second)
	since := time.Now().UnixMilli()
	row := func(node, dep string, seq, window, total uint64) *fuseboxv1.NodeWindow {
		return &fuseboxv1.NodeWindow{Node: node, Zone: "zone-a", Dependency: dep, Seq: seq,
			Counts:     &fuseboxv1.Counts{FirstAttempts: window, Successes: window},
			Cumulative: &fuseboxv1.Counts{FirstAttempts: total, Successes: total}, CumulativeSinceUnixMs: since, CumulativeAgeMs: seq}
	}
	var flood []*fuseboxv1.NodeWindow
	for i := range 1000 {
		flood = append(flood, row("agent-1", fmt.Sprintf("junk-%04d", i), uint64(i+1), 1, 1))
	}
	if _, refused := c.view.ApplyBatch(&fuseboxv1.GossipBatch{Rows: flood}); refused != 0 {
		t.Fatalf("the observer refused %d rows", refused)
	}
	const dep = "ledger-api"
	c.view.ApplyBatch(&fuseboxv1.GossipBatch{Rows: []*fuseboxv1.NodeWindow{
		row("agent-1", dep, 2000, 40, 40), row("agent-2", dep, 1, 40, 40), row("agent-3", dep, 1, 40, 40)}})
	admin := adminClient(t, c.GRPCAddr(), "")
	if _, err := admin.SimulatePolicy(ctx, &fuseboxv1.SimulatePolicyRequest{Dependency: dep,
		PolicyJson: []byte(`{"dependency":"ledger-api","breaker":{"openDuration":"1s"}}`), Since: durationpb.New(time.Minute)}); err != nil {
		t.Fatalf("SimulatePolicy of the busy dependency after the flood: %v", err)
	}
	if st := c.history.Stats(); st.Dependencies != c.cfg.HistoryMaxDependencies {
		t.Errorf("%d histories, want the cap (%d)", st.Dependencies, c.cfg.HistoryMaxDependencies)
	}
	if n := metricValue(t, c.reg, "fusebox_coordinator_history_dropped_total", map[string]string{"reason": "evicted"}); n == 0 {
		t.Error("no eviction counted")
	}
}
