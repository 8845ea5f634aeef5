package agent

import (
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/protocol/convert"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// policyOf reads the policy a pushed snapshot carries.
func policyOf(t *testing.T, s *fuseboxv1.DecisionSnapshot) sharedstate.Policy {
	t.Helper()
	p, err := sharedstate.ParsePolicy(s.GetPolicyJson())
	if err != nil {
		t.Fatalf("policy_json of %v: %v", s, err)
	}
	return p
}

// A session is pushed every field of the engine's snapshot and, once, the
// whole effective policy as its JSON document; a policy change (of a
// dependency's own policy, or of the fleet default) is pushed with it.
func TestSessionPushesSnapshotWithItsPolicy(t *testing.T) {
	a, st := startWithEtcd(t, testConfig(t, "pushing"))
	const dep = "ledger-api"

	stream, err := dial(t, a.Agent).Session(ctxT(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&fuseboxv1.SessionRequest{Msg: &fuseboxv1.SessionRequest_Hello{Hello: &fuseboxv1.Hello{
		Service: "svc", Instance: "i1", Dependencies: []string{dep}}}}); err != nil {
		t.Fatal(err)
	}
	r, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	d := r.GetWelcome().GetDefaultSnapshot()
	if want := a.eng.Policy(sharedstate.DefaultPolicyName); d.GetDependency() != sharedstate.DefaultPolicyName ||
		policyOf(t, d) != want || d.GetState() != fuseboxv1.BreakerState_BREAKER_STATE_CLOSED {
		t.Fatalf("welcome %v: want the test default as a closed snapshot", d)
	}
	// next returns the next snapshot of dep the agent pushes.
	next := func() *fuseboxv1.DecisionSnapshot {
		t.Helper()
		for { // bounded by the session's 20 s context
			r, err := stream.Recv()
			if err != nil {
				t.Fatalf("recv: %v", err)
			}
			for _, s := range r.GetUpdate().GetSnapshots() {
				if s.GetDependency() == dep {
					return s
				}
			}
		}
	}

	first := next()
	want := a.eng.Snapshot(dep)
	got := convert.SnapshotFromProto(first)
	if p := policyOf(t, first); p != *want.Policy {
		t.Errorf("pushed policy %+v, want the engine's %+v", p, *want.Policy)
	}
	got.Policy = want.Policy
	if *got != *want {
		t.Errorf("pushed snapshot rebuilds as %+v, want the engine's %+v", *got, *want)
	}
	if first.GetVersion() == 0 || first.GetLocalState() != fuseboxv1.BreakerState_BREAKER_STATE_CLOSED {
		t.Errorf("first snapshot %v: want a version and local state", first)
	}
	if b := policyOf(t, first).Breaker; b.MinimumRequests != 10 || b.Window.Std() != 2*time.Second ||
		b.OpenDuration.Std() != time.Second || b.MinFailingNodes != 2 {
		t.Errorf("breaker %+v: want the test default", b)
	}

	ctx := ctxT(t, 10*time.Second)
	if _, err := st.PutPolicy(ctx, dep, []byte(`{"breaker":{"minimumRequests":5}}`), admin); err != nil {
		t.Fatal(err)
	}
	s := next()
	if p := policyOf(t, s); p.Breaker.MinimumRequests != 5 || p != a.eng.Policy(dep) {
		t.Fatalf("after the policy change: %+v, want the effective policy with minimumRequests 5", p)
	}

	def := testPolicy()
	def.Breaker.FailureRateThreshold = 0.3
	if _, err := st.PutPolicyOf(ctx, sharedstate.DefaultPolicyName, def, admin); err != nil {
		t.Fatal(err)
	}
	s = next()
	if b := policyOf(t, s).Breaker; b.FailureRateThreshold != 0.3 || b.MinimumRequests != 5 {
		t.Fatalf("after the default changed: breaker %+v, want failureRateThreshold 0.3 and the dependency's minimumRequests 5", b)
	}
}
