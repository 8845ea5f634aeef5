// Package fleettest starts the lab's fleets from tests: fleet.New under a
// deadline, closed when the test ends, every in-process agent's log kept
// (Log) and printed when the test failed; and the few calls every
// multi-agent test makes (a decision, a metric, a connection).
//
//	func TestMain(m *testing.M) { fleettest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		f := fleettest.Start(t, fleet.Config{N: 3, Etcd: true,
//			Tune: func(_ int, c *agent.Config) { fleet.Quick(c) }})
//		d := fleettest.Check(t, f.Client(0), "payments")
//		…
//	}
package fleettest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/lab/fleet"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// StartTimeout bounds Start: generous, for 20 agents under -race on a
// loaded 2-core machine.
const StartTimeout = 2 * time.Minute

// Fleet is a fleet.Fleet started for a test, with its agents' logs.
type Fleet struct {
	*fleet.Fleet
	mu   sync.Mutex
	logs map[int][]*sstest.Buffer // agent -> each start's log, the last one running
}

// Start starts cfg's fleet for t (cfg.Dir defaults to t.TempDir()) and
// closes it when t ends. Unless cfg.Logger is set, every in-process
// agent logs at debug level into a buffer of its own (Log), printed when
// t failed. A fleet that does not start fails t.
func Start(t testing.TB, cfg fleet.Config) *Fleet {
	t.Helper()
	f := &Fleet{logs: map[int][]*sstest.Buffer{}}
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	if cfg.Logger == nil {
		cfg.Logger = f.logger
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	ff, err := fleet.New(ctx, cfg)
	if err != nil {
		f.dump(t)
		t.Fatal(err)
	}
	f.Fleet = ff
	t.Cleanup(func() {
		ff.Close()
		if t.Failed() {
			f.dump(t)
		}
	})
	return f
}

// logger is the default Config.Logger: a new buffer for each start of
// agent i.
func (f *Fleet) logger(i int) *slog.Logger {
	b := &sstest.Buffer{}
	f.mu.Lock()
	f.logs[i] = append(f.logs[i], b)
	f.mu.Unlock()
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// Log returns what in-process agent i logged since it last started (""
// with a Config.Logger of the caller's).
func (f *Fleet) Log(i int) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if bs := f.logs[i]; len(bs) > 0 {
		return bs[len(bs)-1].String()
	}
	return ""
}

// dump prints every agent's logs, and the processes' log files.
func (f *Fleet) dump(t testing.TB) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range len(f.logs) + 1 {
		for n, b := range f.logs[i] {
			t.Logf("log of %s (start %d):\n%s", fleet.Name(i), n+1, b.String())
		}
	}
	if f.Fleet == nil {
		return
	}
	for i := range f.Size() {
		if p := f.Process(i); p != nil {
			b, _ := os.ReadFile(p.LogPath())
			t.Logf("log of %s:\n%s", fleet.Name(i), b)
		}
	}
}

// Metric returns the value of agent i's series name{labels} (label name,
// value pairs; the first series that has them), 0 when it has none.
func (f *Fleet) Metric(t testing.TB, i int, name string, labels ...string) float64 {
	t.Helper()
	m, err := f.Metrics(context.Background(), i)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := m.Value(name, labels...)
	return v
}

// Main runs the package's tests (m.Run) and exits; when they passed, it
// first waits until no goroutine of theirs is left (goleak), up to 30 s:
// memberlist's probes of a closed agent end by their own timers.
func Main(m *testing.M) {
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := goleak.Find()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				fmt.Fprintln(os.Stderr, "goleak:", err)
				code = 1
				break
			}
			time.Sleep(100 * time.Millisecond) // goleak's own retries are short; this bounds the wait
		}
	}
	os.Exit(code)
}

// Ctx returns a context that ends after d or when t ends.
func Ctx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Check asks c for a first attempt to dep; an error fails t.
func Check(t testing.TB, c fuseboxv1.AgentClient, dep string) *fuseboxv1.Decision {
	t.Helper()
	d, err := c.Check(Ctx(t, 5*time.Second), &fuseboxv1.CheckRequest{Dependency: dep, Kind: fuseboxv1.AttemptKind_ATTEMPT_KIND_FIRST})
	if err != nil {
		t.Fatalf("Check(%s): %v", dep, err)
	}
	return d
}

// Report has c report successes and failures first attempts to dep; an
// error, or a refusal, fails t.
func Report(t testing.TB, c fuseboxv1.AgentClient, dep string, successes, failures uint32) {
	t.Helper()
	resp, err := c.Report(Ctx(t, 10*time.Second), fleet.FirstAttempts([]string{dep}, successes, failures))
	if err != nil {
		t.Fatalf("Report(%s): %v", dep, err)
	}
	if len(resp.GetErrors()) > 0 {
		t.Fatalf("Report(%s) refused: %s", dep, resp.GetErrors()[0].GetMessage())
	}
}

// Dial connects to the gRPC server on the unix socket path (an agent's
// local API, its health and reflection services); closed when t ends.
func Dial(t testing.TB, path string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// Policy is the fleet default of the multi-agent tests: a 2 s window, 10
// requests, failures from 2 nodes, 1 s open.
func Policy() sharedstate.Policy {
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

// Own gives every in-process agent these options (Config.Options), e.g.
// agent.WithDefaultPolicy(Policy()): the agents' own default, which etcd's
// _default overrides and a wiped etcd gives back.
func Own(opts ...agent.Option) func(int) []agent.Option {
	return func(int) []agent.Option { return opts }
}
