package clientlib

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/fusebox-dev/fusebox/protocol/convert"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// zeroRandom makes every jittered backoff 0 (full jitter draws U[0, c)).
func zeroRandom() uint64 { return 0 }

// newClient starts a client closed at the end of the test.
func newClient(t testing.TB, cfg Config) *Client {
	t.Helper()
	if cfg.Service == "" {
		cfg.Service = "test-svc"
	}
	if cfg.Instance == "" {
		cfg.Instance = "test-1"
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// localClient is a client without an agent whose backoffs are all zero.
func localClient(t testing.TB) *Client {
	return newClient(t, Config{NoAgent: true, Random: zeroRandom})
}

var errUnavailable = status.Error(codes.Unavailable, "try again")

// --- a fake agent: fuseboxv1.AgentServer on a real gRPC server, unix socket ---

type fakeAgent struct {
	fuseboxv1.UnimplementedAgentServer
	t    testing.TB
	path string // its unix socket ("" in memory)
	srv  *grpc.Server
	mem  *bufconn.Listener // in memory: the current listener

	mu         sync.Mutex
	hellos     []*fuseboxv1.Hello
	counts     map[string]sharedstate.Counts
	inFlight   map[string]uint64 // the last in_flight reported per dependency
	probes     []*fuseboxv1.ProbeResult
	subscribed []string
	sessions   map[chan *fuseboxv1.SessionResponse]bool
	snaps      map[string]*fuseboxv1.DecisionSnapshot // pushed at hello too
	retryCalls int
	probeCalls int
	checkCalls int
	onRetry    func(context.Context, *fuseboxv1.AcquireRequest) (*fuseboxv1.Decision, error)
	onProbe    func(context.Context, *fuseboxv1.AcquireRequest) (*fuseboxv1.Decision, error)
	onCheck    func(context.Context, *fuseboxv1.CheckRequest) (*fuseboxv1.Decision, error)
	// welcome is the Welcome's default_snapshot.
	welcome *fuseboxv1.DecisionSnapshot
}

func newFakeAgent(t testing.TB) *fakeAgent {
	f := &fakeAgent{t: t, path: socketPath(t)}
	f.init()
	return f
}

// newMemoryAgent is a fake agent on an in-memory connection, for tests
// in a synctest bubble (a socket's reader would keep its time still):
// call it in the bubble, and connect clients with memoryClient.
func newMemoryAgent(t testing.TB) *fakeAgent {
	f := &fakeAgent{t: t}
	f.init()
	return f
}

func (f *fakeAgent) init() {
	f.counts, f.inFlight = map[string]sharedstate.Counts{}, map[string]uint64{}
	f.sessions, f.snaps = map[chan *fuseboxv1.SessionResponse]bool{}, map[string]*fuseboxv1.DecisionSnapshot{}
	f.start()
	f.t.Cleanup(f.stop)
}

// dial connects to the in-memory agent, as it is now.
func (f *fakeAgent) dial(ctx context.Context, _ string) (net.Conn, error) {
	f.mu.Lock()
	lis := f.mem
	f.mu.Unlock()
	return lis.DialContext(ctx)
}

// memoryClient connects a client to the in-memory agent f, like agentClient.
func memoryClient(t testing.TB, f *fakeAgent, cfg Config) *Client {
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithContextDialer(f.dial))
	return agentClient(t, f, cfg)
}

func socketPath(t testing.TB) string {
	dir := t.TempDir()
	if len(dir) > 90 { // unix socket paths are limited to 108 bytes
		var err error
		if dir, err = os.MkdirTemp("", "fbx"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	return filepath.Join(dir, "agent.sock")
}

// address is what clients dial: the socket, or (in memory) a loopback
// address their dialer ignores.
func (f *fakeAgent) address() string {
	if f.path == "" {
		return "127.0.0.1:1"
	}
	return "unix://" + f.path
}

// start (re)starts the agent on its socket, or on a new in-memory listener.
func (f *fakeAgent) start() {
	var lis net.Listener
	if f.path == "" {
		lis = bufconn.Listen(1 << 20)
	} else {
		var err error
		if lis, err = net.Listen("unix", f.path); err != nil {
			f.t.Fatalf("listen: %v", err)
		}
	}
	srv := grpc.NewServer()
	fuseboxv1.RegisterAgentServer(srv, f)
	f.mu.Lock()
	f.srv = srv
	if b, ok := lis.(*bufconn.Listener); ok {
		f.mem = b
	}
	f.mu.Unlock()
	go srv.Serve(lis)
}

// stop kills the agent: listener and connections close at once.
func (f *fakeAgent) stop() {
	f.mu.Lock()
	srv := f.srv
	f.srv = nil
	f.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
}

func (f *fakeAgent) Session(stream grpc.BidiStreamingServer[fuseboxv1.SessionRequest, fuseboxv1.SessionResponse]) error {
	req, err := stream.Recv()
	if err != nil {
		return err
	}
	hello := req.GetHello()
	if hello == nil {
		return status.Error(codes.InvalidArgument, "hello first")
	}
	out := make(chan *fuseboxv1.SessionResponse, 64)
	f.mu.Lock()
	f.hellos = append(f.hellos, hello)
	welcome := &fuseboxv1.Welcome{Node: "fake-node", DefaultSnapshot: f.welcome}
	var initial []*fuseboxv1.DecisionSnapshot
	for _, d := range hello.GetDependencies() {
		if s := f.snaps[d]; s != nil {
			initial = append(initial, s)
		}
	}
	f.sessions[out] = true
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.sessions, out)
		f.mu.Unlock()
	}()
	if err := stream.Send(&fuseboxv1.SessionResponse{Msg: &fuseboxv1.SessionResponse_Welcome{Welcome: welcome}}); err != nil {
		return err
	}
	if len(initial) > 0 {
		out <- update(initial...)
	}
	recvErr := make(chan error, 1)
	go func() {
		for { // bounded by the session stream, which ends with the client or the fake agent
			req, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			f.record(req.GetDeltas())
		}
	}()
	for {
		select {
		case m := <-out:
			if err := stream.Send(m); err != nil {
				return err
			}
		case <-recvErr:
			return nil
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
}

func update(snaps ...*fuseboxv1.DecisionSnapshot) *fuseboxv1.SessionResponse {
	return &fuseboxv1.SessionResponse{Msg: &fuseboxv1.SessionResponse_Update{
		Update: &fuseboxv1.SnapshotUpdate{Snapshots: snaps}}}
}

func (f *fakeAgent) record(d *fuseboxv1.CountDeltas) {
	if d == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, dc := range d.GetDeltas() {
		f.counts[dc.GetDependency()] = f.counts[dc.GetDependency()].Plus(convert.CountsFromProto(dc.GetCounts()))
		if dc.InFlight != nil {
			f.inFlight[dc.GetDependency()] = dc.GetInFlight()
		}
	}
	f.probes = append(f.probes, d.GetProbeResults()...)
	f.subscribed = append(f.subscribed, d.GetSubscribe()...)
}

// push sends snapshots to every session now, and at every later hello.
func (f *fakeAgent) push(snaps ...*fuseboxv1.DecisionSnapshot) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range snaps {
		f.snaps[s.GetDependency()] = s
	}
	for out := range f.sessions {
		out <- update(snaps...)
	}
}

// agentCounts is what the fake agent summed for one dependency.
type agentCounts = sharedstate.Counts

func (f *fakeAgent) countsOf(dep string) agentCounts {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts[dep]
}

func (f *fakeAgent) helloCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.hellos)
}

