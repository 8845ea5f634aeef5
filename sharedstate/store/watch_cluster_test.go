package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate/store"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded/embeddedtest"
)

// history is a Handler that records Syncs and Applies in the order they
// came, so that a test can replay them.
type history struct {
	mu       sync.Mutex
	calls    []historyCall
	errs     int
	watching []int64 // the revisions of the Watching calls
	rewinds  []store.Rewind
	changed  chan struct{}
}

var (
	_ store.WatchingHandler = (*history)(nil)
	_ store.RewindHandler   = (*history)(nil)
)

type historyCall struct {
	sync   *store.State // a Sync, or
	events []store.Event
}

func newHistory() *history { return &history{changed: make(chan struct{}, 1)} }

func (h *history) record(f func()) {
	h.mu.Lock()
	f()
	h.mu.Unlock()
	select {
	case h.changed <- struct{}{}:
	default:
	}
}

func (h *history) Sync(st store.State) {
	h.record(func() { h.calls = append(h.calls, historyCall{sync: &st}) })
}

func (h *history) Apply(_ int64, events []store.Event) {
	h.record(func() { h.calls = append(h.calls, historyCall{events: events}) })
}

func (h *history) Invalid(*store.InvalidValueError) {}

func (h *history) Error(error) { h.record(func() { h.errs++ }) }

func (h *history) Watching(rev int64) { h.record(func() { h.watching = append(h.watching, rev) }) }

func (h *history) Rewound(r store.Rewind) { h.record(func() { h.rewinds = append(h.rewinds, r) }) }

// replay returns what the handler was told, name → mod revision, and the
// revision it reached; it reports a change delivered twice or out of order.
func (h *history) replay(t *testing.T, who string) (map[string]int64, int64) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	state, rev := map[string]int64{}, int64(0)
	for _, c := range h.calls {
		if c.sync != nil { // a (re)list replaces everything before it
			state, rev = map[string]int64{}, c.sync.Revision
			for name, e := range c.sync.Policies {
				state[name] = e.ModRevision
			}
			continue
		}
		for _, e := range c.events {
			if e.Revision <= rev {
				t.Errorf("%s: %v %s at revision %d delivered after revision %d", who, e.Kind, e.Name, e.Revision, rev)
			}
			if e.Kind != store.PolicyPut {
				t.Errorf("%s: unexpected event %v %s", who, e.Kind, e.Name)
			}
			rev = max(rev, e.Revision)
			state[e.Name] = e.Revision
		}
	}
	return state, rev
}

// waitRevision waits until the handler reached rev, failing after
// 2×waitTimeout (a watch may wait out its backoff, up to 10 s, first).
func (h *history) waitRevision(t *testing.T, who string, rev int64) {
	t.Helper()
	deadline := time.NewTimer(2 * waitTimeout)
	defer deadline.Stop()
	for {
		h.mu.Lock()
		reached := int64(0)
		for _, c := range h.calls {
			if c.sync != nil {
				reached = max(reached, c.sync.Revision)
			}
			for _, e := range c.events {
				reached = max(reached, e.Revision)
			}
		}
		errs := h.errs
		h.mu.Unlock()
		if reached >= rev {
			return
		}
		select {
		case <-h.changed:
		case <-deadline.C:
			t.Fatalf("%s still at revision %d after %v, want %d (%d watch errors)", who, reached, 2*waitTimeout, rev, errs)
		}
	}
}

// waitErrors waits until the handler was told of a watch error, failing
// after waitTimeout.
func (h *history) waitErrors(t *testing.T, what string) {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		h.mu.Lock()
		errs := h.errs
		h.mu.Unlock()
		if errs > 0 {
			return
		}
		select {
		case <-h.changed:
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for %s", waitTimeout, what)
		}
	}
}

