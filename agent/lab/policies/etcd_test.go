package policies

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/lab/fleet"
	"github.com/fusebox-dev/fusebox/agent/lab/fleet/fleettest"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

// A policy written to etcd is applied by all agents within 1 s; a
// force-open override reaches all within 1 s; an override with a TTL
// expires by itself and the breaker follows; an invalid value is ignored
// with the last good one kept, logged with its key and counted.
func TestPoliciesAndOverridesFromEtcd(t *testing.T) {
	w := start(t, 5)
	ctx := fleettest.Ctx(t, 30*time.Second)
	const dep = "billing-api"
	agents := w.Agents()

	if _, err := w.store.PutPolicy(ctx, dep, []byte(`{"breaker":{"minimumRequests":77}}`), admin); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 10*time.Second, "every agent applies the policy", func() bool {
		for _, a := range agents {
			if a.Engine().Policy(dep).Breaker.MinimumRequests != 77 {
				return false
			}
		}
		return true
	})

	// An invalid value written behind the store's back is ignored.
	if _, err := w.cli.Put(ctx, w.store.PolicyKey(dep), `{"breaker":{"minimumRequests":"many"}}`); err != nil {
		t.Fatal(err)
	}
	// (The agent counts before it logs: wait for both.)
	sstest.Eventually(t, 10*time.Second, "every agent counts and logs the invalid value", func() bool {
		for i := range agents {
			if w.Metric(t, i, "fusebox_agent_etcd_invalid_values_total") < 1 || !strings.Contains(w.Log(i), w.store.PolicyKey(dep)) {
				return false
			}
		}
		return true
	})
	for i, a := range agents {
		if got := a.Engine().Policy(dep).Breaker.MinimumRequests; got != 77 {
			t.Errorf("%s: minimumRequests %d after an invalid value, want the last good 77", a.Name(), got)
		}
		if !strings.Contains(w.Log(i), w.store.PolicyKey(dep)) {
			t.Errorf("%s: log does not name the invalid key %s", a.Name(), w.store.PolicyKey(dep))
		}
	}

	clients := make([]fuseboxv1.AgentClient, len(agents))
	for i := range agents {
		clients[i] = w.Client(i)
	}
	allReject := func(reason fuseboxv1.RejectReason) func() bool {
		return func() bool {
			for _, c := range clients {
				if d := fleettest.Check(t, c, dep); d.GetVerdict() != fuseboxv1.Verdict_VERDICT_REJECT || d.GetReason() != reason {
					return false
				}
			}
			return true
		}
	}
	allAllow := func() bool {
		for _, c := range clients {
			if d := fleettest.Check(t, c, dep); d.GetVerdict() != fuseboxv1.Verdict_VERDICT_ALLOW {
				return false
			}
		}
		return true
	}

	if _, err := w.store.SetOverride(ctx, dep, store.OverrideSpec{State: sharedstate.ForcedOpen, Reason: "maintenance"}, admin); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 10*time.Second, "every agent rejects forced-open", allReject(fuseboxv1.RejectReason_REJECT_REASON_FORCED_OPEN))
	if err := w.store.ClearOverride(ctx, dep, admin); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 10*time.Second, "every agent allows after the override is cleared", allAllow)

	// With a TTL the override expires by itself. Each agent counts once it
	// was seen rejecting: on a loaded machine the override can
	// end before one round of Checks saw every agent reject at once.
	e, err := w.store.SetOverride(ctx, dep, store.OverrideSpec{State: sharedstate.ForcedOpen, Reason: "short", TTL: 10 * time.Second}, admin)
	if err != nil {
		t.Fatal(err)
	}
	seen := make([]bool, len(clients))
	sstest.Eventually(t, 10*time.Second, "every agent rejects the TTL override", func() bool {
		all := true
		for i, c := range clients {
			if d := fleettest.Check(t, c, dep); d.GetVerdict() == fuseboxv1.Verdict_VERDICT_REJECT && d.GetReason() == fuseboxv1.RejectReason_REJECT_REASON_FORCED_OPEN {
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
	w := start(t, 3)
	ctx := fleettest.Ctx(t, 60*time.Second)
	const dep = "ledger"
	if _, err := w.store.SetOverride(ctx, dep, store.OverrideSpec{State: sharedstate.ForcedOpen, Reason: "drill"}, admin); err != nil {
		t.Fatal(err)
	}
	if _, err := w.store.PutPolicy(ctx, dep, []byte(`{"retry":{"maxAttempts":5}}`), admin); err != nil {
		t.Fatal(err)
	}
	forcedOpen := func(a *agent.Agent) bool {
		s := a.Engine().Snapshot(dep)
		return s != nil && s.Override == sharedstate.ForcedOpen
	}
	sstest.Eventually(t, 10*time.Second, "override everywhere", func() bool {
		for _, a := range w.Agents() {
			if !forcedOpen(a) || a.Engine().Policy(dep).Retry.MaxAttempts != 5 {
				return false
			}
		}
		return true
	})

	// Agent 2 goes away; a change is made and etcd compacted meanwhile.
	w.Stop(2)
	running := w.Agents()[:2]
	resp, err := w.store.PutPolicy(ctx, dep, []byte(`{"retry":{"maxAttempts":4}}`), admin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.cli.Compact(ctx, resp.ModRevision); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 10*time.Second, "running agents see maxAttempts 4", func() bool {
		for _, a := range running {
			if a.Engine().Policy(dep).Retry.MaxAttempts != 4 {
				return false
			}
		}
		return true
	})

	extra, err := w.Add(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 10*time.Second, "the extra agent is registered", func() bool {
		ms, _, err := w.store.ListMembers(ctx)
		for _, m := range ms {
			if m.Node == fleet.Name(extra) {
				return err == nil
			}
		}
		return false
	})
	w.EtcdServer().Stop()
	// Running agents keep enforcing.
	if d := fleettest.Check(t, w.Client(0), dep); d.GetReason() != fuseboxv1.RejectReason_REJECT_REASON_FORCED_OPEN {
		t.Fatalf("with etcd down: %v", d)
	}

	// An agent registered before etcd went down closes promptly (its
	// registration cannot be revoked; it expires with its lease).
	extraLog := func() string { return w.Log(extra) }
	start := time.Now()
	w.Stop(extra)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close with etcd down took %v", d)
	}
	t.Logf("Close with etcd down took %v; revoke timed out: %v", time.Since(start),
		strings.Contains(extraLog(), "not revoked in time"))

	// Agent 2 restarts while etcd is down: its cache (from before the
	// change) is in force and it is ready.
	if err := w.Start(ctx, 2); err != nil {
		t.Fatal(err)
	}
	a2 := w.Agent(2)
	if !forcedOpen(a2) || a2.Engine().Policy(dep).Retry.MaxAttempts != 5 {
		t.Fatalf("restarted agent: override %v maxAttempts %d, want the cached forced-open and 5",
			a2.Engine().Snapshot(dep), a2.Engine().Policy(dep).Retry.MaxAttempts)
	}
	if src := w.Metric(t, 2, "fusebox_agent_policy_source", "source", "cache"); src != 1 {
		t.Fatalf("restarted agent's policies do not come from the cache (fusebox_agent_policy_source{source=cache} %v)", src)
	}
	sstest.Eventually(t, 10*time.Second, "restarted agent ready from its cache", a2.Ready)
	if d := fleettest.Check(t, w.Client(2), dep); d.GetReason() != fuseboxv1.RejectReason_REJECT_REASON_FORCED_OPEN {
		t.Fatalf("restarted agent with etcd down: %v", d)
	}

	// etcd back: the change made while agent 2 was away arrives, and a
	// change made now reaches everyone.
	rctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := w.EtcdServer().Restart(rctx); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 15*time.Second, "restarted agent learns the change made while it was away", func() bool {
		return a2.Engine().Policy(dep).Retry.MaxAttempts == 4
	})
	if err := w.store.ClearOverride(ctx, dep, admin); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 15*time.Second, "every agent follows a change made after etcd came back", func() bool {
		for _, a := range append(running, a2) {
			if forcedOpen(a) {
				return false
			}
		}
		return true
	})
}