func allowDecision() *fuseboxv1.Decision {
	return &fuseboxv1.Decision{Verdict: fuseboxv1.Verdict_VERDICT_ALLOW}
}

func (f *fakeAgent) AcquireRetry(ctx context.Context, r *fuseboxv1.AcquireRequest) (*fuseboxv1.Decision, error) {
	f.mu.Lock()
	f.retryCalls++
	h := f.onRetry
	f.mu.Unlock()
	if h != nil {
		return h(ctx, r)
	}
	return allowDecision(), nil
}

func (f *fakeAgent) AcquireProbe(ctx context.Context, r *fuseboxv1.AcquireRequest) (*fuseboxv1.Decision, error) {
	f.mu.Lock()
	f.probeCalls++
	h := f.onProbe
	f.mu.Unlock()
	if h != nil {
		return h(ctx, r)
	}
	return &fuseboxv1.Decision{Verdict: fuseboxv1.Verdict_VERDICT_ALLOW_PROBE}, nil
}

func (f *fakeAgent) Check(ctx context.Context, r *fuseboxv1.CheckRequest) (*fuseboxv1.Decision, error) {
	f.mu.Lock()
	f.checkCalls++
	h := f.onCheck
	f.mu.Unlock()
	if h != nil {
		return h(ctx, r)
	}
	return allowDecision(), nil
}

