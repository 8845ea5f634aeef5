package agent

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded/embeddedtest"
)

// A live agent cut off from etcd (etcd itself stays up) keeps enforcing its
// last good state; a policy change and a force-open override made meanwhile,
// then compacted away, reach it once the connection is back: its watch finds
// its revision compacted and lists again. The agent stays ready throughout.
func TestEtcdPartitionOfALiveAgent(t *testing.T) {
	srv := embeddedtest.Start(t)
	cli := embeddedtest.Client(t, srv)
	st, err := store.New(store.Config{Client: cli})
	if err != nil {
		t.Fatal(err)
	}
	px := embeddedtest.NewProxy(t, srv.Endpoints()[0])
	ctx := ctxT(t, 60*time.Second)
	const dep = "inventory"
	if _, err := st.PutPolicy(ctx, dep, []byte(`{"retry":{"maxAttempts":5}}`), admin); err != nil {
		t.Fatal(err)
	}

	// The agent dials etcd itself (its own client settings), through the proxy.
	cfg := testConfig(t, "cut-off")
	cfg.Etcd = []string{px.Endpoint()}
	a := startAgent(t, cfg)
	c := dial(t, a.Agent)
	// registration reports whether etcd answered, and whether it holds the
	// agent's registration.
	registration := func() (answered, present bool) {
		ms, _, err := st.ListMembers(ctx)
		if err != nil {
			return false, false
		}
		for _, m := range ms {
			if m.Node == cfg.Name {
				return true, true
			}
		}
		return true, false
	}
	registered := func() bool {
		_, present := registration()
		return present
	}
	sstest.Eventually(t, 10*time.Second, "the agent synced from etcd, registered and ready", func() bool {
		_, _, _, src := a.policies.counts()
		return src == sourceEtcd && a.eng.Policy(dep).Retry.MaxAttempts == 5 && registered() && a.Ready()
	})
	if d := check(t, c, dep); d.GetVerdict() != fuseboxv1.Verdict_VERDICT_ALLOW {
		t.Fatalf("before the cut: %v, want allow", d)
	}
	_, _, seen, _ := a.policies.counts()

	// From here until the end the agent must never turn unready.
	unready := watchReadiness(t, a.Agent)

	// Cut the agent off. It cannot renew its registration's lease, so once
	// the registration has expired in etcd the agent has been disconnected
	// for at least the lease TTL.
	px.SetCut(true)
	pol, err := st.PutPolicy(ctx, dep, []byte(`{"retry":{"maxAttempts":2}}`), admin)
	if err != nil {
		t.Fatal(err)
	}
	ov, err := st.SetOverride(ctx, dep, store.OverrideSpec{State: sharedstate.ForcedOpen, Reason: "partition drill"}, admin)
	if err != nil {
		t.Fatal(err)
	}
	// Compacting at the override's revision removes the policy change, the
	// first revision the agent's watch needs.
	if pol.ModRevision <= seen || ov.ModRevision <= pol.ModRevision {
		t.Fatalf("revisions: agent at %d, policy %d, override %d: want increasing", seen, pol.ModRevision, ov.ModRevision)
	}
	if _, err := cli.Compact(ctx, ov.ModRevision); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 10*time.Second, "the cut-off agent's registration expires", func() bool {
		answered, present := registration()
		return answered && !present
	})

	// Meanwhile the agent enforces its last good state.
	if got := a.eng.Policy(dep).Retry.MaxAttempts; got != 5 {
		t.Errorf("while cut off: maxAttempts %d, want the last good 5", got)
	}
	if d := check(t, c, dep); d.GetVerdict() != fuseboxv1.Verdict_VERDICT_ALLOW {
		t.Errorf("while cut off: %v, want allow (the override cannot have arrived)", d)
	}
	if _, _, rev, src := a.policies.counts(); rev != seen || src != sourceEtcd {
		t.Errorf("while cut off: policies at revision %d from %s, want %d from etcd", rev, policySourceNames[src], seen)
	}

	// Restore the connection: both changes arrive.
	px.SetCut(false)
	sstest.Eventually(t, 15*time.Second, "the agent applies the policy and the override made while it was cut off", func() bool {
		s := a.eng.Snapshot(dep)
		return s != nil && s.Override == sharedstate.ForcedOpen && a.eng.Policy(dep).Retry.MaxAttempts == 2
	})
	if d := check(t, c, dep); d.GetReason() != fuseboxv1.RejectReason_REJECT_REASON_FORCED_OPEN {
		t.Errorf("after the restore: %v, want a forced-open reject", d)
	}
	if !strings.Contains(a.log.String(), "compacted") {
		t.Errorf("the agent's log does not report the compaction its watch ran into")
	}
	fams := gather(t, a.Agent)
	if v, ok := series(fams, "fusebox_agent_policy_revision", nil); !ok || v < float64(ov.ModRevision) {
		t.Errorf("fusebox_agent_policy_revision = %v (present %v), want ≥ %d", v, ok, ov.ModRevision)
	}
	if v, ok := series(fams, "fusebox_agent_policy_source", map[string]string{"source": "etcd"}); !ok || v != 1 {
		t.Errorf("fusebox_agent_policy_source{source=etcd} = %v (present %v), want 1", v, ok)
	}
	if v, ok := series(fams, "fusebox_agent_ready", nil); !ok || v != 1 {
		t.Errorf("fusebox_agent_ready = %v (present %v), want 1", v, ok)
	}
	sstest.Eventually(t, 15*time.Second, "the agent registers again", registered)
	if n := unready(); n > 0 {
		t.Errorf("the agent was seen unready %d times while cut off or catching up", n)
	}
}

// watchReadiness samples a.Ready until the test ends or the returned
// function is called; that function returns how many samples were unready.
func watchReadiness(t *testing.T, a *Agent) func() int64 {
	t.Helper()
	var misses atomic.Int64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			if !a.Ready() {
				misses.Add(1)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	finish := func() int64 {
		once.Do(func() {
			close(stop)
			<-done
		})
		return misses.Load()
	}
	t.Cleanup(func() { finish() })
	return finish
}

// gather reads the agent's registry by metric name.
func gather(t *testing.T, a *Agent) map[string]*dto.MetricFamily {
	t.Helper()
	list, err := a.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	fams := make(map[string]*dto.MetricFamily, len(list))
	for _, f := range list {
		fams[f.GetName()] = f
	}
	return fams
}
