package simnet

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/protocol/gossip"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// nopHandler is a gossip.Handler that applies nothing and sends no state:
// the test below is about membership only.
type nopHandler struct{}

func (nopHandler) ApplyBatch(*fuseboxv1.GossipBatch) (*fuseboxv1.GossipBatch, int) { return nil, 0 }
func (nopHandler) ApplyState(*fuseboxv1.PushPullState, bool) (*fuseboxv1.GossipBatch, int) {
	return nil, 0
}
func (nopHandler) LocalState(bool) *fuseboxv1.PushPullState { return nil }

// A test of protocol/gossip's Rejoin that needs a partition: it lives here,
// with the simulated network, since no product module may require the lab.
//
// After a partition in which two members declared each other dead, one
// Rejoin brings each back into the other's membership within seconds:
// memberlist takes a dead member back only at a higher
// incarnation, and the second join of an answering target carries both
// sides' refutations (with one join, each side waits for the other's
// refutation to come by gossip).
func TestGossipRejoinRevivesBothSidesAtOnce(t *testing.T) {
	// Registered first, so it runs after the members closed: memberlist's
	// Shutdown does not wait for a probe in flight, which ends when its ack
	// timer (one probe interval) fires.
	t.Cleanup(func() {
		sstest.Eventually(t, 10*time.Second, "memberlist probes of closed members ended", func() bool {
			buf := make([]byte, 1<<20)
			return !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "memberlist.(*Memberlist).probeNode")
		})
	})
	n, err := New(Config{Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	member := func(name string) *gossip.Gossip {
		tr, err := n.NewTransport("")
		if err != nil {
			t.Fatal(err)
		}
		cfg := gossip.DefaultConfig()
		cfg.Name = name
		cfg.Meta = gossip.NodeMeta{Role: gossip.RoleAgent, Zone: "z1", Software: "test"}
		cfg.Handler = nopHandler{}
		cfg.GossipInterval, cfg.PushPullInterval = 50*time.Millisecond, time.Second
		cfg.Transport = tr
		cfg.BindAddr = tr.Addr()
		// Probes every second: a dead member is kept (and gossiped to) for
		// 10 probe intervals, long enough to rejoin before memberlist
		// forgets it (then a join adds it as new, with no refutation).
		cfg.ProbeInterval = time.Second
		g, err := gossip.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Close(time.Second) })
		return g
	}
	a, b := member("a"), member("b")
	if _, err := a.Join([]string{b.Addr()}); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 10*time.Second, "a and b see each other", func() bool { return a.NumAgents() == 2 && b.NumAgents() == 2 })
	if err := n.Partition(map[string][]string{"a": {a.Addr()}}); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, time.Minute, "each declares the other dead", func() bool { return a.NumAgents() == 1 && b.NumAgents() == 1 })
	n.Heal()
	if missing, joined, err := a.Rejoin([]string{b.Addr()}); len(missing) != 1 || joined != 1 {
		t.Fatalf("Rejoin after the heal: %d missing, %d joined (%v); want 1, 1", len(missing), joined, err)
	}
	// Each side takes the other back on the join's own exchanges or on the
	// refutation that follows; which one comes first depends on the
	// scheduling (a counted 1 right after Rejoin in one CI run of two), so
	// the test waits for both, well within the dead members' retention.
	sstest.Eventually(t, 5*time.Second, "a and b take each other back", func() bool {
		return a.NumAgents() == 2 && b.NumAgents() == 2
	})
}
