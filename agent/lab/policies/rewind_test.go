package policies

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/lab/fleet/fleettest"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded/embeddedtest"
)

// rewinds is agent i's fusebox_agent_etcd_rewinds_total{reason}.
func (w *world) rewinds(t *testing.T, i int, reason store.RewindReason) float64 {
	t.Helper()
	return w.Metric(t, i, "fusebox_agent_etcd_rewinds_total", "reason", string(reason))
}

// diskCache is what agent i's policy cache (agent.CacheFile in its data
// directory) holds: the names of its policies and overrides.
func (w *world) diskCache(i int) (policies, overrides map[string]json.RawMessage, err error) {
	b, err := os.ReadFile(filepath.Join(w.Config(i).DataDir, agent.CacheFile))
	if err != nil {
		return nil, nil, err
	}
	var c struct {
		Policies  map[string]json.RawMessage `json:"policies"`
		Overrides map[string]json.RawMessage `json:"overrides"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, nil, err
	}
	return c.Policies, c.Overrides, nil
}

// TestEtcdWipedUnderAgents: etcd loses its data and starts empty on the
// same URL. Every agent notices (counted, and logged once with both
// revisions), drops the forced-open override and the policy
// etcd no longer holds — in its disk cache too — and applies every write
// made afterwards; its registration says it saw the rewind and is synced.
func TestEtcdWipedUnderAgents(t *testing.T) {
	w := start(t, 3)
	ctx := fleettest.Ctx(t, 60*time.Second)
	const dep = "catalog"
	def := fleettest.Policy().Breaker.MinimumRequests
	if _, err := w.store.PutPolicy(ctx, dep, []byte(`{"breaker":{"minimumRequests":120}}`), admin); err != nil {
		t.Fatal(err)
	}
	if _, err := w.store.SetOverride(ctx, dep, store.OverrideSpec{State: sharedstate.ForcedOpen, Reason: "drill"}, admin); err != nil {
		t.Fatal(err)
	}
	w.waitFollow(t, "every agent applies policy and override", dep, 120, sharedstate.ForcedOpen)

	embeddedtest.Wipe(t, w.EtcdServer())
	w.waitFollow(t, "every agent drops what etcd lost", dep, def, 0)
	for i, a := range w.Agents() {
		// revision_went_back, unless the others' registrations wrote etcd
		// past the agent's revision before it checked: history_changed.
		if n := w.rewinds(t, i, store.RewindRevisionWentBack) + w.rewinds(t, i, store.RewindHistoryChanged); n != 1 {
			t.Errorf("%s: %v rewinds (revision_went_back or history_changed), want 1", a.Name(), n)
		}
		log := w.Log(i)
		if n := strings.Count(log, "etcd's history went back"); n != 1 || !strings.Contains(log, " from_revision=") {
			t.Errorf("%s: logged the rewind %d times (want once, with its revisions)", a.Name(), n)
		}
		// Unsynced at the rewind (Rewound), synced again by the list from
		// scratch that follows it (Sync).
		sstest.EventuallyNoError(t, 10*time.Second, a.Name()+" to log a sync after the rewind", func() error {
			log := w.Log(i)
			if i := strings.Index(log, "etcd's history went back"); i < 0 || !strings.Contains(log[i:], "policies synced from etcd") {
				return fmt.Errorf("no sync from etcd logged after the rewind")
			}
			return nil
		})
		sstest.EventuallyNoError(t, 10*time.Second, a.Name()+"'s disk cache to hold what etcd holds", func() error {
			policies, overrides, err := w.diskCache(i)
			if err != nil || len(overrides) != 0 || policies[dep] != nil {
				return fmt.Errorf("cache with policies %v and overrides %v, %v: want no catalog override or policy", policies, overrides, err)
			}
			return nil
		})
	}

	// Every write after the wipe reaches every agent.
	if _, err := w.store.SetOverride(ctx, dep, store.OverrideSpec{State: sharedstate.ForcedClosed, Reason: "after"}, admin); err != nil {
		t.Fatal(err)
	}
	if _, err := w.store.PutPolicy(ctx, dep, []byte(`{"breaker":{"minimumRequests":25}}`), admin); err != nil {
		t.Fatal(err)
	}
	w.waitFollow(t, "every agent applies the writes made after the wipe", dep, 25, sharedstate.ForcedClosed)
	for i, a := range w.Agents() {
		if v := w.Metric(t, i, "fusebox_agent_etcd_synced"); v != 1 {
			t.Errorf("%s: etcd_synced %v after the wipe, want 1", a.Name(), v)
		}
	}
	w.waitRegisteredRewind(t, ctx, "")
}

// TestEtcdRestoredUnderAgents: etcd is restored from a snapshot taken
// before the last changes, while one agent is down (its disk cache holds
// the changes). The running agents notice the restore, and the restarted
// one that its cache does not match etcd's history: by the revision, or,
// once etcd was written past it (registrations), by the keys at it. All hold the snapshot's policy, none the
// override set after it, and every write after the restore reaches every
// agent.
func TestEtcdRestoredUnderAgents(t *testing.T) {
	w := start(t, 3)
	ctx := fleettest.Ctx(t, 60*time.Second)
	const dep = "catalog"
	if _, err := w.store.PutPolicy(ctx, dep, []byte(`{"breaker":{"minimumRequests":25}}`), admin); err != nil {
		t.Fatal(err)
	}
	w.waitFollow(t, "every agent applies the policy", dep, 25, 0)
	snap := embeddedtest.Snapshot(t, w.cli)
	if _, err := w.store.PutPolicy(ctx, dep, []byte(`{"breaker":{"minimumRequests":120}}`), admin); err != nil {
		t.Fatal(err)
	}
	if _, err := w.store.SetOverride(ctx, dep, store.OverrideSpec{State: sharedstate.ForcedOpen, Reason: "after the snapshot"}, admin); err != nil {
		t.Fatal(err)
	}
	w.waitFollow(t, "every agent applies the changes after the snapshot", dep, 120, sharedstate.ForcedOpen)
	w.Stop(2)

	embeddedtest.Restore(t, w.EtcdServer(), snap, embeddedtest.RestoreOptions{})
	w.waitFollow(t, "the running agents hold the snapshot's state", dep, 25, 0)
	if err := w.Start(ctx, 2); err != nil {
		t.Fatal(err)
	}
	w.waitFollow(t, "every agent holds the snapshot's state", dep, 25, 0)
	for i, a := range w.Agents() {
		// Which, depends on whether etcd was written past the agent's
		// revision (registrations, the others' updates) before it checked.
		if n := w.rewinds(t, i, store.RewindRevisionWentBack) + w.rewinds(t, i, store.RewindHistoryChanged); n != 1 {
			t.Errorf("%s: %v rewinds (revision_went_back or history_changed), want 1", a.Name(), n)
		}
	}

	if _, err := w.store.SetOverride(ctx, dep, store.OverrideSpec{State: sharedstate.ForcedClosed, Reason: "after the restore"}, admin); err != nil {
		t.Fatal(err)
	}
	if _, err := w.store.PutPolicy(ctx, dep, []byte(`{"breaker":{"minimumRequests":30}}`), admin); err != nil {
		t.Fatal(err)
	}
	w.waitFollow(t, "every agent applies the writes made after the restore", dep, 30, sharedstate.ForcedClosed)
	w.waitRegisteredRewind(t, ctx, "")
}
