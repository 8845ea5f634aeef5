package demo

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/coordinator"
	"github.com/fusebox-dev/fusebox/protocol/gossip"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded"
)

// The demo fleet: three agents in three zones, one service on each.
var (
	agentNames   = []string{"agent-a", "agent-b", "agent-c"}
	agentZones   = []string{"zone-a", "zone-b", "zone-c"}
	serviceNames = []string{"checkout", "orders", "returns"}
)

// AdminIdentity is the name of the demo's admin token in the coordinator's
// audit log.
const AdminIdentity = "demo-admin"

// startTimeout bounds Start when its context has no earlier deadline.
const startTimeout = 60 * time.Second

// Demo is a running demo fleet. Build it with Start, stop it with Close.
// Its accessors are safe for concurrent use.
type Demo struct {
	cfg    Config
	out    *syncWriter
	policy sharedstate.Policy
	token  string

	dataDir, tempDir, sockDir string

	// With Config.Agent: the demo's own HTTP server (/healthz, /readyz),
	// and the external agent's node name as its Welcome said.
	http      *http.Server
	httpLn    net.Listener
	httpDone  chan struct{}
	agentNode atomic.Pointer[string]
	started   atomic.Bool // the traffic runs: client state changes are transitions

	etcd     *embedded.Server
	etcdCli  *clientv3.Client
	store    *store.Store
	coord    *coordinator.Coordinator
	agents   []*agent.Agent
	services []*service
	deps     []*dependency // shipping-api, catalog-api
	ctrs     []*counters   // same order
	sched    schedule
	series   *series

	trafficCancel context.CancelFunc
	trafficWG     sync.WaitGroup // workers
	bgCancel      context.CancelFunc
	bgWG          sync.WaitGroup // watcher, sampler, phase reporter
	timerWG       sync.WaitGroup // the Duration timer
	stop          chan struct{}  // closed when Close starts

	mu          sync.Mutex
	transitions []Transition
	marks       []mark // cumulative counts at each phase boundary
	end         time.Time

	finishOnce sync.Once
	done       chan struct{}
	closeOnce  sync.Once
	closeErr   error
}

// mark is the cumulative counts of each dependency when phase number
// phase started.
type mark struct {
	phase  int
	at     time.Time
	counts []Counts
}

// Start starts the demo fleet and its traffic and returns once the
// traffic runs: an embedded etcd (with the demo policy written as the fleet
// default), a coordinator, three agents gossiping on loopback, the two
// dependencies and the three services. With Config.Agent, only the
// dependencies, the services (connected to that agent) and the HTTP
// server of /healthz and /readyz. ctx bounds the start only. On error
// Start stops whatever it started.
func Start(ctx context.Context, cfg Config) (_ *Demo, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	d := &Demo{cfg: cfg, out: &syncWriter{w: cfg.Out}, stop: make(chan struct{}), done: make(chan struct{})}
	d.policy = DemoPolicy(cfg.PhaseDuration)
	if cfg.Policy != nil {
		d.policy = *cfg.Policy
	}
	d.policy.Dependency = sharedstate.DefaultPolicyName
	d.token = cfg.AdminToken
	if d.token == "" {
		d.token = rand.Text()
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, startTimeout)
		defer cancel()
	}
	defer func() {
		if err != nil {
			_ = d.Close()
		}
	}()

	if cfg.Agent != "" {
		return d, d.startExternal(ctx)
	}
	if err := d.makeDirs(); err != nil {
		return nil, err
	}
	if err := d.startEtcd(ctx); err != nil {
		return nil, err
	}
	if err := d.startCoordinator(ctx); err != nil {
		return nil, err
	}
	if err := d.startAgents(ctx); err != nil {
		return nil, err
	}
	if err := d.startServices(ctx); err != nil {
		return nil, err
	}
	if err := d.startDependencies(); err != nil {
		return nil, err
	}
	d.startTraffic()
	return d, nil
}

