package agent

import (
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// Failures reported through the clients of 2 agents (one over a Session,
// one over Report) open the breaker on all 5 (a generous 10 s deadline; the
// latency is logged); Check rejects with reason open on each, and a Session
// on a third agent is pushed the open snapshot.
func TestFailuresOpenBreakerOnAllAgents(t *testing.T) {
	f := newFleet(t, 5, true)
	const dep = "shipping-api"

	// A watcher session on agent 4 follows dep.
	watch, err := dial(t, f.agents[4].Agent).Session(ctxT(t, 60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Send(&fuseboxv1.SessionRequest{Msg: &fuseboxv1.SessionRequest_Hello{Hello: &fuseboxv1.Hello{
		Service: "watcher", Instance: "w1", Dependencies: []string{dep}}}}); err != nil {
		t.Fatal(err)
	}
	if r, err := watch.Recv(); err != nil || r.GetWelcome().GetNode() != "agent-4" {
		t.Fatalf("welcome: %v %v", r, err)
	}
	if r, err := watch.Recv(); err != nil || r.GetUpdate().GetSnapshots()[0].GetState() != fuseboxv1.BreakerState_BREAKER_STATE_CLOSED {
		t.Fatalf("first snapshot: %v %v", r, err)
	}

	// Agent 0's client reports over a Session, agent 1's over Report.
	sess, err := dial(t, f.agents[0].Agent).Session(ctxT(t, 20*time.Second))
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
	if _, err := dial(t, f.agents[1].Agent).Report(ctxT(t, 5*time.Second), failures(dep, 8)); err != nil {
		t.Fatal(err)
	}

	clients := make([]fuseboxv1.AgentClient, len(f.agents))
	for i, a := range f.agents {
		clients[i] = dial(t, a.Agent)
	}
	// Each agent's breaker opens for OpenDuration (1 s) and then turns
	// half-open: on a loaded machine one round of five Checks can outlast
	// that, so each agent counts once it was seen rejecting with reason
	// open, or its snapshot shows the open (open count ≥ 1, not closed).
	seen := make([]bool, len(clients))
	sstest.Eventually(t, 10*time.Second, "every agent's breaker opened (Check rejects with reason open)", func() bool {
		all := true
		for i, c := range clients {
			d := check(t, c, dep)
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
