package store_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded/embeddedtest"
)

// held is what a state holds: "policy/<name>" and "override/<dependency>",
// each with its mod revision.
func held(st store.State) map[string]int64 {
	out := map[string]int64{}
	for name, e := range st.Policies {
		out["policy/"+name] = e.ModRevision
	}
	for dep, e := range st.Overrides {
		out["override/"+dep] = e.ModRevision
	}
	return out
}

// etcdHolds is what etcd holds now, as held says it.
func etcdHolds(t *testing.T, ctx context.Context, st *store.Store) map[string]int64 {
	t.Helper()
	pols, _, err := st.ListPolicies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ovs, _, err := st.ListOverrides(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, e := range pols {
		out["policy/"+e.Name] = e.ModRevision
	}
	for _, e := range ovs {
		out["override/"+e.Dependency] = e.ModRevision
	}
	return out
}

// waitHolds waits until the recorder holds exactly what etcd holds now.
func (r *recorder) waitHolds(t *testing.T, ctx context.Context, st *store.Store, what string) {
	t.Helper()
	want := etcdHolds(t, ctx, st)
	r.waitFor(t, what+": the watcher holds exactly what etcd holds", func(r *recorder) bool {
		return len(r.syncs) > 0 && maps.Equal(held(r.state), want)
	})
}

// waitRewinds waits for the n-th rewind and returns it.
func (r *recorder) waitRewinds(t *testing.T, n int) store.Rewind {
	t.Helper()
	r.waitFor(t, fmt.Sprintf("rewind %d", n), func(r *recorder) bool { return len(r.rewinds) >= n })
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.rewinds) != n {
		t.Fatalf("rewinds %v, want %d", r.rewinds, n)
	}
	return r.rewinds[n-1]
}

// syncedAfterRewind checks that the last rewind was followed by a Sync.
func (r *recorder) syncedAfterRewind(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	i := slices.Index(r.calls, "rewound")
	if i < 0 || !slices.Contains(r.calls[i:], "sync") {
		t.Fatalf("calls %v: want a sync after the rewind", r.calls)
	}
}

// seed writes n policies named prefix-NN and a forced-open override of the
// first, and returns the policies' mod revisions by name.
func seed(t *testing.T, ctx context.Context, st *store.Store, prefix string, n int) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for i := range n {
		name := fmt.Sprintf("%s-%02d", prefix, i)
		e, err := st.PutPolicy(ctx, name, []byte(`{"breaker": {"minimumRequests": 120}}`), as("alice"))
		if err != nil {
			t.Fatal(err)
		}
		out[name] = e.ModRevision
	}
	if _, err := st.SetOverride(ctx, prefix+"-00", store.OverrideSpec{State: sharedstate.ForcedOpen, Reason: "seed"}, as("alice")); err != nil {
		t.Fatal(err)
	}
	return out
}

// noReconnectCheck leaves only the reconnection to notice a rewind: the
// periodic check waits an hour.
var noReconnectCheck = store.WatchOptions{CheckInterval: time.Hour}

