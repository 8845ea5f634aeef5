package agent

import (
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded/embeddedtest"
)

// An agent on a 3-member etcd cluster that loses its quorum (the leader
// and a follower die): the agent keeps enforcing its policies, says it is
// out of sync (fusebox_agent_etcd_synced 0, watch errors counted) while
// the last member has no leader, and once a member is back and a leader
// elected it says it is in sync again — without waiting for a re-list —
// and applies a policy written then.
func TestEtcdQuorumLossAndBack(t *testing.T) {
	cl := embeddedtest.StartCluster(t, 3)
	leader := cl.WaitLeader(t, 10*time.Second)
	survivor, other := (leader+1)%3, (leader+2)%3
	st, err := store.New(store.Config{Client: cl.Client(t), RequestTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 60*time.Second)
	const dep = "ledger"
	if _, err := st.PutPolicy(ctx, dep, []byte(`{"retry":{"maxAttempts":5}}`), admin); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, "quorum")
	cfg.Etcd = cl.EndpointsFirst(survivor)
	a := startAgent(t, cfg)
	sstest.Eventually(t, 10*time.Second, "the agent to sync from etcd", func() bool {
		return value(t, a.m.etcdSynced) == 1 && a.eng.Policy(dep).Retry.MaxAttempts == 5
	})

	errsBefore := value(t, a.m.etcdWatchErrors)
	cl.Kill(leader)
	cl.Kill(other)
	sstest.Eventually(t, 15*time.Second, "the agent to report that etcd has no leader", func() bool {
		return value(t, a.m.etcdSynced) == 0 && value(t, a.m.etcdWatchErrors) > errsBefore
	})
	if got := a.eng.Policy(dep).Retry.MaxAttempts; got != 5 {
		t.Fatalf("without etcd the agent runs maxAttempts %d, want its last good 5", got)
	}

	if err := cl.Restart(other); err != nil {
		t.Fatal(err)
	}
	// Generous: the watch's backoff after a few failures reaches seconds.
	sstest.Eventually(t, 30*time.Second, "the agent to be in sync again", func() bool {
		return value(t, a.m.etcdSynced) == 1
	})
	sstest.Eventually(t, 20*time.Second, "a policy write to succeed", func() bool {
		_, err := st.PutPolicy(ctx, dep, []byte(`{"retry":{"maxAttempts":3}}`), admin)
		return err == nil
	})
	sstest.Eventually(t, 10*time.Second, "the agent to apply the policy written after the quorum came back", func() bool {
		return a.eng.Policy(dep).Retry.MaxAttempts == 3
	})
	// A quorum lost and back is no rewind: etcd kept its history.
	for _, r := range store.RewindReasons() {
		if n := a.rewinds(t, r); n != 0 {
			t.Errorf("rewinds{%s} = %v after a quorum loss, want 0", r, n)
		}
	}
}