// clusterWatchers starts n watchers, each with a client of its own. Each
// client first knows only first (so that the watch opens on that member),
// then, once the watch delivered its first Sync, every endpoint in all.
func clusterWatchers(t *testing.T, n int, first string, all []string) []*history {
	t.Helper()
	var out []*history
	for range n {
		cli, err := store.Dial(context.Background(), store.ClientOptions{Endpoints: []string{first}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cli.Close() })
		st, err := store.New(store.Config{Client: cli})
		if err != nil {
			t.Fatal(err)
		}
		h := newHistory()
		// The production backoff, as the agent and the coordinator use it.
		startWatch(t, st, h, store.WatchOptions{Backoff: store.DefaultBackoff})
		h.waitRevision(t, "a watcher's first sync", 1)
		cli.SetEndpoints(all...)
		out = append(out, h)
	}
	return out
}

// policyWriter writes a new policy p-NNN per call and remembers the
// revision of each that succeeded.
type policyWriter struct {
	st      *store.Store
	n       int
	written map[string]int64
	last    int64
}

func (w *policyWriter) write(ctx context.Context) bool {
	name := fmt.Sprintf("p-%03d", w.n)
	w.n++
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	e, err := w.st.PutPolicy(wctx, name, []byte(`{"retry": {"maxAttempts": 4}}`), as("alice"))
	if err != nil {
		return false // its outcome is unknown: checked against etcd
	}
	w.written[name] = e.ModRevision
	w.last = max(w.last, e.ModRevision)
	return true
}

// writeUntil writes until n more writes succeeded, failing the test when
// none succeeded within d, or not all of them within 3×d.
func (w *policyWriter) writeUntil(t *testing.T, ctx context.Context, n int, d time.Duration, what string) {
	t.Helper()
	start, before := time.Now(), len(w.written)
	for len(w.written) < before+n {
		w.write(ctx)
		switch {
		case len(w.written) == before && time.Since(start) > d:
			t.Fatalf("no write succeeded within %v %s", d, what)
		case time.Since(start) > 3*d || ctx.Err() != nil:
			t.Fatalf("%d of %d writes succeeded within %v %s (%v)", len(w.written)-before, n, time.Since(start), what, ctx.Err())
		}
	}
}

// clusterCtx bounds a cluster test: longer than testCtx, since it starts
// and stops etcd members and waits out elections on a loaded machine.
func clusterCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// checkFollowed checks that every watcher reached the writer's last
// revision and holds exactly what etcd holds: every successful write, and
// each write of unknown outcome as etcd has it.
func checkFollowed(t *testing.T, ctx context.Context, w *policyWriter, watchers []*history) {
	t.Helper()
	inEtcd, _, err := w.st.ListPolicies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{}
	for _, e := range inEtcd {
		want[e.Name] = e.ModRevision
	}
	for name, rev := range w.written {
		if want[name] != rev {
			t.Errorf("%s written at revision %d, etcd has revision %d", name, rev, want[name])
		}
	}
	for n, h := range watchers {
		who := fmt.Sprintf("watcher %d", n)
		h.waitRevision(t, who, w.last)
		got, _ := h.replay(t, who)
		for name, rev := range want {
			if got[name] != rev {
				t.Errorf("%s missed %s at revision %d (has revision %d)", who, name, rev, got[name])
			}
		}
		if len(got) != len(want) {
			t.Errorf("%s has %d policies, etcd %d", who, len(got), len(want))
		}
		h.mu.Lock()
		t.Logf("%s: %d deliveries, %d watch errors", who, len(h.calls), h.errs)
		// A leader change, a member lost, a reconnection to another
		// member: none is a rewind.
		if len(h.rewinds) > 0 {
			t.Errorf("%s reported rewinds %v in a cluster that kept its history", who, h.rewinds)
		}
		h.mu.Unlock()
	}
}

