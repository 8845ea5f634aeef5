package coordinator

import (
	"context"
	"crypto/ed25519"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/protocol/gossip"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

// register puts a gossip member in the etcd member registry as an agent,
// until the test ends.
func register(t *testing.T, st *store.Store, f *fakeAgent) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reg, err := st.Register(ctx, store.Member{Node: f.g.Name(), Role: string(gossip.RoleAgent), GossipAddr: f.g.Addr(),
		PublicKey: gossip.EncodeKey(f.key.Public().(ed25519.PublicKey))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
}

func observerSees(c *Coordinator, names ...string) bool {
	var have []string
	for _, m := range c.gossipNode().Members() {
		have = append(have, m.Name)
	}
	for _, n := range names {
		if !slices.Contains(have, n) {
			return false
		}
	}
	return true
}

// TestObserverRejoinsRegisteredAgents: an observer that already has company
// (agent-a) joins the agents of the etcd registry that memberlist does not
// list as alive — here a second cluster, agent-b and agent-c, that never
// heard of the observer or agent-a (the other half of a healed partition,
// or agents restarted on new ports). Nothing but the observer's periodic
// reconcile joins them: the fake agents have no join loop, and the
// observer's first join (to agent-a alone) happened before they were
// registered. With a huge --rejoin-interval this test fails.
func TestObserverRejoinsRegisteredAgents(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a coordinator and gossip members")
	}
	cfg := testConfig(t)
	cfg.RejoinInterval = 100 * time.Millisecond
	c := startCoordinator(t, cfg)
	_, st := otherWriter(t, c)

	a := startFakeAgent(t, "agent-a", "zone-a")
	register(t, st, a)
	sstest.Eventually(t, 20*time.Second, "the observer joins agent-a through the registry", func() bool {
		return observerSees(c, "agent-a") && c.view.AliveAgents() == 1
	})

	b := startFakeAgent(t, "agent-b", "zone-b")
	cc := startFakeAgent(t, "agent-c", "zone-b")
	if _, err := b.g.Join([]string{cc.g.Addr()}); err != nil {
		t.Fatal(err)
	}
	register(t, st, b)
	register(t, st, cc)
	sstest.Eventually(t, 20*time.Second, "the observer rejoins agent-b and agent-c, registered but not alive to it", func() bool {
		return observerSees(c, "agent-a", "agent-b", "agent-c") && c.view.AliveAgents() == 3
	})
}

func TestConfigRejoinInterval(t *testing.T) {
	cfg := testConfig(t)
	if DefaultConfig().RejoinInterval != 2*time.Second {
		t.Errorf("default rejoin interval %v, want 2s", DefaultConfig().RejoinInterval)
	}
	cfg.RejoinInterval = 0
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "rejoin-interval") {
		t.Errorf("Validate with rejoin interval 0: %v, want an error naming rejoin-interval", err)
	}
}
