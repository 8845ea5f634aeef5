package fleet

import (
	"context"
	"errors"
	"io"
	"os/exec"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/lab/simnet"
	"github.com/fusebox-dev/fusebox/coordinator"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded/embeddedtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// closeAtCleanup closes f at t's cleanup and waits for memberlist's probe
// goroutines, which end by their own timers (up to a probe interval) after
// Shutdown: goleak's retries in TestMain are shorter than that on a busy
// machine.
func closeAtCleanup(t *testing.T, f *Fleet) {
	t.Cleanup(func() {
		f.Close()
		f.Close() // idempotent
		sstest.EventuallyNoError(t, 30*time.Second, "no goroutine left after the fleet closed", func() error { return goleak.Find() })
	})
}

func TestConfigValidate(t *testing.T) {
	p := sharedstate.DefaultPolicy()
	p.Breaker.MinimumRequests = 0
	cases := []struct {
		cfg  Config
		want []string
	}{
		{Config{Seeds: -1, Poll: -1}, []string{"N must be at least 1 (0 only with Etcd), got 0", "Dir is required", "Seeds must be >= 0", "Poll must be >= 0"}},
		{Config{N: 2, Dir: "d", Sim: &simnet.Config{QueueLen: -1}, Etcd: true, Binary: "/nonexistent"},
			[]string{"QueueLen must be >= 0", "Sim and Etcd", "Sim and Binary", "Binary: stat /nonexistent"}},
		{Config{N: 2, Dir: "d", Coordinator: true}, []string{"Coordinator needs Etcd"}},
		{Config{N: 2, Dir: "d", Etcd: true, EtcdEndpoints: []string{"http://127.0.0.1:1"}, Namespaces: lab{}},
			[]string{"Etcd and EtcdEndpoints", "Namespaces needs Binary", "Namespaces with Etcd"}},
		{Config{N: 2, Dir: "d", Binary: "/bin/true", Options: func(int) []agent.Option { return nil }},
			[]string{"Options with Binary"}},
		{Config{N: 2, Dir: "d", BinaryOf: func(int) string { return "/bin/true" }}, []string{"BinaryOf needs Binary"}},
		{Config{N: 2, Dir: "d", Binary: "/", Policy: &p}, []string{"/ is not an executable file", "Policy with Binary needs Etcd", "Policy:"}},
	}
	for _, c := range cases {
		err := c.cfg.Validate()
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("Validate(%+v) = %v, want it to say %q", c.cfg, err, w)
			}
		}
	}
	if err := (Config{N: 0, Dir: "d", Etcd: true}).Validate(); err != nil {
		t.Errorf("an etcd-only fleet refused: %v", err)
	}
	if err := (Config{N: 1, Dir: "d", EtcdEndpoints: []string{"http://127.0.0.1:1"}, Coordinator: true}).Validate(); err != nil {
		t.Errorf("a fleet on the caller's etcd refused: %v", err)
	}
}

// lab is a Namespaces for Validate's cases.
type lab struct{}

func (lab) NS(int) string   { return "none" }
func (lab) Addr(int) string { return "10.0.0.1" }