// TestWatchMissesNothingWhenTheLeaderDies: three watchers with their
// watch open on the leader of a 3-member etcd cluster (clients of every
// member) follow a writer that writes one new policy after another while
// the leader is killed. Writes succeed again once the others elect a
// leader, and every watcher delivers every write exactly once, in
// revision order: a watch that died with the leader, or resumed past a
// revision, fails the test.
func TestWatchMissesNothingWhenTheLeaderDies(t *testing.T) {
	cl := embeddedtest.StartCluster(t, 3)
	leader := cl.WaitLeader(t, 10*time.Second)
	watchers := clusterWatchers(t, 3, cl.Endpoint(leader), cl.EndpointsFirst(leader))
	st, err := store.New(store.Config{Client: cl.Client(t), RequestTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w := &policyWriter{st: st, written: map[string]int64{}}
	ctx := clusterCtx(t)
	w.writeUntil(t, ctx, 10, 20*time.Second, "before the kill")
	if now := cl.WaitLeader(t, 10*time.Second); now != leader {
		// A loaded machine can delay heartbeats past the 100 ms election
		// timeout: the watches are then on a follower, which the kill
		// leaves alone; the test still holds, if less demanding.
		t.Logf("leadership moved from member %d to %d before the kill", leader, now)
		leader = now
	}
	cl.Kill(leader)
	// Generous: an election takes ~100 ms here.
	w.writeUntil(t, ctx, 10, 20*time.Second, "after the leader was killed")
	t.Logf("killed member %d; %d writes attempted, %d succeeded", leader, w.n, len(w.written))
	checkFollowed(t, ctx, w, watchers)
}

// TestWatchResumesAfterQuorumLoss: the leader and a follower of a
// 3-member cluster die, so the last member has no leader. Watchers on it
// (etcd's WithRequireLeader) are told so within a few election timeouts —
// rather than waiting forever on a member that will not see another write
// — and retry; once a member comes back and a leader is elected, they
// resume where they stopped (WatchingHandler.Watching says so) and deliver
// every write, once and in order.
func TestWatchResumesAfterQuorumLoss(t *testing.T) {
	cl := embeddedtest.StartCluster(t, 3)
	leader := cl.WaitLeader(t, 10*time.Second)
	survivor, other := (leader+1)%3, (leader+2)%3
	watchers := clusterWatchers(t, 2, cl.Endpoint(survivor), cl.EndpointsFirst(survivor))
	st, err := store.New(store.Config{Client: cl.Client(t), RequestTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w := &policyWriter{st: st, written: map[string]int64{}}
	ctx := clusterCtx(t)
	w.writeUntil(t, ctx, 5, 20*time.Second, "before the kill")
	before := w.last
	for n, h := range watchers {
		h.waitRevision(t, fmt.Sprintf("watcher %d", n), before)
	}
	cl.Kill(leader)
	cl.Kill(other)
	for n, h := range watchers {
		h.waitErrors(t, fmt.Sprintf("watcher %d to be told that its member has no leader", n))
	}
	if w.write(ctx) {
		t.Fatal("a write succeeded on one member of three")
	}
	if err := cl.Restart(other); err != nil {
		t.Fatal(err)
	}
	w.writeUntil(t, ctx, 5, 20*time.Second, "after a quorum came back")
	t.Logf("lost members %d and %d, brought %d back; %d writes attempted, %d succeeded", leader, other, other, w.n, len(w.written))
	checkFollowed(t, ctx, w, watchers)
	// Each watcher said its watch ran after its first Sync and again after
	// the errors, from where it had stopped, without a re-list.
	for n, h := range watchers {
		h.mu.Lock()
		syncs := 0
		for _, c := range h.calls {
			if c.sync != nil {
				syncs++
			}
		}
		if syncs != 1 || len(h.watching) < 2 || h.watching[0] != h.calls[0].sync.Revision || h.watching[len(h.watching)-1] < before {
			t.Errorf("watcher %d: %d syncs (at revision %d), Watching at revisions %v; want 1 sync, Watching at its revision, then again at %d or later",
				n, syncs, h.calls[0].sync.Revision, h.watching, before)
		}
		h.mu.Unlock()
	}
}