func (d *Demo) makeDirs() error {
	d.dataDir = d.cfg.DataDir
	if d.dataDir == "" {
		dir, err := os.MkdirTemp("", "fusebox-demo-")
		if err != nil {
			return fmt.Errorf("demo: data dir: %w", err)
		}
		d.tempDir, d.dataDir = dir, dir
	} else if err := os.MkdirAll(d.dataDir, 0o750); err != nil {
		return fmt.Errorf("demo: data dir: %w", err)
	}
	// Unix socket paths are limited to about 104 bytes: keep them short.
	dir, err := os.MkdirTemp("", "fbdemo")
	if err != nil {
		return fmt.Errorf("demo: socket dir: %w", err)
	}
	d.sockDir = dir
	return nil
}

// startEtcd starts the embedded etcd and writes the demo policy as the
// fleet default, before any agent starts: agents begin with it.
func (d *Demo) startEtcd(ctx context.Context) error {
	ec := embedded.DefaultConfig()
	ec.Dir = filepath.Join(d.dataDir, "etcd")
	ec.TickMs, ec.ElectionMs = 10, 100 // a single member: elect at once
	ec.LogLevel = "fatal"              // etcd logs stack traces at error level on a normal Close
	ec.UnsafeNoFsync = d.tempDir != ""
	srv, err := embedded.Start(ctx, ec)
	if err != nil {
		return fmt.Errorf("demo: embedded etcd: %w", err)
	}
	d.etcd = srv
	if d.etcdCli, err = srv.NewClient(); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if d.store, err = store.New(store.Config{Client: d.etcdCli}); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if _, err := d.store.PutPolicyPatch(ctx, sharedstate.DefaultPolicyName, d.policy.Patch(),
		store.WriteOptions{Actor: "fusebox-demo"}); err != nil {
		return fmt.Errorf("demo: write the demo policy: %w", err)
	}
	return nil
}

func (d *Demo) startCoordinator(ctx context.Context) error {
	tokens := filepath.Join(d.dataDir, "tokens")
	if err := os.WriteFile(tokens, []byte("admin "+d.token+" "+AdminIdentity+"\n"), 0o600); err != nil {
		return fmt.Errorf("demo: tokens file: %w", err)
	}
	cc := coordinator.DefaultConfig()
	cc.Name = "coordinator"
	cc.Etcd = d.etcd.Endpoints()
	cc.GRPCAddr = d.cfg.GRPCAddr
	cc.HTTPAddr = d.cfg.HTTPAddr
	cc.GossipAddr = "127.0.0.1:0"
	cc.TokensFile = tokens
	cc.ShutdownTimeout = 3 * time.Second
	c, err := coordinator.New(cc,
		coordinator.WithLogger(d.cfg.Logger.With("component", "coordinator")),
		coordinator.WithGossip(func(g *gossip.Config) {
			g.GossipInterval = 100 * time.Millisecond
			g.ProbeInterval = 500 * time.Millisecond
			g.PushPullInterval = 5 * time.Second
		}),
		// Derive half-open states and keep history often enough for a
		// dashboard watching breakers that change within seconds.
		coordinator.WithTickInterval(250*time.Millisecond, time.Second),
	)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	d.coord = c
	if err := c.Start(ctx); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	return nil
}

func (d *Demo) startAgents(ctx context.Context) error {
	join := []string{d.coord.GossipAddr()}
	for i, name := range agentNames {
		ac := agent.DefaultConfig()
		ac.Name = name
		ac.Zone = agentZones[i]
		ac.DataDir = filepath.Join(d.dataDir, "agents", name)
		ac.GossipAddr = "127.0.0.1:0"
		ac.Socket = filepath.Join(d.sockDir, name+".sock")
		ac.HTTPAddr = "127.0.0.1:0"
		ac.Etcd = d.etcd.Endpoints()
		ac.Join = append([]string(nil), join...)
		ac.GossipInterval = 100 * time.Millisecond
		ac.ProbeInterval = 500 * time.Millisecond
		ac.PushPullInterval = 5 * time.Second
		ac.ShutdownTimeout = 3 * time.Second
		ac.MemberTTL = 5 * time.Second
		a, err := agent.New(ac,
			agent.WithLogger(d.cfg.Logger.With("component", "agent")),
			agent.WithDefaultPolicy(d.policy))
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		d.agents = append(d.agents, a)
		if err := a.Start(ctx); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		join = append(join, a.GossipAddr())
	}
	return waitFor(ctx, "the agents to see each other and load the policies", func() bool {
		for _, a := range d.agents {
			if !a.Ready() || a.Gossip().NumAgents() != len(d.agents) {
				return false
			}
		}
		return true
	})
}