// Agents stopped, crashed and started again: a stopped agent leaves (its
// peers count it gone at once), a crashed one does not (they find it dead
// by probing), and each comes back under its name, data directory and
// socket, counted again; the fleet's options reach every agent.
func TestStopCrashStart(t *testing.T) {
	reg := prometheus.NewRegistry()
	f, err := New(timeout(t, 2*time.Minute), Config{N: 3, Dir: t.TempDir(),
		Options: func(i int) []agent.Option {
			if i == 0 {
				return []agent.Option{agent.WithRegisterer(reg)}
			}
			return nil
		},
		Tune: func(_ int, c *agent.Config) { Quick(c) }})
	if err != nil {
		t.Fatal(err)
	}
	closeAtCleanup(t, f)
	if mfs, err := reg.Gather(); err != nil || len(mfs) == 0 {
		t.Errorf("agent-000's registerer (an option) gathered %d families, %v", len(mfs), err)
	}
	ctx := timeout(t, time.Minute)
	counts := func(i, n int) func() bool {
		return func() bool { return f.Agent(i).Gossip().NumAgents() == n }
	}
	sock := f.Config(2).Socket
	f.Stop(2)
	if f.Agent(2) != nil || f.Client(2) != nil || f.Inside(2).Crash != nil {
		t.Fatal("a stopped agent is still in the fleet's running members")
	}
	sstest.Eventually(t, 10*time.Second, "agent-000 counts agent-002 gone", counts(0, 2))
	if err := f.Start(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := f.Start(ctx, 2); err == nil || !strings.Contains(err.Error(), "running") {
		t.Errorf("starting a running agent: %v", err)
	}
	if f.Config(2).Socket != sock || f.Agent(2).Name() != Name(2) {
		t.Errorf("agent-002 came back as %s on %s, was on %s", f.Agent(2).Name(), f.Config(2).Socket, sock)
	}
	if err := f.WaitMembership(ctx); err != nil {
		t.Fatal(err)
	}
	f.Crash(1)
	sstest.Eventually(t, 20*time.Second, "agent-000 finds the crashed agent-001 dead", counts(0, 2))
	if err := f.Start(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := f.WaitMembership(ctx); err != nil {
		t.Fatal(err)
	}
}

// A fleet on an etcd cluster the caller runs (EtcdEndpoints), with a
// coordinator tuned by the caller: the policy is written there, the agents
// run it and register, and the coordinator's configuration is the
// caller's.
func TestFleetOnTheCallersEtcd(t *testing.T) {
	// Registered first, so it runs last: after the fleet and the cluster
	// closed.
	t.Cleanup(func() {
		sstest.EventuallyNoError(t, 30*time.Second, "no goroutine left after the fleet and etcd closed", func() error { return goleak.Find() })
	})
	cl := embeddedtest.StartCluster(t, 3)
	p := sharedstate.DefaultPolicy()
	p.Breaker.MinimumRequests = 9
	var tuned bool
	f, err := New(timeout(t, 2*time.Minute), Config{N: 2, Dir: t.TempDir(), EtcdEndpoints: cl.Endpoints(), Coordinator: true, Policy: &p,
		CoordinatorTune: func(c *coordinator.Config) { tuned = c.Name == "coordinator"; c.Name = "tuned" },
		Tune:            func(_ int, c *agent.Config) { Quick(c) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	if !tuned || f.EtcdServer() != nil || strings.Join(f.Etcd(), ",") != strings.Join(cl.Endpoints(), ",") {
		t.Fatalf("tuned %v, embedded etcd %v, endpoints %v", tuned, f.EtcdServer(), f.Etcd())
	}
	for i, a := range f.Agents() {
		if got := a.Engine().Policy("any-dep").Breaker.MinimumRequests; got != 9 {
			t.Errorf("%s runs minimumRequests %d, want the 9 written to the cluster", Name(i), got)
		}
		if eps := f.Config(i).Etcd; strings.Join(eps, ",") != strings.Join(cl.Endpoints(), ",") {
			t.Errorf("%s's etcd endpoints %v", Name(i), eps)
		}
	}
}

// Args renders a Config that fusebox-agent loads back unchanged, and the
// defaults as nothing at all.
func TestArgsRoundTrip(t *testing.T) {
	if got := Args(agent.DefaultConfig()); len(got) != 0 {
		t.Errorf("Args(DefaultConfig()) = %q, want no flags", got)
	}
	cfg := agent.DefaultConfig()
	cfg.Name, cfg.Zone, cfg.DataDir = "agent-007", "z2", t.TempDir()
	cfg.GossipAddr, cfg.HTTPAddr, cfg.Socket = "127.0.0.1:0", "", "/tmp/fb/7.sock"
	cfg.Join, cfg.Etcd = []string{"127.0.0.1:1", "127.0.0.1:2"}, []string{"http://127.0.0.1:2379"}
	cfg.Proxy.Addr, cfg.Proxy.AllowHosts = "127.0.0.1:0", []string{"*.example.com"}
	cfg.LogFormat = "json"
	Quick(&cfg)
	args := Args(cfg)
	got, err := agent.LoadConfig(args, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatalf("LoadConfig(%q): %v", args, err)
	}
	if !reflect.DeepEqual(got, cfg) {
		t.Errorf("loaded back from %q:\n%+v\nwant\n%+v", args, got, cfg)
	}
}

// A fleet on the simulated network: every agent counts the others, a
// report through the in-process client lands in the push-pull state, a
// restarted agent keeps its address and is counted again, Session is
// refused with Unimplemented, and nothing is left running.
func TestSimFleet(t *testing.T) {
	const n = 4
	f, err := New(timeout(t, 2*time.Minute), Config{N: n, Dir: t.TempDir(), Sim: &simnet.Config{Seed: 1},
		Tune: func(_ int, c *agent.Config) { Quick(c) }})
	if err != nil {
		t.Fatal(err)
	}
	closeAtCleanup(t, f)
	if f.Size() != n || f.Net() == nil || f.Coordinator() != nil || f.Etcd() != nil {
		t.Fatalf("size %d, net %v, coordinator %v, etcd %v", f.Size(), f.Net(), f.Coordinator(), f.Etcd())
	}
	ctx := timeout(t, time.Minute)
	if err := f.Report(ctx, 2, []string{"dep-x"}, 3, 1); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 10*time.Second, "agent-002's row in its push-pull state", func() bool {
		for _, r := range f.PushPullState(2).GetRows() {
			if r.GetDependency() == "dep-x" && r.GetCounts().GetFirstAttempts() == 4 {
				return true
			}
		}
		return false
	})
	if _, err := f.Client(0).Session(ctx); status.Code(err) != codes.Unimplemented {
		t.Errorf("Session in process: %v, want Unimplemented", err)
	}
	m, err := f.Metrics(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := m.Value("fusebox_agent_members", "role", "agent", "state", "alive"); !ok || v != n {
		t.Errorf("agent-000's fusebox_agent_members{alive}: %v %v, want %d", v, ok, n)
	}
	addr := f.Addr(3)
	if err := f.Restart(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if f.Addr(3) != addr {
		t.Errorf("agent-003 came back at %s, was at %s", f.Addr(3), addr)
	}
	if err := f.WaitMembership(ctx); err != nil {
		t.Fatal(err)
	}
}

// A fleet on loopback with an embedded etcd, a coordinator and a policy
// written there: the agents run the policy from etcd, a client over an
// agent's unix socket reports, and an agent added later joins.
func TestEtcdFleet(t *testing.T) {
	p := sharedstate.DefaultPolicy()
	p.Breaker.MinimumRequests = 7
	f, err := New(timeout(t, 2*time.Minute), Config{N: 2, Dir: t.TempDir(), Etcd: true, Coordinator: true, Policy: &p,
		Tune: func(_ int, c *agent.Config) { Quick(c) }})
	if err != nil {
		t.Fatal(err)
	}
	closeAtCleanup(t, f)
	if f.Coordinator() == nil || f.Coordinator().GRPCAddr() == "" || len(f.Etcd()) == 0 {
		t.Fatalf("coordinator %v, etcd %v", f.Coordinator(), f.Etcd())
	}
	for i, a := range f.Agents() {
		if got := a.Engine().Policy("any-dep").Breaker.MinimumRequests; got != 7 {
			t.Errorf("%s runs minimumRequests %d, want the 7 written to etcd", Name(i), got)
		}
		if a.SocketPath() == "" || len(a.SocketPath()) > 104 {
			t.Errorf("%s's socket %q", Name(i), a.SocketPath())
		}
	}
	ctx := timeout(t, time.Minute)
	if err := f.Report(ctx, 1, []string{"dep-y"}, 2, 0); err != nil {
		t.Fatal(err)
	}
	i, err := f.Add(ctx)
	if err != nil || i != 2 {
		t.Fatalf("Add = %d, %v", i, err)
	}
	if err := f.WaitMembership(ctx); err != nil {
		t.Fatal(err)
	}
}

// New cleans up after a failure: an agent that cannot start leaves no
// fleet running (goleak in TestMain).
func TestNewFailsClean(t *testing.T) {
	_, err := New(timeout(t, time.Minute), Config{N: 2, Dir: t.TempDir(), Sim: &simnet.Config{},
		Tune: func(i int, c *agent.Config) {
			if i == 1 {
				c.MaxDependencies = -1
			}
		}})
	if err == nil || !strings.Contains(err.Error(), "agent-001") || !strings.Contains(err.Error(), "max-dependencies") {
		t.Fatalf("New with a bad agent config: %v", err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("New waited for the deadline: %v", err)
	}
}

// A fleet of fusebox-agent processes, their flags rendered from the
// fleet's agent.Config: they run the policies of etcd, a client
// reports over a unix socket, /metrics is read, a restarted agent is a new
// incarnation that joins again, and no process is left after Close.
func TestProcessFleet(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skipf("no go command to build fusebox-agent with: %v", err)
	}
	ctx := timeout(t, 5*time.Minute)
	bins, err := Build(ctx, t.TempDir(), raceEnabled, "fusebox-agent")
	if err != nil {
		t.Fatal(err)
	}
	p := sharedstate.DefaultPolicy()
	p.Breaker.MinimumRequests = 7
	f, err := New(ctx, Config{N: 2, Dir: t.TempDir(), Etcd: true, Policy: &p, Binary: bins[0],
		Tune: func(_ int, c *agent.Config) { Quick(c) }})
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	t.Cleanup(func() {
		f.Close()
		for _, pid := range pids {
			if err := syscall.Kill(pid, 0); err == nil {
				t.Errorf("agent process %d still runs after Close", pid)
			}
		}
	})
	if f.Agent(0) != nil || f.Process(0) == nil {
		t.Fatalf("agent-000 in process %v, as a process %v", f.Agent(0), f.Process(0))
	}
	if err := f.Report(ctx, 0, []string{"dep-z"}, 1, 1); err != nil {
		t.Fatal(err)
	}
	d, err := f.Client(1).Check(ctx, &fuseboxv1.CheckRequest{Dependency: "dep-z", Kind: fuseboxv1.AttemptKind_ATTEMPT_KIND_FIRST,
		Service: "fleet-test", Instance: "1"})
	if err != nil || d.GetVerdict() != fuseboxv1.Verdict_VERDICT_ALLOW {
		t.Errorf("Check on agent-001: %v, %v; want allowed", d, err)
	}
	m, err := f.Metrics(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := m.Value("fusebox_agent_policy_source", "source", "etcd"); v != 1 {
		t.Errorf("agent-001 does not run the policies of etcd: fusebox_agent_policy_source{source=\"etcd\"} = %v", v)
	}
	if err := f.Restart(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, inc, _ := f.Process(1).Running(); inc != 1 {
		t.Errorf("agent-001 restarted as incarnation %d, want 1", inc)
	}
	if err := f.WaitMembership(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range f.Size() {
		pid, _, _ := f.Process(i).Running()
		pids = append(pids, pid)
	}
}
