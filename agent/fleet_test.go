package agent

import (
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// Failures reported through the clients of 2 agents (one over a Session,
// one over Report) open the breaker on all 5 within 2 s; Check then rejects
// with reason open everywhere, and a Session on a third agent is pushed the
// open snapshot.
func TestFailuresOpenBreakerOnAllAgents(t *testing.T) {
	f := newFleet(t, 5, true)
	const dep = "shipping-api"

	// A watcher session on agent 4 follows dep.
	watch, err := dial(t, f.agents[4].Agent).Session(ctxT(t, 20*time.Second))
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
	sstest.Eventually(t, 10*time.Second, "every agent rejects with reason open", func() bool {
		for _, c := range clients {
			d := check(t, c, dep)
			if d.GetVerdict() != fuseboxv1.Verdict_VERDICT_REJECT || d.GetReason() != fuseboxv1.RejectReason_REJECT_REASON_OPEN {
				return false
			}
		}
		return true
	})
	t.Logf("breaker open on all 5 agents %v after the reports", time.Since(start))

	// The watcher was pushed the open snapshot.
	for { // bounded by the watcher's 20 s context
		r, err := watch.Recv()
		if err != nil {
			t.Fatalf("watcher: %v", err)
		}
		if s := r.GetUpdate().GetSnapshots(); len(s) > 0 && s[0].GetState() == fuseboxv1.BreakerState_BREAKER_STATE_OPEN {
			break
		}
	}
}