func (d *Demo) startServices(ctx context.Context) error {
	for i, name := range serviceNames {
		s, err := newService(name, d.agents[i].Name(), "unix://"+d.agents[i].SocketPath(), nil, nil)
		if err != nil {
			return err
		}
		d.services = append(d.services, s)
	}
	return waitFor(ctx, "the services to get their agents' snapshots", func() bool {
		for _, s := range d.services {
			if !s.ready() {
				return false
			}
		}
		return true
	})
}

// startDependencies fixes the start of the first phase and starts the two
// dependencies on 127.0.0.1.
func (d *Demo) startDependencies() error {
	d.sched = schedule{start: time.Now(), length: d.cfg.PhaseDuration}
	for _, name := range []string{ShippingAPI, CatalogAPI} {
		dep, err := startDependency(name, d.sched, name == ShippingAPI)
		if err != nil {
			return err
		}
		d.deps = append(d.deps, dep)
		d.ctrs = append(d.ctrs, &counters{})
	}
	return nil
}

// startTraffic prints the banner and starts the workers and the
// background loops (watcher, sampler, phase reporter).
func (d *Demo) startTraffic() {
	d.printBanner()
	names := make([]string, len(d.deps))
	for i, dep := range d.deps {
		names[i] = dep.name
	}
	d.series = newSeries(names, d.ctrs)
	d.marks = []mark{{phase: 0, at: d.sched.start, counts: make([]Counts, len(d.deps))}}

	bgCtx, bgCancel := context.WithCancel(context.Background())
	d.bgCancel = bgCancel
	if len(d.agents) > 0 {
		w := newWatcher(d.agents, d.sched, d.recordTransition)
		d.goBackground(func() { d.every(bgCtx, d.cfg.PollInterval, w.poll) })
	}
	d.started.Store(true)
	d.goBackground(func() { d.every(bgCtx, sampleInterval, d.series.record) })
	d.goBackground(func() { d.reportPhases(bgCtx) })

	trafficCtx, trafficCancel := context.WithCancel(context.Background())
	d.trafficCancel = trafficCancel
	for _, s := range d.services {
		for i, dep := range d.deps {
			rate := d.cfg.Rate
			if dep.name == CatalogAPI {
				rate = d.cfg.CatalogRate
			}
			workers, interval := pace(rate)
			handle := s.client.Dependency(dep.name)
			for range workers {
				d.trafficWG.Add(1)
				go s.worker(trafficCtx, &d.trafficWG, handle, dep.URL(), interval, d.ctrs[i])
			}
		}
	}
	if d.cfg.Duration > 0 {
		d.timerWG.Add(1)
		go func() {
			defer d.timerWG.Done()
			t := time.NewTimer(time.Until(d.sched.start.Add(d.cfg.Duration)))
			defer t.Stop()
			select {
			case <-t.C:
				d.finish()
			case <-d.stop:
			}
		}()
	}
}

func (d *Demo) goBackground(fn func()) {
	d.bgWG.Add(1)
	go func() {
		defer d.bgWG.Done()
		fn()
	}()
}

// every calls fn(now) every interval until ctx is done.
func (d *Demo) every(ctx context.Context, interval time.Duration, fn func(time.Time)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	fn(time.Now())
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			fn(now)
		}
	}
}

