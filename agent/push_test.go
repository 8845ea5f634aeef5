package agent

import (
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/protocol/convert"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// A session is pushed every field of the engine's snapshot plus the breaker
// settings of the effective policy, and a change of thresholds alone (which
// leaves the snapshot as it is) is pushed too, from a dependency's policy
// and from the fleet default.
func TestSessionPushesSnapshotWithBreakerSettings(t *testing.T) {
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
	if d := r.GetWelcome().GetDefaultSnapshot(); d.GetDependency() != sharedstate.DefaultPolicyName ||
		d.GetBreaker().GetMinimumRequests() != 10 || d.GetRetry().GetMaxAttempts() != 3 ||
		d.GetMode() != fuseboxv1.Mode_MODE_ENFORCE || d.GetScope() != fuseboxv1.Scope_SCOPE_FLEET ||
		d.GetState() != fuseboxv1.BreakerState_BREAKER_STATE_CLOSED {
		t.Fatalf("welcome %v: want the test default as a closed snapshot (minimumRequests 10, maxAttempts 3, enforce, fleet)", d)
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
	if got := convert.SnapshotFromProto(first); *got != *want {
		t.Errorf("pushed snapshot rebuilds as %+v, want the engine's %+v", *got, *want)
	}
	if first.GetVersion() == 0 || first.GetLocalState() != fuseboxv1.BreakerState_BREAKER_STATE_CLOSED ||
		first.GetScope() != fuseboxv1.Scope_SCOPE_FLEET {
		t.Errorf("first snapshot %v: want a version, local state and scope", first)
	}
	if b := first.GetBreaker(); b.GetMinimumRequests() != 10 || b.GetWindow().AsDuration() != 2*time.Second ||
		b.GetOpenDuration().AsDuration() != time.Second || b.GetMinFailingNodes() != 2 {
		t.Errorf("breaker settings %v: want the test default", b)
	}

	ctx := ctxT(t, 10*time.Second)
	if _, err := st.PutPolicy(ctx, dep, []byte(`{"breaker":{"minimumRequests":5}}`), admin); err != nil {
		t.Fatal(err)
	}
	s := next()
	if s.GetBreaker().GetMinimumRequests() != 5 {
		t.Fatalf("after the policy change: breaker %v, want minimumRequests 5", s.GetBreaker())
	}
	// The snapshot carries the effective policy's breaker and retry
	// settings, each once: mode, scope and slow-call duration at the top,
	// the trip rule and timings in breaker. (Throttle and concurrency are
	// not carried: the snapshot carries what the agents make of them.)
	eff := a.eng.Policy(dep)
	got := convert.PolicyWithBreaker(sharedstate.Policy{}, s.GetBreaker()).Breaker
	snap := convert.SnapshotFromProto(s)
	got.Mode, got.Scope, got.SlowCallDuration = snap.Mode, snap.Scope, sharedstate.Duration(snap.SlowCallDuration)
	if got != eff.Breaker {
		t.Errorf("breaker settings of the pushed snapshot:\n got %+v\nwant %+v", got, eff.Breaker)
	}
	if snap.Retry != convert.RetryFromPolicy(eff) {
		t.Errorf("retry settings of the pushed snapshot: %+v, want %+v", snap.Retry, convert.RetryFromPolicy(eff))
	}

	def := testPolicy()
	def.Breaker.FailureRateThreshold = 0.3
	if _, err := st.PutPolicyPatch(ctx, sharedstate.DefaultPolicyName, def.Patch(), admin); err != nil {
		t.Fatal(err)
	}
	s = next()
	if b := s.GetBreaker(); b.GetFailureRateThreshold() != 0.3 || b.GetMinimumRequests() != 5 {
		t.Fatalf("after the default changed: breaker %v, want failureRateThreshold 0.3 and the dependency's minimumRequests 5", b)
	}
}
