package agent

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
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
