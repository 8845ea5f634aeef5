package agent

import (
	"bytes"
	"context"
	"encoding/base64"
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
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded/embeddedtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// admin is the writer of the tests' etcd changes.
var admin = store.WriteOptions{Actor: "test"}

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

// startWithEtcd starts an embedded etcd and an agent with cfg on it, and
// waits until the agent synced its policies from etcd; it returns the
// agent and a store of the etcd.
func startWithEtcd(t *testing.T, cfg Config, opts ...Option) (*testAgent, *store.Store) {
	t.Helper()
	srv := embeddedtest.Start(t)
	st, err := store.New(store.Config{Client: embeddedtest.Client(t, srv)})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Etcd = srv.Endpoints()
	a := startAgent(t, cfg, opts...)
	sstest.Eventually(t, 10*time.Second, "the agent synced policies from etcd", func() bool {
		_, _, _, src := a.policies.counts()
		return src == sourceEtcd && a.Ready()
	})
	return a, st
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

// reportSuccesses has a client of a report n successful first attempts
// to dep.
func reportSuccesses(t *testing.T, a *Agent, dep string, n uint32) {
	t.Helper()
	if _, err := dial(t, a).Report(ctxT(t, 5*time.Second), successes(dep, n)); err != nil {
		t.Fatal(err)
	}
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

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// writeKeyring writes a gossip keyring file holding keys, the primary
// first.
func writeKeyring(t *testing.T, keys ...[]byte) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("# test keyring\n")
	for _, k := range keys {
		b.WriteString(base64.StdEncoding.EncodeToString(k) + "\n")
	}
	p := filepath.Join(t.TempDir(), "keyring")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
