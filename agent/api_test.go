package agent

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// 100,000 distinct dependency names through Report: the agent tracks at
// most maxDependencies, memory stays bounded, the excess gets a clear error.
func TestReportBoundsDependencies(t *testing.T) {
	cfg := testConfig(t, "bounded")
	cfg.MaxDependencies = 1000
	// A window far longer than the test: with testPolicy's 2 s window the
	// first dependencies fall idle and are evicted after ~6 s, and on a
	// loaded machine the test outlives that and sees their slots reused.
	pol := testPolicy()
	pol.Breaker.Window = sharedstate.Duration(10 * time.Minute)
	a := startAgent(t, cfg, WithDefaultPolicy(pol))
	c := dial(t, a.Agent)
	before := heapInUse()

	const total, batch = 100000, 5000
	refused := 0
	var lastErrs []*fuseboxv1.DependencyError
	for start := 0; start < total; start += batch {
		req := &fuseboxv1.ReportRequest{}
		for i := start; i < start+batch; i++ {
			req.Outcomes = append(req.Outcomes, &fuseboxv1.OutcomeReport{Dependency: fmt.Sprintf("dep-%06d", i),
				Kind: fuseboxv1.AttemptKind_ATTEMPT_KIND_FIRST, Outcome: fuseboxv1.Outcome_OUTCOME_SUCCESS})
		}
		resp, err := c.Report(ctxT(t, 10*time.Second), req)
		if err != nil {
			t.Fatal(err)
		}
		refused += batch - int(resp.GetAccepted())
		lastErrs = resp.GetErrors()
	}
	if got := a.eng.Stats().Dependencies; got > cfg.MaxDependencies {
		t.Fatalf("engine tracks %d dependencies, cap %d", got, cfg.MaxDependencies)
	}
	if refused != total-cfg.MaxDependencies {
		t.Errorf("%d outcomes refused, want %d", refused, total-cfg.MaxDependencies)
	}
	if len(lastErrs) != maxReportErrors+1 {
		t.Fatalf("last response has %d errors, want %d listed + 1 summary", len(lastErrs), maxReportErrors)
	}
	if e := lastErrs[0]; !strings.Contains(e.GetMessage(), "too many dependencies") || !strings.Contains(e.GetMessage(), "limit 1000") {
		t.Errorf("error for the excess is not clear: %q", e.GetMessage())
	}
	if s := lastErrs[maxReportErrors].GetMessage(); !strings.Contains(s, "more dependencies refused") {
		t.Errorf("summary entry: %q", s)
	}
	if got := value(t, a.m.refusedDeps.WithLabelValues("too_many")); got != float64(total-cfg.MaxDependencies) {
		t.Errorf("refused metric %v, want %d", got, total-cfg.MaxDependencies)
	}
	// 1000 tracked dependencies take well under a few MB; 100,000 would not.
	if after := heapInUse(); after > before+32<<20 {
		t.Errorf("heap grew from %d to %d bytes", before, after)
	}
	// An invalid name is refused with InvalidArgument on Check.
	_, err := c.Check(ctxT(t, 5*time.Second), &fuseboxv1.CheckRequest{Dependency: "bad name!"})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("Check(invalid name) = %v, want InvalidArgument", err)
	}
}

// A Session over the unix socket: Welcome, snapshots of the dependencies
// named in the hello, a refused name reported as a DependencyError, a push
// within moments of an override, and a clear end at shutdown
// (codes.Unavailable, ShutdownMessage); Close also leaves the cluster.
func TestSessionPushAndShutdown(t *testing.T) {
	f := newFleet(t, 2, false)
	a, peer := f.agents[0], f.agents[1]
	c := dial(t, a.Agent)

	stream, err := c.Session(ctxT(t, 20*time.Second))
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
	for !sawError || !sawDB {
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
	if err := a.eng.SetOverride("db", &sharedstate.Override{State: sharedstate.ForcedOpen, Reason: "test"}); err != nil {
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
	hc := healthpb.NewHealthClient(dialConn(t, a.Agent))
	if hr, err := hc.Check(ctxT(t, 5*time.Second), &healthpb.HealthCheckRequest{}); err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
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
		if err == io.EOF || status.Code(err) != codes.Unavailable || status.Convert(err).Message() != ShutdownMessage {
			t.Fatalf("session ended with %v, want Unavailable %q", err, ShutdownMessage)
		}
		break
	}
	// The peer saw it leave (memberlist's dead-node detection would take
	// several probe intervals and a suspicion timeout).
	sstest.Eventually(t, 10*time.Second, "the peer sees the agent gone", func() bool { return peer.gossip.NumAgents() == 1 })
	if err := a.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// The socket has mode 0660; reflection lists the Agent service; a second
// registerer receives the agent's metrics; two agents in one process keep
// separate counters.
func TestSocketReflectionAndRegisterer(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := startAgent(t, testConfig(t, "reflect"), WithRegisterer(reg))
	b := startAgent(t, testConfig(t, "other"))
	fi, err := os.Stat(a.SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o660 {
		t.Errorf("socket mode %v, want socket 0660", fi.Mode())
	}

	rc := rpb.NewServerReflectionClient(dialConn(t, a.Agent))
	stream, err := rc.ServerReflectionInfo(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !slices.Contains(names, "fusebox.v1.Agent") || !slices.Contains(names, "grpc.health.v1.Health") {
		t.Errorf("reflection lists %v", names)
	}

	reportSuccesses(t, a.Agent, "x", 3)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range fams {
		found = found || f.GetName() == "fusebox_agent_outcomes_total"
	}
	if !found {
		t.Error("the extra registerer lacks fusebox_agent_outcomes_total")
	}
	if got := value(t, b.m.outcomes.WithLabelValues("report")); got != 0 {
		t.Errorf("the other agent counted %v outcomes", got)
	}
}
