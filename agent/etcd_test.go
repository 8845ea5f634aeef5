package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

var admin = store.WriteOptions{Actor: "test"}

func (f *fleet) waitSynced() {
	f.t.Helper()
	sstest.Eventually(f.t, 10*time.Second, "every agent synced policies from etcd", func() bool {
		for _, a := range f.agents {
			if _, _, _, src := a.policies.counts(); src != sourceEtcd {
				return false
			}
		}
		return true
	})
}

// A policy written to etcd is applied by all agents within 1 s; a
// force-open override reaches all within 1 s; an override with a TTL
// expires by itself and the breaker follows; an invalid value is ignored
// with the last good one kept, logged with its key and counted.
func TestPoliciesAndOverridesFromEtcd(t *testing.T) {
	f := newFleet(t, 5, true)
	f.waitSynced()
	ctx := ctxT(t, 30*time.Second)
	const dep = "billing-api"

	if _, err := f.store.PutPolicy(ctx, dep, []byte(`{"breaker":{"minimumRequests":77}}`), admin); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 10*time.Second, "every agent applies the policy", func() bool {
		for _, a := range f.agents {
			if a.eng.Policy(dep).Breaker.MinimumRequests != 77 {
				return false
			}
		}
		return true
	})

	// An invalid value written behind the store's back is ignored.
	if _, err := f.cli.Put(ctx, f.store.PolicyKey(dep), `{"breaker":{"minimumRequests":"many"}}`); err != nil {
		t.Fatal(err)
	}
	// (The agent counts before it logs: wait for both.)
	sstest.Eventually(t, 10*time.Second, "every agent counts and logs the invalid value", func() bool {
		for _, a := range f.agents {
			if value(t, a.m.etcdInvalid) < 1 || !strings.Contains(a.log.String(), f.store.PolicyKey(dep)) {
				return false
			}
		}
		return true
	})
	for _, a := range f.agents {
		if got := a.eng.Policy(dep).Breaker.MinimumRequests; got != 77 {
			t.Errorf("%s: minimumRequests %d after an invalid value, want the last good 77", a.Name(), got)
		}
		if !strings.Contains(a.log.String(), f.store.PolicyKey(dep)) {
			t.Errorf("%s: log does not name the invalid key %s", a.Name(), f.store.PolicyKey(dep))
		}
	}

	clients := make([]fuseboxv1.AgentClient, len(f.agents))
	for i, a := range f.agents {
		clients[i] = dial(t, a.Agent)
	}
	allReject := func(reason fuseboxv1.RejectReason) func() bool {
		return func() bool {
			for _, c := range clients {
				if d := check(t, c, dep); d.GetVerdict() != fuseboxv1.Verdict_VERDICT_REJECT || d.GetReason() != reason {
					return false
				}
			}
			return true
		}
	}
	allAllow := func() bool {
		for _, c := range clients {
			if d := check(t, c, dep); d.GetVerdict() != fuseboxv1.Verdict_VERDICT_ALLOW {
				return false
			}
		}
		return true
	}

	if _, err := f.store.SetOverride(ctx, dep, store.OverrideSpec{State: sharedstate.ForcedOpen, Reason: "maintenance"}, admin); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 10*time.Second, "every agent rejects forced-open", allReject(fuseboxv1.RejectReason_REJECT_REASON_FORCED_OPEN))
	if err := f.store.ClearOverride(ctx, dep, admin); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 10*time.Second, "every agent allows after the override is cleared", allAllow)

	// With a TTL the override expires by itself. Each agent counts once it
	// was seen rejecting: on a loaded machine the override can
	// end before one round of Checks saw every agent reject at once.
	e, err := f.store.SetOverride(ctx, dep, store.OverrideSpec{State: sharedstate.ForcedOpen, Reason: "short", TTL: 10 * time.Second}, admin)
	if err != nil {
		t.Fatal(err)
	}
	seen := make([]bool, len(clients))
	sstest.Eventually(t, 10*time.Second, "every agent rejects the TTL override", func() bool {
		all := true
		for i, c := range clients {
			if d := check(t, c, dep); d.GetVerdict() == fuseboxv1.Verdict_VERDICT_REJECT && d.GetReason() == fuseboxv1.RejectReason_REJECT_REASON_FORCED_OPEN {
				seen[i] = true
			}
			all = all && seen[i]
		}
		return all
	})
	sstest.Eventually(t, time.Until(e.Expires)+10*time.Second, "the TTL override expires everywhere", allAllow)
}