// reportPhases logs each phase as it starts and the traffic of the one
// that ended, and marks the counters at the boundary.
func (d *Demo) reportPhases(ctx context.Context) {
	d.printf("%7.2fs  phase %-10s  %s %s\n", 0.0, Healthy, ShippingAPI, Healthy.describe())
	for k := 1; ; k++ {
		at, _ := d.sched.bounds(k)
		if !sleep(ctx, time.Until(at)) {
			return
		}
		d.markPhase(k, at)
		p := Phase(k % int(numPhases))
		d.printf("%7.2fs  phase %-10s  %s %s\n", at.Sub(d.sched.start).Seconds(), p, ShippingAPI, p.describe())
	}
}

// markPhase records the counters at the start of phase k and logs the
// traffic of phase k-1.
func (d *Demo) markPhase(k int, at time.Time) {
	m := mark{phase: k, at: at, counts: make([]Counts, len(d.ctrs))}
	for i, c := range d.ctrs {
		m.counts[i] = c.load()
	}
	d.mu.Lock()
	prev := d.marks[len(d.marks)-1]
	d.marks = append(d.marks, m)
	d.mu.Unlock()
	for i, dep := range d.deps {
		c := m.counts[i].Minus(prev.counts[i])
		d.printf("%7.2fs  traffic %-8s %s\n", at.Sub(d.sched.start).Seconds(), Phase((k-1)%int(numPhases)).String()+":",
			formatCounts(dep.name, c))
	}
}

func (d *Demo) recordTransition(t Transition) {
	d.mu.Lock()
	d.transitions = append(d.transitions, t)
	d.mu.Unlock()
	d.printf("%s\n", t)
}

// finish stops the traffic and the background loops, once, and closes
// Done. The fleet keeps running until Close.
func (d *Demo) finish() {
	d.finishOnce.Do(func() {
		if d.trafficCancel != nil {
			d.trafficCancel()
			d.trafficWG.Wait()
		}
		if d.bgCancel != nil {
			d.bgCancel()
			d.bgWG.Wait()
		}
		d.mu.Lock()
		d.end = time.Now()
		d.mu.Unlock()
		close(d.done)
	})
}

// Close stops the demo and waits for everything it started, in this order:
// the traffic and the background loops; the services' clients; the
// dependencies; the agents (together: each leaves the gossip); the
// coordinator; the etcd client and the embedded etcd; then it removes the
// temporary directories. It is idempotent and returns the first error an
// agent or the coordinator reported.
func (d *Demo) Close() error {
	d.closeOnce.Do(func() {
		close(d.stop)
		d.finish()
		d.timerWG.Wait()
		for _, s := range d.services {
			s.close()
		}
		for _, dep := range d.deps {
			dep.close()
		}
		d.closeHTTP()
		errs := make([]error, len(d.agents))
		var wg sync.WaitGroup
		for i, a := range d.agents {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = a.Close()
			}()
		}
		wg.Wait()
		if d.coord != nil {
			_ = d.coord.Close()
			errs = append(errs, d.coord.Err())
		}
		if d.etcdCli != nil {
			_ = d.etcdCli.Close()
		}
		if d.etcd != nil {
			d.etcd.Close()
		}
		if d.sockDir != "" {
			_ = os.RemoveAll(d.sockDir)
		}
		if d.tempDir != "" {
			_ = os.RemoveAll(d.tempDir)
		}
		d.closeErr = errors.Join(errs...)
	})
	return d.closeErr
}

// Done is closed when the demo's Duration has passed (or Close was called)
// and its traffic has stopped; Summary is final from then on.
func (d *Demo) Done() <-chan struct{} { return d.done }

// Wait waits until Done or ctx is done, and returns the summary so far.
func (d *Demo) Wait(ctx context.Context) (Summary, error) {
	select {
	case <-d.done:
		return d.Summary(), nil
	case <-ctx.Done():
		return d.Summary(), ctx.Err()
	}
}

