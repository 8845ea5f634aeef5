package agent

import (
	"strings"
	"testing"

	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

// rewinds is the agent's fusebox_agent_etcd_rewinds_total{reason}.
func (a *testAgent) rewinds(t *testing.T, reason store.RewindReason) float64 {
	t.Helper()
	return value(t, a.m.etcdRewinds.WithLabelValues(string(reason)))
}

// The handler's side of a rewind: fusebox_agent_etcd_synced is 0 from the
// rewind until the list from scratch is applied.
func TestRewindUnsyncsUntilTheRelist(t *testing.T) {
	a := startAgent(t, testConfig(t, "rewind"))
	h := (*watchHandler)(a.Agent)
	h.Sync(store.State{Revision: 40, Policies: map[string]store.PolicyEntry{}, Overrides: map[string]store.OverrideEntry{}})
	if v := value(t, a.m.etcdSynced); v != 1 {
		t.Fatalf("etcd_synced %v after a sync, want 1", v)
	}
	h.Rewound(store.Rewind{Reason: store.RewindNewCluster, FromRevision: 40, ToRevision: 7, FromCluster: 1, ToCluster: 2})
	if v := value(t, a.m.etcdSynced); v != 0 {
		t.Errorf("etcd_synced %v after a rewind, want 0", v)
	}
	if n := a.rewinds(t, store.RewindNewCluster); n != 1 {
		t.Errorf("rewinds{new_cluster} = %v, want 1", n)
	}
	if log := a.log.String(); !strings.Contains(log, "from_revision=40 to_revision=7 from_cluster=0000000000000001 to_cluster=0000000000000002") {
		t.Errorf("the rewind's log line lacks its revisions and clusters:\n%s", log)
	}
	h.Sync(store.State{Revision: 7, ClusterID: 2, Policies: map[string]store.PolicyEntry{}, Overrides: map[string]store.OverrideEntry{}})
	if v := value(t, a.m.etcdSynced); v != 1 {
		t.Errorf("etcd_synced %v after the list from scratch, want 1", v)
	}
}
