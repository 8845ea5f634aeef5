package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded/embeddedtest"
)

// fastBackoff keeps retries quick in tests.
func fastBackoff(int) time.Duration { return 20 * time.Millisecond }

func startWatch(t *testing.T, st *store.Store, h store.Handler, opts store.WatchOptions) *store.Watcher {
	t.Helper()
	if opts.Backoff == nil {
		opts.Backoff = fastBackoff
	}
	w := st.Watch(context.Background(), h, opts)
	t.Cleanup(w.Close)
	return w
}

func TestWatchSyncsThenDeliversChanges(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	if _, err := e.st.PutPolicy(ctx, "before", []byte(`{}`), as("alice")); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	w := startWatch(t, e.st, rec, store.WatchOptions{})
	rec.waitFor(t, "first sync", func(r *recorder) bool { return len(r.syncs) == 1 })
	if st := rec.lastSync(); len(st.Policies) != 1 || st.Policies["before"].Name != "before" {
		t.Fatalf("first sync = %+v", st)
	}

	put, err := e.st.PutPolicy(ctx, "dep", []byte(`{"retry": {"maxAttempts": 5}}`), as("alice"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.SetOverride(ctx, "dep", store.OverrideSpec{State: sharedstate.ForcedOpen}, as("alice")); err != nil {
		t.Fatal(err)
	}
	if err := e.st.ClearOverride(ctx, "dep", as("alice")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.DeletePolicy(ctx, "before", as("alice")); err != nil {
		t.Fatal(err)
	}
	// Members and audit entries are not policies or overrides: not delivered.
	reg, err := e.st.Register(ctx, store.Member{Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()

	rec.waitFor(t, "four events", func(r *recorder) bool { return len(r.events) >= 4 })
	rec.mu.Lock()
	defer rec.mu.Unlock()
	want := []store.EventKind{store.PolicyPut, store.OverridePut, store.OverrideDeleted, store.PolicyDeleted}
	for i, k := range want {
		if rec.events[i].Kind != k {
			t.Fatalf("event %d = %v, want %v (all: %+v)", i, rec.events[i].Kind, k, rec.events)
		}
	}
	if ev := rec.events[0]; ev.Name != "dep" || ev.Revision != put.ModRevision || !strings.Contains(string(ev.Policy.Value), `"maxAttempts":5`) {
		t.Fatalf("policy event = %+v", ev)
	}
	if len(rec.syncs) != 1 || len(rec.invalid) != 0 {
		t.Fatalf("syncs %d, invalid %v: want 1 and none", len(rec.syncs), rec.invalid)
	}
	if w.Err() != nil {
		t.Fatalf("Err() = %v while running", w.Err())
	}
}

func TestWatchReportsAndSkipsInvalidValues(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	good, err := e.st.PutPolicy(ctx, "dep", []byte(`{"retry": {"maxAttempts": 5}}`), as("alice"))
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	startWatch(t, e.st, rec, store.WatchOptions{})
	rec.waitFor(t, "first sync", func(r *recorder) bool { return len(r.syncs) == 1 })

	// Someone bypasses the store and writes garbage.
	if _, err := e.cli.Put(ctx, e.st.PolicyKey("dep"), `{"retry": {"maxAttempts": "many"}}`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cli.Put(ctx, e.st.OverrideKey("dep"), `{"state": "ajar"}`); err != nil {
		t.Fatal(err)
	}
	// Then a valid change, which must still arrive.
	if _, err := e.st.PutPolicy(ctx, "other", []byte(`{}`), as("alice")); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, "two invalid values and the valid change", func(r *recorder) bool {
		return len(r.invalid) == 2 && r.hasEvent(store.PolicyPut, "other")
	})
	rec.mu.Lock()
	if rec.invalid[0].Key != e.st.PolicyKey("dep") || rec.invalid[1].Key != e.st.OverrideKey("dep") {
		t.Fatalf("invalid reports = %v, want the policy key then the override key", rec.invalid)
	}
	if rec.hasEvent(store.PolicyPut, "dep") || rec.hasEvent(store.OverridePut, "dep") {
		t.Fatalf("an invalid value was delivered as an event: %+v", rec.events)
	}
	rec.mu.Unlock()

	// A new watcher, seeded with the last good state (as an agent's disk
	// cache would be), keeps the good policy where etcd holds garbage.
	seed := store.State{Policies: map[string]store.PolicyEntry{"dep": good}}
	rec2 := newRecorder()
	startWatch(t, e.st, rec2, store.WatchOptions{Initial: &seed})
	rec2.waitFor(t, "sync of the seeded watcher", func(r *recorder) bool { return len(r.syncs) == 1 })
	rec2.mu.Lock()
	defer rec2.mu.Unlock()
	st := rec2.lastSync()
	if got := st.Policies["dep"]; got.ModRevision != good.ModRevision {
		t.Fatalf("seeded sync has dep = %+v, want the last good value", got)
	}
	if _, ok := st.Policies["other"]; !ok || len(rec2.invalid) != 2 {
		t.Fatalf("seeded sync = %+v, invalid %v", st, rec2.invalid)
	}
	if p, err := st.Effective("dep"); err != nil || p.Retry.MaxAttempts != 5 {
		t.Fatalf("effective policy = %+v, %v", p, err)
	}
}

func TestWatchRelistsAfterCompaction(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	if _, err := e.st.PutPolicy(ctx, "gone-later", []byte(`{}`), as("alice")); err != nil {
		t.Fatal(err)
	}

	// The watcher lists, then is slow in its first Sync. Meanwhile the
	// state changes and etcd compacts past the listed revision, so the
	// watch it starts next finds its revision compacted.
	entered, proceed := make(chan struct{}), make(chan struct{})
	rec := newRecorder()
	rec.syncHook = func(n int) {
		if n == 0 {
			close(entered)
			<-proceed
		}
	}
	startWatch(t, e.st, rec, store.WatchOptions{})
	// The watcher has listed (at a revision) and is inside Sync.
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the watcher never called Sync")
	}

	if _, err := e.st.DeletePolicy(ctx, "gone-later", as("alice")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.PutPolicy(ctx, "new", []byte(`{}`), as("alice")); err != nil {
		t.Fatal(err)
	}
	ov, err := e.st.SetOverride(ctx, "new", store.OverrideSpec{State: sharedstate.ForcedClosed}, as("alice"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.cli.Compact(ctx, ov.ModRevision); err != nil {
		t.Fatal(err)
	}
	close(proceed)

	rec.waitFor(t, "a second sync", func(r *recorder) bool { return len(r.syncs) >= 2 })
	rec.mu.Lock()
	defer rec.mu.Unlock()
	st := rec.lastSync()
	if _, ok := st.Policies["gone-later"]; ok {
		t.Fatalf("state after re-list still has a deleted policy: %+v", st)
	}
	if _, ok := st.Policies["new"]; !ok || st.Overrides["new"].State != sharedstate.ForcedClosed || st.Revision < ov.ModRevision {
		t.Fatalf("state after re-list = %+v, want policy and override of new at ≥ %d", st, ov.ModRevision)
	}
	compacted := false
	for _, err := range rec.errs {
		compacted = compacted || errors.Is(err, rpctypes.ErrCompacted)
	}
	if !compacted {
		t.Fatalf("errors %v: want one reporting the compaction", rec.errs)
	}
}

func TestWatchCatchesUpAfterDisconnectAndCompaction(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	p := embeddedtest.NewProxy(t, e.srv.Endpoints()[0])
	st, err := store.New(store.Config{Client: clientVia(t, e.srv, p)})
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	startWatch(t, st, rec, store.WatchOptions{})
	rec.waitFor(t, "first sync", func(r *recorder) bool { return len(r.syncs) == 1 })

	// Disconnect the watcher; change the state and compact it away.
	p.SetCut(true)
	if _, err := e.st.PutPolicy(ctx, "while-away", []byte(`{}`), as("alice")); err != nil {
		t.Fatal(err)
	}
	ov, err := e.st.SetOverride(ctx, "while-away", store.OverrideSpec{State: sharedstate.ForcedOpen}, as("alice"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.cli.Compact(ctx, ov.ModRevision); err != nil {
		t.Fatal(err)
	}
	p.SetCut(false)

	rec.waitFor(t, "a re-list with the changes made while away", func(r *recorder) bool {
		if len(r.syncs) < 2 {
			return false
		}
		st := r.lastSync()
		_, ok := st.Policies["while-away"]
		return ok && st.Overrides["while-away"].State == sharedstate.ForcedOpen
	})
}

func TestWatchSurvivesEtcdStopAndRestart(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	p := embeddedtest.NewProxy(t, e.srv.Endpoints()[0])
	viaProxy, err := store.New(store.Config{Client: clientVia(t, e.srv, p)})
	if err != nil {
		t.Fatal(err)
	}
	// One watcher whose connection stays cut until after a change was made
	// (so the change can only reach it through its reconnect), and one
	// connected straight to etcd, which sees etcd go down and come back.
	cut, direct := newRecorder(), newRecorder()
	wCut := startWatch(t, viaProxy, cut, store.WatchOptions{})
	wDirect := startWatch(t, e.st, direct, store.WatchOptions{})
	cut.waitFor(t, "first sync", func(r *recorder) bool { return len(r.syncs) == 1 })
	direct.waitFor(t, "first sync", func(r *recorder) bool { return len(r.syncs) == 1 })

	p.SetCut(true)
	e.srv.Stop()
	if err := e.srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.PutPolicy(ctx, "after-restart", []byte(`{"retry": {"maxAttempts": 7}}`), as("alice")); err != nil {
		t.Fatalf("put after restart: %v", err)
	}
	p.SetCut(false)

	sawChange := func(r *recorder) bool {
		if r.hasEvent(store.PolicyPut, "after-restart") {
			return true
		}
		if len(r.syncs) > 1 { // a re-list is fine too, if it carries the change
			_, ok := r.lastSync().Policies["after-restart"]
			return ok
		}
		return false
	}
	cut.waitFor(t, "the change made while disconnected", sawChange)
	direct.waitFor(t, "the change made after the restart", sawChange)
	for _, w := range []*store.Watcher{wCut, wDirect} {
		if w.Err() != nil {
			t.Fatalf("Err() = %v while running", w.Err())
		}
	}

	// And the watches go on as usual.
	if _, err := e.st.SetOverride(ctx, "after-restart", store.OverrideSpec{State: sharedstate.ForcedOpen}, as("alice")); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*recorder{cut, direct} {
		r.waitFor(t, "an override event after the restart", func(r *recorder) bool {
			return r.hasEvent(store.OverridePut, "after-restart")
		})
	}
	// A restart on the same data, and a reconnection, are no rewind: each
	// watcher checked etcd's history when its connection came back, and
	// found it its own.
	for n, r := range []*recorder{cut, direct} {
		r.mu.Lock()
		if len(r.rewinds) != 0 {
			t.Errorf("watcher %d reported rewinds %v for a restart on the same data", n, r.rewinds)
		}
		r.mu.Unlock()
	}
}

func TestWatcherCloseAndContext(t *testing.T) {
	e := newEnv(t)
	rec := newRecorder()
	w := e.st.Watch(context.Background(), rec, store.WatchOptions{Backoff: fastBackoff})
	rec.waitFor(t, "first sync", func(r *recorder) bool { return len(r.syncs) == 1 })
	w.Close()
	w.Close()
	waitDone(t, "the watcher to end after Close", w.Done())
	if !errors.Is(w.Err(), store.ErrClosed) {
		t.Fatalf("Err() after Close = %v, want ErrClosed", w.Err())
	}

	ctx, cancel := context.WithCancel(context.Background())
	w2 := e.st.Watch(ctx, newRecorder(), store.WatchOptions{})
	cancel()
	waitDone(t, "the watcher to end when its context is cancelled", w2.Done())
	if !errors.Is(w2.Err(), context.Canceled) {
		t.Fatalf("Err() after cancel = %v, want context.Canceled", w2.Err())
	}
	w2.Close()

	// A watcher started while etcd is down keeps retrying and can be closed.
	e.srv.Stop()
	rec3 := newRecorder()
	w3 := e.st.Watch(context.Background(), rec3, store.WatchOptions{Backoff: fastBackoff, ListTimeout: 100 * time.Millisecond})
	rec3.waitFor(t, "a reported list failure", func(r *recorder) bool { return len(r.errs) >= 2 })
	w3.Close()
	if !errors.Is(w3.Err(), store.ErrClosed) {
		t.Fatalf("Err() = %v, want ErrClosed", w3.Err())
	}
}

// TestDefaultBackoff checks DefaultBackoff's range for each retry: at least
// 1ns, at most 100ms × 2^(attempt-1) capped at 10s.
func TestDefaultBackoff(t *testing.T) {
	for _, tc := range []struct {
		attempt int
		ceiling time.Duration
	}{
		{1, 100 * time.Millisecond}, {2, 200 * time.Millisecond}, {7, 6400 * time.Millisecond},
		{8, 10 * time.Second}, {1000, 10 * time.Second},
	} {
		var longest time.Duration
		for range 200 {
			d := store.DefaultBackoff(tc.attempt)
			if d < 1 || d > tc.ceiling {
				t.Fatalf("DefaultBackoff(%d) = %v, want in [1ns, %v]", tc.attempt, d, tc.ceiling)
			}
			longest = max(longest, d)
		}
		if longest < tc.ceiling/2 { // P = 2^-200 for a full jitter
			t.Errorf("DefaultBackoff(%d): 200 waits all below %v: not full jitter up to %v", tc.attempt, tc.ceiling/2, tc.ceiling)
		}
	}
}
