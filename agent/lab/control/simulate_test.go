package control

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/coordinator"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

// TestPolicySimulate drives two real agents through a failure burst that
// opens their breaker, then simulates a policy that cannot open
// (minimumRequests past what a window holds): the table names the incident
// with the fleet and the current policy opening and the proposed one not,
// -o json carries the same; an invalid policy exits 2, a dependency the
// coordinator never saw exits 1.
func TestPolicySimulate(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a coordinator and two agents")
	}
	const dep = "payments"
	f := startCoordinator(t, setup{})
	c := f.Coordinator()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.Store().PutPolicy(ctx, dep, []byte(`{"breaker":{"openDuration":"1s","maxOpenDuration":"2s"}}`), store.WriteOptions{Actor: "setup"}); err != nil {
		t.Fatal(err)
	}
	agents := startAgents(t, f, 2)
	waitAgentsWithPolicy(t, c, agents, dep, time.Second)
	confirm(t, agents, dep)
	// 2 s healthy, then failing until the breaker has opened and a probe failed.
	start := time.Now()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for opened := false; !opened || time.Since(start) < 5*time.Second; { // bounded by the deadline below
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatal("the agents' breaker did not open")
		}
		fail := time.Since(start) > 2*time.Second
		for _, a := range agents {
			callThrough(a, dep, fail)
		}
		if s := agents[0].Engine().Snapshot(dep); s != nil && s.State != sharedstate.Closed {
			opened = true
		}
	}
	proposed := writeFile(t, "proposed.json", `{"dependency":"payments","breaker":{"openDuration":"1s","maxOpenDuration":"2s","minimumRequests":100000}}`)
	// The replay covers up to 2 s ago: wait until it holds the open.
	var (
		r   result
		doc simulationDoc
	)
	sstest.Eventually(t, 20*time.Second, "a simulation that holds the fleet's open", func() bool {
		r = ctl(t, c, nil, "policy", "simulate", "-f", proposed, "--since", "1m", "-o", "json")
		doc = simulationDoc{}
		return r.code == 0 && json.Unmarshal([]byte(r.stdout), &doc) == nil && len(doc.Incidents) > 0 &&
			doc.Incidents[0].Fleet.Opened != nil && doc.Incidents[0].Current.Opened != nil
	})
	inc := doc.Incidents[0]
	if inc.Fleet.Opened == nil || inc.Current.Opened == nil || inc.Proposed.Opened != nil || doc.Totals.Proposed.Refused != 0 ||
		doc.Totals.Proposed.FailedLetThrough <= doc.Totals.Current.FailedLetThrough {
		t.Errorf("incident %+v, totals %+v: want the fleet and the current policy open, the proposed one neither opening nor refusing, and letting more failures through",
			inc, doc.Totals)
	}
	if len(doc.Changes) != 1 || doc.Changes[0].Field != "breaker.minimumRequests" || doc.Changes[0].To != "100000" {
		t.Errorf("changes %+v, want breaker.minimumRequests → 100000", doc.Changes)
	}
	r = ctl(t, c, nil, "policy", "simulate", "-f", proposed, "--since", "1m")
	t.Logf("policy simulate:\n%s", r.stdout)
	r.want(t, 0, []string{"Replay of payments", "breaker.minimumRequests", "fleet", "current", "proposed", "TOTAL", "Notes:"}, nil)
	ctl(t, c, nil, "policy", "simulate", "-f", proposed, "-o", "yaml").want(t, 0, []string{"incidents:", "proposed:"}, nil)

	bad := writeFile(t, "bad.json", `{"breaker":{"failureRateThreshold":1.5,"minimumRequests":0},"retry":{"maxAttempts":0}}`)
	ctl(t, c, nil, "policy", "simulate", "-f", bad, "--dependency", dep).want(t, 2, nil, []string{"3 violation(s)", "breaker.failureRateThreshold"})
	ctl(t, c, nil, "policy", "simulate", "-f", proposed, "--dependency", "never-seen").want(t, 2, nil, []string{"dependency"})
	other := writeFile(t, "other.json", `{"breaker":{"minimumRequests":5}}`)
	ctl(t, c, nil, "policy", "simulate", "-f", other, "--dependency", "never-seen").want(t, 1, nil, []string{"no history", "never-seen"})
}

// callThrough makes one call to dep through a's engine, as clientlib
// would: refused while the breaker refuses, a probe when it allows one
// (reporting its result), a first attempt otherwise; the call fails when
// fail.
func callThrough(a *agent.Agent, dep string, fail bool) {
	e := a.Engine()
	o := sharedstate.Success
	if fail {
		o = sharedstate.Failure
	}
	switch d := e.Snapshot(dep).DecideFirst(); d.Verdict {
	case sharedstate.Reject:
		_ = e.Record(dep, sharedstate.FirstAttempt, sharedstate.Rejected)
	case sharedstate.AllowProbe:
		if p := e.AcquireProbe(dep); p.Verdict == sharedstate.AllowProbe {
			_ = e.Record(dep, sharedstate.Probe, o)
			e.ProbeResult(dep, !fail)
		}
	default:
		_ = e.Record(dep, sharedstate.FirstAttempt, o)
	}
}

// waitAgentsWithPolicy waits until every agent runs dep with the open
// duration open and the coordinator sees them all alive.
func waitAgentsWithPolicy(t *testing.T, c *coordinator.Coordinator, agents []*agent.Agent, dep string, open time.Duration) {
	t.Helper()
	admin := adminClient(t, c.GRPCAddr(), "")
	sstest.Eventually(t, 20*time.Second, "the agents with the policy, seen by the coordinator", func() bool {
		for _, a := range agents {
			if a.Engine().Policy(dep).Breaker.OpenDuration.Std() != open {
				return false
			}
		}
		m, err := admin.ListMembers(t.Context(), &fuseboxv1.ListMembersRequest{})
		if err != nil {
			return false
		}
		n := 0
		for _, x := range m.GetMembers() {
			if x.GetRole() == "agent" && x.GetStatus() == "alive" {
				n++
			}
		}
		return n == len(agents)
	})
}
