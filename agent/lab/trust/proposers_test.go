package trust

import (
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/lab/fleet/fleettest"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// No trip storm: with 20 agents that all see the failures, the trip is
// proposed by at most Proposers (3) of them, and the direct packets of the
// transition are at most 3 × 19. Counts, not times.
func TestAtMostThreeProposersAt20Agents(t *testing.T) {
	if testing.Short() {
		t.Skip("20 agents")
	}
	const n = 20
	// 20 agents with -race on a shared 2-core machine: the fleet's
	// generous start deadline (fleettest.StartTimeout).
	f := start(t, n, false, func(c *agent.Config) {
		c.ProposerDelay = time.Minute // a slow machine must not make the next rank group propose
		c.GossipInterval = 100 * time.Millisecond
		c.TickInterval = 100 * time.Millisecond
		c.ProbeInterval = time.Second // 20 agents under -race on 2 shared cores: no flapping suspicions
		c.LogLevel = "info"
	})
	agents := f.Agents()
	const dep = "inventory"
	directBefore := uint64(0)
	for _, a := range agents {
		directBefore += a.Gossip().Stats().DirectRecordsOut
	}
	for i := range agents {
		fleettest.Report(t, f.Client(i), dep, 0, 5)
	}
	sstest.Eventually(t, 60*time.Second, "every agent holds the open record", func() bool {
		for _, a := range agents {
			if s := a.Engine().Snapshot(dep); s == nil || s.Generation == 0 {
				return false
			}
		}
		return true
	})
	proposers, direct := 0, uint64(0)
	for i, a := range agents {
		proposers += int(f.Metric(t, i, "fusebox_agent_breaker_transitions_total", "dependency", dep, "to", "open", "origin", "self"))
		direct += a.Gossip().Stats().DirectRecordsOut
	}
	direct -= directBefore
	// Urgent rows (a node's freshest counts turning to failures) also go
	// out directly, from every failing node; the bound is on the packets
	// that carry the transition's record.
	t.Logf("%d agents: %d proposed the trip, %d direct packets with records", n, proposers, direct)
	if proposers < 1 || proposers > sharedstate.DefaultProposers {
		t.Fatalf("%d agents proposed the trip, want 1..%d", proposers, sharedstate.DefaultProposers)
	}
	if direct > uint64(sharedstate.DefaultProposers*(n-1)) {
		t.Fatalf("%d direct packets with records for one transition, want at most %d", direct, sharedstate.DefaultProposers*(n-1))
	}
}
