package demo

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/coordinator"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded"
)

// The demo fleet: three agents in three zones, one service on each.
var (
	agentNames   = []string{"agent-a", "agent-b", "agent-c"}
	agentZones   = []string{"zone-a", "zone-b", "zone-c"}
	serviceNames = []string{"checkout", "orders", "returns"}
)

// proxiedService is the demo fleet's service that links no clientlib, as
// one in another language: it calls both dependencies through its agent's
// egress proxy. With Config.Agent every service uses clientlib.
const proxiedService = "returns"

// ProxyClients says, one line each, what common HTTP clients need to send
// their calls through an egress proxy (agent/README.md, "The egress
// proxy"); the banner and fusebox-demo -h print it.
var ProxyClients = []string{
	"curl reads only the lower-case http_proxy; Python's requests and urllib read either;",
	"Go's net/http reads either, but never proxies a localhost or 127.0.0.1 upstream: give",
	"its http.Transport Proxy: http.ProxyURL(u); Node's fetch reads neither: pass undici's",
	"new ProxyAgent({uri, proxyTunnel: false}) as its dispatcher (agent/README.md).",
}

// AdminIdentity is the name of the demo's admin token in the coordinator's
// audit log.
const AdminIdentity = "demo-admin"

// startTimeout bounds Start when its context has no earlier deadline.
const startTimeout = 60 * time.Second

// Demo is a running demo fleet. Build it with Start, stop it with Close.
// Its accessors are safe for concurrent use.
type Demo struct {
	cfg    Config
	outMu  sync.Mutex // one writer of Config.Out at a time
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
	coord    *coordinator.Coordinator
	agents   []*agent.Agent
	services []*service
	deps     []*dependency // shipping-api, catalog-api
	ctrs     []*counters   // same order
	sched    schedule

	trafficCancel context.CancelFunc
	trafficWG     sync.WaitGroup // workers
	bgCancel      context.CancelFunc
	bgWG          sync.WaitGroup // watcher, phase reporter
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
	d := &Demo{cfg: cfg, stop: make(chan struct{}), done: make(chan struct{})}
	d.policy = DemoPolicy(cfg.PhaseDuration)
	if cfg.Policy != nil {
		d.policy = *cfg.Policy
	}
	d.policy.Dependency = sharedstate.DefaultPolicyName
	d.token = cmp.Or(cfg.AdminToken, rand.Text())
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
		// The HTTP server first, so that /healthz answers while the
		// clients connect.
		err = d.startHTTP()
	} else {
		err = d.startFleet(ctx)
	}
	if err != nil {
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

// Run runs the demo until ctx is done (main cancels it on SIGINT and
// SIGTERM) or Config.Duration has passed, then closes it and prints the
// summary to Config.Out. Asked to stop while starting, it returns nil.
func Run(ctx context.Context, cfg Config) error {
	d, err := Start(ctx, cfg)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return nil
		}
		return err
	}
	select {
	case <-ctx.Done():
		d.printf("%7.2fs  stopping: %v\n", time.Since(d.sched.start).Seconds(), context.Cause(ctx))
	case <-d.Done():
		d.printf("%7.2fs  stopping: --duration reached\n", time.Since(d.sched.start).Seconds())
	}
	err = d.Close()
	s := d.Summary()
	d.outMu.Lock()
	_, _ = s.WriteTo(d.cfg.Out)
	d.outMu.Unlock()
	return err
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
// coordinator; the embedded etcd; then it removes the
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
			wg.Go(func() { errs[i] = a.Close() })
		}
		wg.Wait()
		if d.coord != nil {
			_ = d.coord.Close()
			errs = append(errs, d.coord.Err())
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

// printf writes one or more whole lines to Config.Out.
func (d *Demo) printf(format string, args ...any) {
	d.outMu.Lock()
	defer d.outMu.Unlock()
	fmt.Fprintf(d.cfg.Out, format, args...)
}