func (f *fakeAgent) calls() (retry, probe, check int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.retryCalls, f.probeCalls, f.checkCalls
}

// agentClient connects a client to f, with zero backoffs and fast reconnects.
func agentClient(t testing.TB, f *fakeAgent, cfg Config) *Client {
	cfg.AgentAddress = f.address()
	if cfg.Random == nil {
		cfg.Random = zeroRandom
	}
	if cfg.ReconnectMin == 0 {
		cfg.ReconnectMin = 5 * time.Millisecond
		cfg.ReconnectMax = 20 * time.Millisecond
	}
	c := newClient(t, cfg)
	sstest.Eventually(t, 10*time.Second, "the session with the fake agent", c.AgentConnected)
	return c
}

// pushLimit pushes s (a snapshot of dep) with concurrency limit limit as
// its next version and waits until the client applies it.
func (f *fakeAgent) pushLimit(t testing.TB, dep *Dependency, s *fuseboxv1.DecisionSnapshot, limit uint32) {
	t.Helper()
	s.ConcurrencyLimit = limit
	s.Version++
	f.push(s)
	sstest.Eventually(t, 10*time.Second, fmt.Sprintf("limit %d applied", limit), func() bool { return dep.ConcurrencyLimit() == int64(limit) })
}

// waitInFlight waits until the agent heard in_flight n for dep.
func (f *fakeAgent) waitInFlight(t testing.TB, dep string, n uint64) {
	t.Helper()
	sstest.Eventually(t, 10*time.Second, fmt.Sprintf("in_flight %d at the agent", n), func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		got, ok := f.inFlight[dep]
		return ok && got == n
	})
}

// snapshot is a snapshot of dep as an agent pushes it, under the default
// policy.
func snapshot(dep string, state fuseboxv1.BreakerState) *fuseboxv1.DecisionSnapshot {
	s := &fuseboxv1.DecisionSnapshot{Dependency: dep, State: state, Generation: 7, LocalState: fuseboxv1.BreakerState_BREAKER_STATE_CLOSED}
	return withPolicy(s, func(*sharedstate.Policy) {})
}

// withPolicy returns s with the policy it carries (the default policy when
// none) changed by mutate, as an agent pushes it: one JSON document.
func withPolicy(s *fuseboxv1.DecisionSnapshot, mutate func(p *sharedstate.Policy)) *fuseboxv1.DecisionSnapshot {
	p := sharedstate.DefaultPolicy()
	if s.PolicyJson != nil {
		var err error
		if p, err = sharedstate.ParsePolicy(s.PolicyJson); err != nil {
			panic(err)
		}
	}
	p.Dependency = s.GetDependency()
	mutate(&p)
	s.PolicyJson, _ = json.Marshal(p)
	return s
}
