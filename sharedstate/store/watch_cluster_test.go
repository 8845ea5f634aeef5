package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate/store"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded/embeddedtest"
)

// TestWatchMissesNothingWhenTheLeaderDies: three watchers, each with its
// own client of all three members of an etcd cluster, follow a writer that
// writes one new policy after another while the leader is killed. Writes
// succeed again once the others elect a leader, and every watcher delivers
// every successful write exactly once, in revision order: a watch that
// died with the leader, or resumed past a revision, fails the test.
func TestWatchMissesNothingWhenTheLeaderDies(t *testing.T) {
	cl := embeddedtest.StartCluster(t, 3)
	leader := cl.WaitLeader(t, 10*time.Second)
	all := cl.EndpointsFirst(leader)
	writer, err := store.New(store.Config{Client: cl.Client(t), RequestTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var recs []*recorder
	for n := range 3 {
		// Watchers 0 and 1 open their watch on the leader (a client of it
		// alone, given all endpoints once the watch runs), so that the
		// leader's death breaks their streams; watcher 2's client has
		// every endpoint from the start.
		eps := all
		if n < 2 {
			eps = all[:1]
		}
		cli, err := store.Dial(context.Background(), store.ClientOptions{Endpoints: eps})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cli.Close() })
		st, err := store.New(store.Config{Client: cli})
		if err != nil {
			t.Fatal(err)
		}
		r := newRecorder()
		// The production backoff, as the agent and the coordinator use it.
		startWatch(t, st, r, store.WatchOptions{Backoff: store.DefaultBackoff})
		r.waitFor(t, "first sync", func(r *recorder) bool { return len(r.syncs) == 1 })
		cli.SetEndpoints(all...)
		recs = append(recs, r)
	}

	written := map[string]int64{} // name → revision of each successful write
	var order []string
	ctx := testCtx(t)
	write := func(i int) bool {
		name := fmt.Sprintf("p-%03d", i)
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		e, err := writer.PutPolicy(wctx, name, []byte(`{"retry": {"maxAttempts": 4}}`), as("alice"))
		if err != nil {
			return false // its outcome is unknown: checked against etcd below
		}
		written[name] = e.ModRevision
		order = append(order, name)
		return true
	}
	i := 0
	for ; len(written) < 10; i++ {
		if !write(i) && i > 100 {
			t.Fatalf("writes fail before the leader is killed")
		}
	}
	if now := cl.WaitLeader(t, 10*time.Second); now != leader {
		t.Logf("leadership moved from member %d to %d before the kill", leader, now)
		leader = now
	}
	cl.Kill(leader)
	killed := time.Now()
	before := len(written)
	deadline := killed.Add(20 * time.Second) // generous: an election takes ~100 ms here
	for len(written) < before+10 {
		write(i)
		i++
		if len(written) == before && time.Now().After(deadline) {
			t.Fatalf("no write succeeded within %v of killing the leader (member %d)", time.Since(killed), leader)
		}
	}
	t.Logf("killed member %d; writes went on, %d attempts in all for %d successes", leader, i, len(written))

	// Every successful write is in etcd, and the ones whose outcome was
	// unknown are accounted for: the watchers must match etcd exactly.
	inEtcd, _, err := writer.ListPolicies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{}
	for _, e := range inEtcd {
		want[e.Name] = e.ModRevision
	}
	for name, rev := range written {
		if want[name] != rev {
			t.Errorf("%s written at revision %d, etcd has revision %d", name, rev, want[name])
		}
	}
	last := written[order[len(order)-1]]
	for n, r := range recs {
		r.waitFor(t, fmt.Sprintf("watcher %d to reach revision %d", n, last), func(r *recorder) bool {
			for _, e := range r.events {
				if e.Revision >= last {
					return true
				}
			}
			return false
		})
		r.mu.Lock()
		seen := map[string]int64{}
		if len(r.syncs) > 1 { // a re-list replaces what came before it
			for name, e := range r.lastSync().Policies {
				seen[name] = e.ModRevision
			}
		}
		prev := int64(0)
		for _, e := range r.events {
			if e.Kind != store.PolicyPut {
				t.Errorf("watcher %d: unexpected event %v %s", n, e.Kind, e.Name)
			}
			if e.Revision <= prev {
				t.Errorf("watcher %d: %s at revision %d delivered after revision %d", n, e.Name, e.Revision, prev)
			}
			prev = e.Revision
			if len(r.syncs) == 1 || e.Revision > r.lastSync().Revision {
				if _, dup := seen[e.Name]; dup && len(r.syncs) == 1 {
					t.Errorf("watcher %d: %s delivered twice", n, e.Name)
				}
				seen[e.Name] = e.Revision
			}
		}
		for name, rev := range want {
			if seen[name] != rev {
				t.Errorf("watcher %d missed %s at revision %d (has revision %d)", n, name, rev, seen[name])
			}
		}
		if len(seen) != len(want) {
			t.Errorf("watcher %d has %d policies, etcd %d", n, len(seen), len(want))
		}
		t.Logf("watcher %d: %d syncs, %d events, %d errors (%v)", n, len(r.syncs), len(r.events), len(r.errs), r.errs)
		r.mu.Unlock()
	}
}
