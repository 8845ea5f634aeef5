package agent

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded/embeddedtest"
)

func TestMain(m *testing.M) {
	switch os.Getenv("FUSEBOX_AGENT_TEST_HELPER") {
	case "":
	case "fetch":
		os.Exit(fetchHelper())
	default:
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// testPolicy is the fleet default of the integration tests: a 2 s window,
// 10 requests, failures from 2 nodes, 1 s open.
func testPolicy() sharedstate.Policy {
	p := sharedstate.DefaultPolicy()
	p.Breaker.Window = sharedstate.Duration(2 * time.Second)
	p.Breaker.MinimumRequests = 10
	p.Breaker.MinFailingNodes = 2
	p.Breaker.OpenDuration = sharedstate.Duration(time.Second)
	p.Breaker.MaxOpenDuration = sharedstate.Duration(4 * time.Second)
	p.Breaker.ProbeTimeout = sharedstate.Duration(time.Second)
	p.Retry.PerAttemptTimeout = sharedstate.Duration(100 * time.Millisecond)
	return p
}

// shortTempDir returns a short directory (unix socket paths are limited to
// 104 bytes), removed at cleanup.
func shortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// testConfig returns a config for an agent named name in this test process:
// loopback, port 0 everywhere, short intervals.
func testConfig(t testing.TB, name string) Config {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Name = name
	cfg.Zone = "z1"
	cfg.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.GossipAddr = "127.0.0.1:0"
	cfg.Socket = filepath.Join(shortTempDir(t), "agent.sock")
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.GossipInterval = 50 * time.Millisecond
	cfg.PushPullInterval = 1 * time.Second
	cfg.ProbeInterval = 200 * time.Millisecond
	cfg.TickInterval = 50 * time.Millisecond
	cfg.ShutdownTimeout = 3 * time.Second
	cfg.MemberTTL = 2 * time.Second
	cfg.KeyringReloadInterval = 50 * time.Millisecond
	cfg.LogLevel = "debug"
	return cfg
}

// logBuffer collects an agent's log for assertions (and for failing tests).
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// testAgent is an agent under test with its log.
type testAgent struct {
	*Agent
	log *logBuffer
}

// startAgent builds and starts an agent; it is closed at cleanup, and its
// log is printed if the test failed.
func startAgent(t testing.TB, cfg Config, opts ...Option) *testAgent {
	t.Helper()
	ta := newAgent(t, cfg, opts...)
	if err := ta.Start(context.Background()); err != nil {
		t.Fatalf("Start(%s): %v", cfg.Name, err)
	}
	return ta
}

func newAgent(t testing.TB, cfg Config, opts ...Option) *testAgent {
	t.Helper()
	lb := &logBuffer{}
	var w io.Writer = lb
	lg := slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
	opts = append([]Option{WithLogger(lg), WithDefaultPolicy(testPolicy())}, opts...)
	a, err := New(cfg, opts...)
	if err != nil {
		t.Fatalf("New(%s): %v", cfg.Name, err)
	}
	ta := &testAgent{Agent: a, log: lb}
	t.Cleanup(func() {
		a.Close()
		if t.Failed() && testing.Verbose() {
			t.Logf("log of %s:\n%s", cfg.Name, lb.String())
		}
	})
	return ta
}

// fleet is a set of agents, optionally with an embedded etcd.
type fleet struct {
	t      testing.TB
	etcd   *embedded.Server
	cli    *clientv3.Client
	store  *store.Store
	agents []*testAgent
	change func(*Config)
}

// newFleet starts an embedded etcd (if withEtcd) and n agents. With etcd
// the agents find each other through the members/ registry only; without,
// agents 1..n-1 --join agent 0.
func newFleet(t testing.TB, n int, withEtcd bool) *fleet {
	t.Helper()
	return newFleetWith(t, n, withEtcd, nil)
}

// newFleetWith is newFleet with a change to every agent's config.
func newFleetWith(t testing.TB, n int, withEtcd bool, change func(*Config)) *fleet {
	t.Helper()
	f := &fleet{t: t, change: change}
	if withEtcd {
		f.etcd = embeddedtest.Start(t)
		cli, err := f.etcd.NewClient()
		if err != nil {
			t.Fatal(err)
		}
		f.cli = cli
		t.Cleanup(func() { cli.Close() })
		if f.store, err = store.New(store.Config{Client: cli}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		f.add(fmt.Sprintf("agent-%d", i))
	}
	f.waitMembers(n)
	return f
}

func (f *fleet) config(name string) Config {
	cfg := testConfig(f.t, name)
	if f.etcd != nil {
		cfg.Etcd = f.etcd.Endpoints()
	} else if len(f.agents) > 0 {
		cfg.Join = []string{f.agents[0].GossipAddr()}
	}
	if f.change != nil {
		f.change(&cfg)
	}
	return cfg
}

func (f *fleet) add(name string, opts ...Option) *testAgent {
	a := startAgent(f.t, f.config(name), opts...)
	f.agents = append(f.agents, a)
	return a
}

// waitMembers waits until every running agent sees n agents.
func (f *fleet) waitMembers(n int) {
	f.t.Helper()
	sstest.Eventually(f.t, 10*time.Second, fmt.Sprintf("every agent sees %d agents", n), func() bool {
		for _, a := range f.agents {
			if a.closing.Load() {
				continue
			}
			if a.gossip.NumAgents() != n {
				return false
			}
		}
		return true
	})
}

// dial connects to an agent's unix socket.
func dial(t testing.TB, a *Agent) fuseboxv1.AgentClient {
	t.Helper()
	return dialSock(t, a.SocketPath())
}

// dialSock connects to the agent listening on a unix socket path.
func dialSock(t testing.TB, path string) fuseboxv1.AgentClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return fuseboxv1.NewAgentClient(conn)
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func check(t testing.TB, c fuseboxv1.AgentClient, dep string) *fuseboxv1.Decision {
	t.Helper()
	d, err := c.Check(ctxT(t, 5*time.Second), &fuseboxv1.CheckRequest{Dependency: dep, Kind: fuseboxv1.AttemptKind_ATTEMPT_KIND_FIRST})
	if err != nil {
		t.Fatalf("Check(%s): %v", dep, err)
	}
	return d
}

func failures(dep string, n uint32) *fuseboxv1.ReportRequest {
	return &fuseboxv1.ReportRequest{Outcomes: []*fuseboxv1.OutcomeReport{{
		Dependency: dep, Kind: fuseboxv1.AttemptKind_ATTEMPT_KIND_FIRST,
		Outcome: fuseboxv1.Outcome_OUTCOME_FAILURE, Count: n}}}
}

func successes(dep string, n uint32) *fuseboxv1.ReportRequest {
	r := failures(dep, n)
	r.Outcomes[0].Outcome = fuseboxv1.Outcome_OUTCOME_SUCCESS
	return r
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// value reads the value of a single-series counter or gauge.
func value(t testing.TB, c prometheus.Collector) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	close(ch)
	var m dto.Metric
	for pm := range ch {
		if err := pm.Write(&m); err != nil {
			t.Fatal(err)
		}
	}
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return 0
}

func dialConn(t testing.TB, a *Agent) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+a.SocketPath(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
