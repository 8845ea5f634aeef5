package membership

import (
	"fmt"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/lab/fleet"
	"github.com/fusebox-dev/fusebox/agent/lab/fleet/fleettest"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// Failures reported through the clients of 2 agents (one over a Session,
// one over Report) open the breaker on all 5 (a generous 10 s deadline; the
// latency is logged); Check rejects with reason open on each, and a Session
// on a third agent is pushed the open snapshot.
func TestFailuresOpenBreakerOnAllAgents(t *testing.T) {
	f := start(t, 5, true, nil)
	const dep = "shipping-api"

	// A watcher session on agent 4 follows dep.
	watch, err := f.Client(4).Session(fleettest.Ctx(t, 60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Send(&fuseboxv1.SessionRequest{Msg: &fuseboxv1.SessionRequest_Hello{Hello: &fuseboxv1.Hello{
		Service: "watcher", Instance: "w1", Dependencies: []string{dep}}}}); err != nil {
		t.Fatal(err)
	}
	if r, err := watch.Recv(); err != nil || r.GetWelcome().GetNode() != fleet.Name(4) {
		t.Fatalf("welcome: %v %v", r, err)
	}
	if r, err := watch.Recv(); err != nil || r.GetUpdate().GetSnapshots()[0].GetState() != fuseboxv1.BreakerState_BREAKER_STATE_CLOSED {
		t.Fatalf("first snapshot: %v %v", r, err)
	}

	// Agent 0's client reports over a Session, agent 1's over Report.
	sess, err := f.Client(0).Session(fleettest.Ctx(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.Send(&fuseboxv1.SessionRequest{Msg: &fuseboxv1.SessionRequest_Hello{Hello: &fuseboxv1.Hello{Service: "svc", Instance: "i0"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := sess.Recv(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := sess.Send(&fuseboxv1.SessionRequest{Msg: &fuseboxv1.SessionRequest_Deltas{Deltas: &fuseboxv1.CountDeltas{
		Deltas: []*fuseboxv1.DependencyCounts{{Dependency: dep, Counts: &fuseboxv1.Counts{FirstAttempts: 8, Failures: 8}}}}}}); err != nil {
		t.Fatal(err)
	}
	fleettest.Report(t, f.Client(1), dep, 0, 8)

	clients := make([]fuseboxv1.AgentClient, f.Size())
	for i := range clients {
		clients[i] = f.Client(i)
	}
	// Each agent's breaker opens for OpenDuration (1 s) and then turns
	// half-open: on a loaded machine one round of five Checks can outlast
	// that, so each agent counts once it was seen rejecting with reason
	// open, or its snapshot shows the open (open count ≥ 1, not closed).
	seen := make([]bool, len(clients))
	sstest.Eventually(t, 10*time.Second, "every agent's breaker opened (Check rejects with reason open)", func() bool {
		all := true
		for i, c := range clients {
			d := fleettest.Check(t, c, dep)
			s := d.GetSnapshot()
			if d.GetVerdict() == fuseboxv1.Verdict_VERDICT_REJECT && d.GetReason() == fuseboxv1.RejectReason_REJECT_REASON_OPEN ||
				s.GetOpenCount() >= 1 && s.GetState() != fuseboxv1.BreakerState_BREAKER_STATE_CLOSED {
				seen[i] = true
			}
			all = all && seen[i]
		}
		return all
	})
	t.Logf("breaker open on all 5 agents %v after the reports", time.Since(start))

	// The watcher was pushed the open breaker (open, or already half-open
	// after its open count rose: pushes of a slow watcher coalesce).
	for { // bounded by the watcher's 60 s context
		r, err := watch.Recv()
		if err != nil {
			t.Fatalf("watcher: no open snapshot pushed: %v", err)
		}
		if s := r.GetUpdate().GetSnapshots(); len(s) > 0 && s[0].GetOpenCount() >= 1 && s[0].GetState() != fuseboxv1.BreakerState_BREAKER_STATE_CLOSED {
			break
		}
	}
}

// Dependencies that ever tripped are forgotten: 3,000 of them, each with a
// record past generation 0 (closed, or open with nobody to probe it), on
// three agents, are forgotten by every agent once nobody reports traffic
// for --idle-retention, stay forgotten through further push-pulls, and an
// agent that starts afterwards gets none back. (The records are put into
// each engine, as gossip would have: 9,000 signatures checked under -race
// on a loaded 2-core VM took longer than the test.)
func TestOnceTrippedDependenciesForgotten(t *testing.T) {
	if testing.Short() {
		t.Skip("3,000 records on three agents")
	}
	const n = 3000
	f := start(t, 3, false, func(_ int, c *agent.Config) { c.IdleRetention = 5 * time.Second })
	agents := f.Agents()
	defer func() {
		if t.Failed() {
			for _, a := range agents {
				t.Logf("%s: %d dependencies, dropped %v", a.Name(), a.Engine().Stats().Dependencies, a.Gossip().Stats().Dropped)
			}
		}
	}()
	now := time.Now()
	for _, a := range agents {
		for i := range n {
			r := sharedstate.BreakerRecord{Dependency: fmt.Sprintf("tripped-%04d", i), Generation: 2, State: sharedstate.Closed,
				Since: now, Origin: fleet.Name(0), Reason: "probes succeeded"}
			if i%3 == 0 {
				r.Generation, r.State, r.OpenCount = 1, sharedstate.Open, 1 // half-open soon, with no traffic to probe it
			}
			if _, err := a.Engine().MergeRecord(r); err != nil {
				t.Fatal(err)
			}
		}
	}
	deps := func(a *agent.Agent) int { return a.Engine().Stats().Dependencies }
	held := time.Now()
	sstest.Eventually(t, 60*time.Second, "every agent forgot them", func() bool {
		for _, a := range agents {
			if deps(a) != 0 {
				return false
			}
		}
		return true
	})
	if el := time.Since(held); el < 5*time.Second {
		t.Fatalf("forgotten after %v, before the retention", el)
	}
	// Push-pull runs every second: a few rounds bring nothing back.
	pp := func() uint64 {
		var m uint64
		for _, a := range agents {
			m += a.Gossip().Stats().MsgsIn["push_pull"]
		}
		return m
	}
	before := pp()
	sstest.Eventually(t, 30*time.Second, "three more push-pull rounds", func() bool { return pp() >= before+9 })
	i, err := f.Add(fleettest.Ctx(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	late := f.Agent(i)
	sstest.Eventually(t, 30*time.Second, "the late agent joined and exchanged state", func() bool {
		return late.Gossip().Stats().MsgsIn["push_pull"] >= 2
	})
	for _, a := range append(agents, late) {
		if d := deps(a); d != 0 {
			t.Fatalf("%s holds %d dependencies again", a.Name(), d)
		}
	}
}
