package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded/embeddedtest"
)

// rewinds is the agent's fusebox_agent_etcd_rewinds_total{reason}.
func (a *testAgent) rewinds(t *testing.T, reason store.RewindReason) float64 {
	t.Helper()
	return value(t, a.m.etcdRewinds.WithLabelValues(string(reason)))
}

// follows says how a is not in step with the catalog policy and override
// etcd holds now ("" when it is): minimumRequests min, and the override
// (0 for none).
func (a *testAgent) follows(dep string, min int, ov sharedstate.OverrideState) string {
	if got := a.eng.Policy(dep).Breaker.MinimumRequests; got != min {
		return fmt.Sprintf("%s: minimumRequests %d, want %d", a.Name(), got, min)
	}
	got := sharedstate.OverrideState(0)
	if s := a.eng.Snapshot(dep); s != nil {
		got = s.Override
	}
	if got != ov {
		return fmt.Sprintf("%s: override %v, want %v", a.Name(), got, ov)
	}
	return ""
}

func (f *fleet) waitFollow(what, dep string, min int, ov sharedstate.OverrideState) {
	f.t.Helper()
	sstest.EventuallyNoError(f.t, 15*time.Second, what, func() error {
		for _, a := range f.agents {
			if miss := a.follows(dep, min, ov); miss != "" {
				return fmt.Errorf("%s", miss)
			}
		}
		return nil
	})
}

// waitRegisteredRewind waits until every agent's registration says it is
// synced after a rewind for reason ("": any).
func (f *fleet) waitRegisteredRewind(ctx context.Context, reason store.RewindReason) {
	f.t.Helper()
	sstest.EventuallyNoError(f.t, 15*time.Second, "every agent's registration to report the rewind, synced", func() error {
		ms, _, err := f.store.ListMembers(ctx)
		if err != nil {
			return err
		}
		byNode := map[string]store.MemberEntry{}
		for _, m := range ms {
			byNode[m.Node] = m
		}
		for _, a := range f.agents {
			m, ok := byNode[a.Name()]
			switch {
			case !ok:
				return fmt.Errorf("%s is not registered", a.Name())
			case m.Etcd == nil || !m.Etcd.Synced || m.Etcd.LastRewind == nil || (reason != "" && m.Etcd.LastRewind.Reason != reason):
				return fmt.Errorf("%s registered with etcd %+v", a.Name(), m.Etcd)
			}
		}
		return nil
	})
}

// TestEtcdWipedUnderAgents: etcd loses its data and starts empty on the
// same URL. Every agent notices (counted, and logged once with both
// revisions), drops the forced-open override and the policy
// etcd no longer holds — in its disk cache too — and applies every write
// made afterwards; its registration says it saw the rewind and is synced.
func TestEtcdWipedUnderAgents(t *testing.T) {
	f := newFleet(t, 3, true)
	f.waitSynced()
	ctx := ctxT(t, 60*time.Second)
	const dep = "catalog"
	def := testPolicy().Breaker.MinimumRequests
	if _, err := f.store.PutPolicy(ctx, dep, []byte(`{"breaker":{"minimumRequests":120}}`), admin); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.SetOverride(ctx, dep, store.OverrideSpec{State: sharedstate.ForcedOpen, Reason: "drill"}, admin); err != nil {
		t.Fatal(err)
	}
	f.waitFollow("every agent applies policy and override", dep, 120, sharedstate.ForcedOpen)

	embeddedtest.Wipe(t, f.etcd)
	f.waitFollow("every agent drops what etcd lost", dep, def, 0)
	for _, a := range f.agents {
		// revision_went_back, unless the others' registrations wrote etcd
		// past the agent's revision before it checked: history_changed.
		if n := a.rewinds(t, store.RewindRevisionWentBack) + a.rewinds(t, store.RewindHistoryChanged); n != 1 {
			t.Errorf("%s: %v rewinds (revision_went_back or history_changed), want 1", a.Name(), n)
		}
		log := a.log.String()
		if n := strings.Count(log, "etcd's history went back"); n != 1 || !strings.Contains(log, " from_revision=") {
			t.Errorf("%s: logged the rewind %d times (want once, with its revisions)", a.Name(), n)
		}
		// Unsynced at the rewind (Rewound), synced again by the list from
		// scratch that follows it (Sync).
		sstest.EventuallyNoError(t, 10*time.Second, a.Name()+" to log a sync after the rewind", func() error {
			log := a.log.String()
			if i := strings.Index(log, "etcd's history went back"); i < 0 || !strings.Contains(log[i:], "policies synced from etcd") {
				return fmt.Errorf("no sync from etcd logged after the rewind")
			}
			return nil
		})
		sstest.EventuallyNoError(t, 10*time.Second, a.Name()+"'s disk cache to hold what etcd holds", func() error {
			c, err := loadCache(a.cfg.DataDir)
			if err != nil || c == nil || len(c.Overrides) != 0 || c.Policies[dep] != nil {
				return fmt.Errorf("cache %+v, %v: want no catalog override or policy", c, err)
			}
			return nil
		})
	}

	// Every write after the wipe reaches every agent.
	if _, err := f.store.SetOverride(ctx, dep, store.OverrideSpec{State: sharedstate.ForcedClosed, Reason: "after"}, admin); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.PutPolicy(ctx, dep, []byte(`{"breaker":{"minimumRequests":25}}`), admin); err != nil {
		t.Fatal(err)
	}
	f.waitFollow("every agent applies the writes made after the wipe", dep, 25, sharedstate.ForcedClosed)
	for _, a := range f.agents {
		if v := value(t, a.m.etcdSynced); v != 1 {
			t.Errorf("%s: etcd_synced %v after the wipe, want 1", a.Name(), v)
		}
	}
	f.waitRegisteredRewind(ctx, "")
}