// etcd stopped: agents keep enforcing; an agent restarted while etcd is
// down starts from its disk cache; etcd back: the watch resumes, and a
// change made while an agent was disconnected arrives, also after a
// compaction.
func TestEtcdOutageAndCache(t *testing.T) {
	f := newFleet(t, 3, true)
	f.waitSynced()
	ctx := ctxT(t, 60*time.Second)
	const dep = "ledger"
	if _, err := f.store.SetOverride(ctx, dep, store.OverrideSpec{State: sharedstate.ForcedOpen, Reason: "drill"}, admin); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.PutPolicy(ctx, dep, []byte(`{"retry":{"maxAttempts":5}}`), admin); err != nil {
		t.Fatal(err)
	}
	forcedOpen := func(a *testAgent) bool {
		s := a.eng.Snapshot(dep)
		return s != nil && s.Override == sharedstate.ForcedOpen
	}
	sstest.Eventually(t, 10*time.Second, "override everywhere", func() bool {
		for _, a := range f.agents {
			if !forcedOpen(a) || a.eng.Policy(dep).Retry.MaxAttempts != 5 {
				return false
			}
		}
		return true
	})

	// Agent 2 goes away; a change is made and etcd compacted meanwhile.
	cfg2 := f.agents[2].Config()
	f.agents[2].Close()
	f.agents = f.agents[:2]
	resp, err := f.store.PutPolicy(ctx, dep, []byte(`{"retry":{"maxAttempts":4}}`), admin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.cli.Compact(ctx, resp.ModRevision); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 10*time.Second, "running agents see maxAttempts 4", func() bool {
		for _, a := range f.agents {
			if a.eng.Policy(dep).Retry.MaxAttempts != 4 {
				return false
			}
		}
		return true
	})

	extra := startAgent(t, f.config("closes-with-etcd-down"))
	sstest.Eventually(t, 10*time.Second, "the extra agent is registered", func() bool {
		ms, _, err := f.store.ListMembers(ctx)
		for _, m := range ms {
			if m.Node == "closes-with-etcd-down" {
				return err == nil
			}
		}
		return false
	})
	f.etcd.Stop()
	// Running agents keep enforcing.
	c0 := dial(t, f.agents[0].Agent)
	if d := check(t, c0, dep); d.GetReason() != fuseboxv1.RejectReason_REJECT_REASON_FORCED_OPEN {
		t.Fatalf("with etcd down: %v", d)
	}

	// An agent registered before etcd went down closes promptly (its
	// registration cannot be revoked; it expires with its lease).
	start := time.Now()
	extra.Close()
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close with etcd down took %v", d)
	}
	t.Logf("Close with etcd down took %v; revoke timed out: %v", time.Since(start),
		strings.Contains(extra.log.String(), "not revoked in time"))

	// Agent 2 restarts while etcd is down: its cache (from before the
	// change) is in force and it is ready.
	a2 := startAgent(t, cfg2)
	f.agents = append(f.agents, a2)
	if !forcedOpen(a2) || a2.eng.Policy(dep).Retry.MaxAttempts != 5 {
		t.Fatalf("restarted agent: override %v maxAttempts %d, want the cached forced-open and 5",
			a2.eng.Snapshot(dep), a2.eng.Policy(dep).Retry.MaxAttempts)
	}
	if _, _, _, src := a2.policies.counts(); src != sourceCache {
		t.Fatalf("restarted agent's policies come from %v, want the cache", policySourceNames[src])
	}
	sstest.Eventually(t, 10*time.Second, "restarted agent ready from its cache", a2.Ready)
	if d := check(t, dial(t, a2.Agent), dep); d.GetReason() != fuseboxv1.RejectReason_REJECT_REASON_FORCED_OPEN {
		t.Fatalf("restarted agent with etcd down: %v", d)
	}

	// etcd back: the change made while agent 2 was away arrives, and a
	// change made now reaches everyone.
	rctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := f.etcd.Restart(rctx); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 15*time.Second, "restarted agent learns the change made while it was away", func() bool {
		return a2.eng.Policy(dep).Retry.MaxAttempts == 4
	})
	if err := f.store.ClearOverride(ctx, dep, admin); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 15*time.Second, "every agent follows a change made after etcd came back", func() bool {
		for _, a := range f.agents {
			if forcedOpen(a) {
				return false
			}
		}
		return true
	})
}
