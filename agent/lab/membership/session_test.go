package membership

import (
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/lab/fleet/fleettest"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// A Session over the unix socket: Welcome, snapshots of the dependencies
// named in the hello, a refused name reported as a DependencyError, a push
// within moments of an override, and a clear end at shutdown
// (codes.Unavailable, ShutdownMessage); Close also leaves the cluster.
func TestSessionPushAndShutdown(t *testing.T) {
	f := start(t, 2, false, nil)
	a, peer := f.Agent(0), f.Agent(1)

	stream, err := f.Client(0).Session(fleettest.Ctx(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	send := func(r *fuseboxv1.SessionRequest) {
		t.Helper()
		if err := stream.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	send(&fuseboxv1.SessionRequest{Msg: &fuseboxv1.SessionRequest_Hello{Hello: &fuseboxv1.Hello{
		Service: "checkout", Instance: "pod-1", Dependencies: []string{"db", "bad name"}}}})
	w, err := stream.Recv()
	if err != nil || w.GetWelcome().GetZone() != "z1" || !strings.Contains(string(w.GetWelcome().GetDefaultSnapshot().GetPolicyJson()), `"maxAttempts":3`) {
		t.Fatalf("welcome: %v, %v", w, err)
	}
	var sawError, sawDB bool
	for !sawError || !sawDB { // bounded by the session's 20 s context
		r, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if e := r.GetError(); e != nil {
			sawError = e.GetDependency() == "bad name" && strings.Contains(e.GetMessage(), "invalid dependency name")
		}
		for _, s := range r.GetUpdate().GetSnapshots() {
			sawDB = sawDB || (s.GetDependency() == "db" && s.GetState() == fuseboxv1.BreakerState_BREAKER_STATE_CLOSED)
		}
	}

	// An override set on the engine is pushed at once.
	start := time.Now()
	if err := a.Engine().SetOverride("db", &sharedstate.Override{State: sharedstate.ForcedOpen, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	r, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if s := r.GetUpdate().GetSnapshots(); len(s) != 1 || s[0].GetOverride() != fuseboxv1.OverrideState_OVERRIDE_STATE_FORCED_OPEN {
		t.Fatalf("pushed %v, want db forced open", r)
	}
	t.Logf("override pushed to the session %v after the change", time.Since(start))

	// Health is served; then Close ends the session with Unavailable.
	hc := healthpb.NewHealthClient(fleettest.Dial(t, a.SocketPath()))
	if hr, err := hc.Check(fleettest.Ctx(t, 5*time.Second), &healthpb.HealthCheckRequest{}); err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v, %v", hr, err)
	}
	start = time.Now()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close took %v", d)
	}
	for { // bounded by the session's 20 s context
		_, err := stream.Recv()
		if err == nil {
			continue
		}
		if err == io.EOF || status.Code(err) != codes.Unavailable || status.Convert(err).Message() != agent.ShutdownMessage {
			t.Fatalf("session ended with %v, want Unavailable %q", err, agent.ShutdownMessage)
		}
		break
	}
	// The peer saw it leave (memberlist's dead-node detection would take
	// several probe intervals and a suspicion timeout).
	sstest.Eventually(t, 10*time.Second, "the peer sees the agent gone", func() bool { return peer.Gossip().NumAgents() == 1 })
	if err := a.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
