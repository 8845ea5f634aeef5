package sharedstate

import "testing"

// ProposerOrder names the node that proposes: with Proposers 1, only its
// first node proposes a trip.
func TestProposerOrder(t *testing.T) {
	clock := NewManualClock(t0)
	nodes := []string{"a", "b", "c", "d"}
	for _, dep := range []string{"x", "y", "z"} {
		first := ProposerOrder(dep, 1, nodes)[0]
		engines := map[string]*Engine{}
		for _, n := range nodes {
			e := newTestEngine(t, n, "", clock, func(c *EngineConfig) { c.Proposers = 1 })
			for _, m := range nodes {
				if m != n {
					e.MemberAlive(m, "")
				}
			}
			record(t, e, dep, FirstAttempt, Failure, 50)
			engines[n] = e
		}
		for _, n := range nodes {
			for _, m := range nodes {
				if m != n {
					gossip(engines[n], engines[m])
				}
			}
		}
		for _, n := range nodes {
			proposed := len(engines[n].Tick()) > 0
			if proposed != (n == first) {
				t.Fatalf("%s: node %s proposed %v; ProposerOrder says %s proposes", dep, n, proposed, first)
			}
		}
	}
}