// TestEtcdRestoredUnderAgents: etcd is restored from a snapshot taken
// before the last changes, while one agent is down (its disk cache holds
// the changes). The running agents notice the restore, and the restarted
// one that its cache does not match etcd's history: by the revision, or,
// once etcd was written past it (registrations), by the keys at it. All hold the snapshot's policy, none the
// override set after it, and every write after the restore reaches every
// agent.
func TestEtcdRestoredUnderAgents(t *testing.T) {
	f := newFleet(t, 3, true)
	f.waitSynced()
	ctx := ctxT(t, 60*time.Second)
	const dep = "catalog"
	if _, err := f.store.PutPolicy(ctx, dep, []byte(`{"breaker":{"minimumRequests":25}}`), admin); err != nil {
		t.Fatal(err)
	}
	f.waitFollow("every agent applies the policy", dep, 25, 0)
	snap := embeddedtest.Snapshot(t, f.cli)
	if _, err := f.store.PutPolicy(ctx, dep, []byte(`{"breaker":{"minimumRequests":120}}`), admin); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.SetOverride(ctx, dep, store.OverrideSpec{State: sharedstate.ForcedOpen, Reason: "after the snapshot"}, admin); err != nil {
		t.Fatal(err)
	}
	f.waitFollow("every agent applies the changes after the snapshot", dep, 120, sharedstate.ForcedOpen)
	stopped := f.agents[2]
	cfg := stopped.Config()
	stopped.Close()
	f.agents = f.agents[:2]

	embeddedtest.Restore(t, f.etcd, snap, embeddedtest.RestoreOptions{})
	f.waitFollow("the running agents hold the snapshot's state", dep, 25, 0)
	restarted := startAgent(t, cfg)
	f.agents = append(f.agents, restarted)
	f.waitFollow("every agent holds the snapshot's state", dep, 25, 0)
	for _, a := range f.agents {
		// Which, depends on whether etcd was written past the agent's
		// revision (registrations, the others' updates) before it checked.
		if n := a.rewinds(t, store.RewindRevisionWentBack) + a.rewinds(t, store.RewindHistoryChanged); n != 1 {
			t.Errorf("%s: %v rewinds (revision_went_back or history_changed), want 1", a.Name(), n)
		}
	}

	if _, err := f.store.SetOverride(ctx, dep, store.OverrideSpec{State: sharedstate.ForcedClosed, Reason: "after the restore"}, admin); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.PutPolicy(ctx, dep, []byte(`{"breaker":{"minimumRequests":30}}`), admin); err != nil {
		t.Fatal(err)
	}
	f.waitFollow("every agent applies the writes made after the restore", dep, 30, sharedstate.ForcedClosed)
	f.waitRegisteredRewind(ctx, "")
}

// The handler's side of a rewind: fusebox_agent_etcd_synced is 0 from the
// rewind until the list from scratch is applied.
func TestRewindUnsyncsUntilTheRelist(t *testing.T) {
	a := newFleet(t, 1, false).agents[0]
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