// HTTPAddr returns the coordinator's HTTP address (dashboard, /api/v1,
// /metrics), host:port; with Config.Agent, the address of the demo's
// /healthz and /readyz.
func (d *Demo) HTTPAddr() string {
	if d.coord == nil {
		return d.httpLn.Addr().String()
	}
	return d.coord.HTTPAddr()
}

// DashboardURL returns the dashboard's URL ("" with Config.Agent: no
// coordinator).
func (d *Demo) DashboardURL() string {
	if d.coord == nil {
		return ""
	}
	return "http://" + d.coord.HTTPAddr() + "/"
}

// GRPCAddr returns the coordinator's Admin API address, host:port: what
// fuseboxctl's --coordinator takes ("" with Config.Agent).
func (d *Demo) GRPCAddr() string {
	if d.coord == nil {
		return ""
	}
	return d.coord.GRPCAddr()
}

// AdminToken returns the bearer token of the demo's admin identity ("" with
// Config.Agent).
func (d *Demo) AdminToken() string { return d.token }

// Coordinator returns the demo's coordinator (nil with Config.Agent).
func (d *Demo) Coordinator() *coordinator.Coordinator { return d.coord }

// Agents returns the demo's agents: agent-a, agent-b, agent-c, in zones
// zone-a, zone-b, zone-c, serving services checkout, orders and returns
// (none with Config.Agent).
func (d *Demo) Agents() []*agent.Agent { return append([]*agent.Agent(nil), d.agents...) }

// EtcdEndpoints returns the embedded etcd's client URLs (none with
// Config.Agent).
func (d *Demo) EtcdEndpoints() []string {
	if d.etcd == nil {
		return nil
	}
	return d.etcd.Endpoints()
}

// Store returns a store on the demo's etcd (nil with Config.Agent).
func (d *Demo) Store() *store.Store { return d.store }

// Policy returns the fleet default policy the demo wrote (with
// Config.Agent, the one it would have written: the agent's apply).
func (d *Demo) Policy() sharedstate.Policy { return d.policy }

// Phase returns the window of one phase of one cycle (cycle 0 is the
// first).
func (d *Demo) Phase(cycle int, p Phase) PhaseWindow { return d.sched.window(cycle, p) }

// PhaseAt returns the phase running at t.
func (d *Demo) PhaseAt(t time.Time) Phase { return d.sched.at(t) }

// CountsBetween returns what the services did with dep in (from, to], to
// the resolution of the counters' samples (100ms, kept for 5 to 10
// minutes).
func (d *Demo) CountsBetween(dep string, from, to time.Time) Counts {
	c, _ := d.series.between(dep, from, to)
	return c
}

// Probes returns the half-open probes dep served, overall.
func (d *Demo) Probes(dep string) ProbeStats {
	for _, x := range d.deps {
		if x.name == dep {
			return x.probeStats()
		}
	}
	return ProbeStats{}
}

// ProbesIn returns the half-open probes dep served during one phase.
func (d *Demo) ProbesIn(dep string, cycle int, p Phase) ProbeStats {
	for _, x := range d.deps {
		if x.name == dep {
			return x.probeStatsIn(cycle*int(numPhases) + int(p))
		}
	}
	return ProbeStats{}
}

// AgentFallbacks returns how many times the services' clients decided
// locally because their agent did not answer a synchronous question
// (retry, probe, check) within the client's AgentWait.
func (d *Demo) AgentFallbacks() map[string]uint64 {
	out := map[string]uint64{}
	for _, s := range d.services {
		for call, n := range s.fallbacks() {
			out[call] += n
		}
	}
	return out
}

// waitFor polls cond every 20ms until it holds or ctx ends.
func waitFor(ctx context.Context, what string, cond func() bool) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("demo: waiting for %s: %w", what, ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// printf writes one or more whole lines to Config.Out.
func (d *Demo) printf(format string, args ...any) {
	d.out.printf(format, args...)
}

// syncWriter serializes the demo's lines.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) printf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.w, format, args...)
}