// TestWatchNoticesWipedEtcd: etcd loses its data and starts again empty
// on the same URL (same member and cluster IDs, revision back to 1). The
// watcher notices when its connection comes back (the periodic check is
// off), reports revision_went_back with both revisions, lists from
// scratch — the policies and the override from before are gone — and
// every write afterwards arrives. A compare-and-swap with a revision from
// before is refused as coming from another history.
func TestWatchNoticesWipedEtcd(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	before := seed(t, ctx, e.st, "old", 10)
	rec := newRecorder()
	w := startWatch(t, e.st, rec, noReconnectCheck)
	rec.waitHolds(t, ctx, e.st, "before the wipe")
	st0 := w.Status()
	if !st0.Synced || st0.ClusterID == 0 || st0.Rewinds != 0 {
		t.Fatalf("status before the wipe = %+v, want synced, a cluster ID, no rewind", st0)
	}

	embeddedtest.Wipe(t, e.srv)
	rw := rec.waitRewinds(t, 1)
	if rw.Reason != store.RewindRevisionWentBack || rw.FromRevision != st0.Revision || rw.ToRevision >= rw.FromRevision ||
		rw.FromCluster != st0.ClusterID || rw.ToCluster != st0.ClusterID || rw.At.IsZero() {
		t.Fatalf("rewind = %+v, want revision_went_back from revision %d, cluster %s unchanged", rw, st0.Revision, st0.ClusterID)
	}

	if _, err := e.st.PutPolicy(ctx, "new", []byte(`{"breaker": {"minimumRequests": 25}}`), as("bob")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.SetOverride(ctx, "new", store.OverrideSpec{State: sharedstate.ForcedClosed}, as("bob")); err != nil {
		t.Fatal(err)
	}
	rec.waitHolds(t, ctx, e.st, "after the wipe")
	rec.syncedAfterRewind(t)
	rec.mu.Lock()
	if _, ok := rec.state.Overrides["old-00"]; ok {
		t.Errorf("the override from before the wipe survived: %+v", rec.state.Overrides)
	}
	rec.mu.Unlock()
	if st := w.Status(); !st.Synced || st.Rewinds != 1 || st.LastRewind == nil || *st.LastRewind != rw {
		t.Errorf("status after the wipe = %+v, want synced, 1 rewind, the last %+v", st, rw)
	}

	// A caller that read old-03 before the wipe writes with its revision.
	_, err := e.st.PutPolicy(ctx, "old-03", []byte(`{}`), store.WriteOptions{Actor: "carol", Expect: store.ExpectModRevision(before["old-03"])})
	var ce *store.ConflictError
	if !errors.As(err, &ce) || !ce.FromAnotherHistory() || !strings.Contains(err.Error(), "not from etcd's present history") {
		t.Fatalf("put with a revision from before the wipe: %v, want a conflict naming another history", err)
	}
}

// TestWatchNoticesHistoryWrittenPastItsRevision: while the watcher is cut
// off, etcd is wiped and written past the watcher's revision. Comparing
// revisions cannot tell; when the connection comes back the watcher
// compares the keys at its revision, reports history_changed, and holds
// exactly what etcd holds.
func TestWatchNoticesHistoryWrittenPastItsRevision(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	seed(t, ctx, e.st, "old", 5)
	p := embeddedtest.NewProxy(t, e.srv.Endpoints()[0])
	st, err := store.New(store.Config{Client: clientVia(t, e.srv, p)})
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	w := startWatch(t, st, rec, noReconnectCheck)
	rec.waitHolds(t, ctx, e.st, "before the wipe")
	was := w.Status().Revision

	p.SetCut(true)
	embeddedtest.Wipe(t, e.srv)
	seed(t, ctx, e.st, "new", int(was)+5)
	p.SetCut(false)

	rw := rec.waitRewinds(t, 1)
	if rw.Reason != store.RewindHistoryChanged || rw.FromRevision < was || rw.ToRevision <= was {
		t.Fatalf("rewind = %+v, want history_changed from revision %d or later to a later one", rw, was)
	}
	rec.waitHolds(t, ctx, e.st, "after the wipe")
	rec.syncedAfterRewind(t)
}

// TestWatchNoticesAnotherCluster: the watcher's address leads to another
// etcd cluster (another cluster token, so another cluster ID). The watcher
// reports new_cluster with both IDs and holds what the new cluster holds.
func TestWatchNoticesAnotherCluster(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	seed(t, ctx, e.st, "a", 3)
	other := embeddedtest.Start(t, func(c *embedded.Config) { c.ClusterToken = "other-cluster" })
	otherSt, err := store.New(store.Config{Client: embeddedtest.Client(t, other)})
	if err != nil {
		t.Fatal(err)
	}
	seed(t, ctx, otherSt, "b", 2)

	p := embeddedtest.NewProxy(t, e.srv.Endpoints()[0])
	st, err := store.New(store.Config{Client: clientVia(t, e.srv, p)})
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	w := startWatch(t, st, rec, store.WatchOptions{})
	rec.waitHolds(t, ctx, e.st, "on the first cluster")
	first := w.Status().ClusterID

	p.SetTarget(other.Endpoints()[0])
	rw := rec.waitRewinds(t, 1)
	if rw.Reason != store.RewindNewCluster || rw.FromCluster != first || rw.ToCluster == first || rw.ToCluster == 0 {
		t.Fatalf("rewind = %+v, want new_cluster from %s", rw, first)
	}
	rec.waitHolds(t, ctx, otherSt, "on the other cluster")
	rec.syncedAfterRewind(t)
	if got := w.Status().ClusterID; got != rw.ToCluster {
		t.Errorf("status cluster %s, want %s", got, rw.ToCluster)
	}
}

// TestWatchNoticesSnapshotRestore: etcd is restored from a snapshot taken
// before the last changes (the documented backup procedure, as etcdutl
// snapshot restore does it: same IDs). The watcher reports
// revision_went_back and holds the snapshot's content: the override set
// after the snapshot is gone, the policy changed after it is back to its
// value in the snapshot.
func TestWatchNoticesSnapshotRestore(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	seed(t, ctx, e.st, "p", 3)
	snap := embeddedtest.Snapshot(t, e.cli)
	if _, err := e.st.PutPolicy(ctx, "p-01", []byte(`{"breaker": {"minimumRequests": 25}}`), as("bob")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.SetOverride(ctx, "p-02", store.OverrideSpec{State: sharedstate.ForcedClosed}, as("bob")); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	startWatch(t, e.st, rec, noReconnectCheck)
	rec.waitHolds(t, ctx, e.st, "before the restore")

	embeddedtest.Restore(t, e.srv, snap, embeddedtest.RestoreOptions{})
	if rw := rec.waitRewinds(t, 1); rw.Reason != store.RewindRevisionWentBack {
		t.Fatalf("rewind = %+v, want revision_went_back", rw)
	}
	rec.waitHolds(t, ctx, e.st, "after the restore")
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if _, ok := rec.state.Overrides["p-02"]; ok {
		t.Errorf("the override set after the snapshot survived the restore")
	}
	if got, _ := rec.state.Policies["p-01"].Policy(sharedstate.DefaultPolicy()); got.Breaker.MinimumRequests != 120 {
		t.Errorf("p-01 minimumRequests %d after the restore, want the snapshot's 120", got.Breaker.MinimumRequests)
	}
}

// TestWatchNoticesRestoreMarkedCompacted: a restore with a revision bump
// that marks the restored revision compacted (etcdutl --bump-revision
// --mark-compacted) looks like progress; the watch then finds the revision
// it needs compacted beyond anything it knew etcd had: compacted.
func TestWatchNoticesRestoreMarkedCompacted(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	seed(t, ctx, e.st, "p", 3)
	snap := embeddedtest.Snapshot(t, e.cli)
	if _, err := e.st.SetOverride(ctx, "p-02", store.OverrideSpec{State: sharedstate.ForcedClosed}, as("bob")); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	w := startWatch(t, e.st, rec, noReconnectCheck)
	rec.waitHolds(t, ctx, e.st, "before the restore")
	was := w.Status().Revision

	embeddedtest.Restore(t, e.srv, snap, embeddedtest.RestoreOptions{RevisionBump: 1000, MarkCompacted: true})
	rw := rec.waitRewinds(t, 1)
	if rw.Reason != store.RewindCompacted || rw.FromRevision != was || rw.ToRevision < was+900 {
		t.Fatalf("rewind = %+v, want compacted from revision %d to about %d", rw, was, was+1000)
	}
	rec.waitHolds(t, ctx, e.st, "after the restore")
	rec.syncedAfterRewind(t)
}

// TestWatchInitialFromAnotherHistory: a watcher seeded with a cached state
// from a later revision than etcd has, another cluster, or with an entry
// that etcd does not hold at the cache's revision, finds it out at its
// first list: a rewind, and nothing of the cache is kept, not even as the
// last good value of a key that is invalid in etcd. A cache of the same
// history keeps its last good values.
func TestWatchInitialFromAnotherHistory(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	good, err := e.st.PutPolicy(ctx, "dep", []byte(`{"retry": {"maxAttempts": 5}}`), as("alice"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.cli.Put(ctx, e.st.PolicyKey("dep"), `{"retry": {"maxAttempts": "many"}}`); err != nil {
		t.Fatal(err)
	}
	probe := newRecorder()
	w := startWatch(t, e.st, probe, store.WatchOptions{})
	probe.waitFor(t, "a first sync", func(r *recorder) bool { return len(r.syncs) == 1 })
	cluster, now := w.Status().ClusterID, w.Status().Revision
	w.Close()
	// A cached policy that etcd never held.
	cachedOnly := good
	cachedOnly.Name = "cached-only"

	for _, c := range []struct {
		name    string
		initial store.State
		want    store.RewindReason
	}{
		{"a later revision", store.State{Revision: 10_000, ClusterID: cluster}, store.RewindRevisionWentBack},
		{"another cluster", store.State{Revision: now, ClusterID: cluster + 1}, store.RewindNewCluster},
		{"entries etcd does not hold at its revision", store.State{Revision: now, ClusterID: cluster}, store.RewindHistoryChanged},
		{"the same history", store.State{Revision: now, ClusterID: cluster}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.initial.Policies = map[string]store.PolicyEntry{"dep": good}
			if c.want != "" {
				c.initial.Policies["cached-only"] = cachedOnly
			}
			rec := newRecorder()
			startWatch(t, e.st, rec, store.WatchOptions{Initial: &c.initial})
			rec.waitFor(t, "the first sync", func(r *recorder) bool { return len(r.syncs) == 1 })
			rec.mu.Lock()
			defer rec.mu.Unlock()
			st := rec.lastSync()
			if _, ok := st.Policies["cached-only"]; ok {
				t.Errorf("a cached policy etcd does not hold was delivered")
			}
			_, kept := st.Policies["dep"]
			switch {
			case c.want == "" && (len(rec.rewinds) != 0 || !kept):
				t.Errorf("rewinds %v, dep kept %v: want no rewind and the cached last good dep", rec.rewinds, kept)
			case c.want != "" && (len(rec.rewinds) != 1 || rec.rewinds[0].Reason != c.want || kept):
				t.Errorf("rewinds %v, dep kept %v: want one %s and no cached value", rec.rewinds, kept, c.want)
			case c.want != "" && !slices.Equal(rec.calls, []string{"rewound", "sync"}):
				t.Errorf("calls %v, want the rewind, then the sync", rec.calls)
			}
		})
	}
}
