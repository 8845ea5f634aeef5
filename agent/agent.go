package agent

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/fusebox-dev/fusebox/agent/internal/agentopt"
	"github.com/fusebox-dev/fusebox/agent/proxy"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/protocol/gossip"
	"github.com/fusebox-dev/fusebox/protocol/serverlimits"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/cliflag"
	"github.com/fusebox-dev/fusebox/sharedstate/logging"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

// Version is the agent's software version, published in its gossip
// metadata, its etcd registration and the Welcome of every session. A
// variable so that builds stamp it: go build -ldflags "-X
// github.com/fusebox-dev/fusebox/agent.Version=v1.2.3" (the container image
// does, deploy/docker/Dockerfile).
var Version = "0.2.0-dev"

// KeyFileName is the file in Config.DataDir that holds the agent's gossip
// signing key (created at first start, mode 0600; gossip.LoadOrCreateKey).
// Keep it with the data directory: the fleet knows the agent by it, and the
// records the agent proposed verify only with it.
const KeyFileName = "gossip-ed25519.key"

// ShutdownMessage is the message of the codes.Unavailable status with which
// the agent ends open Session streams when it shuts down. clientlib treats
// Unavailable as "agent away": it falls back to its local breaker and
// reconnects with backoff.
const ShutdownMessage = "fusebox: agent shutting down"

// ErrClosed is returned by Start after Close.
var ErrClosed = errors.New("agent: closed")

// Option configures the optional knobs of New. It is a function over
// agentopt.Options, which only package agent and the lab (agent/lab) can
// import: the lab's simulation hooks are set that way, not through this
// package's API.
type Option func(*agentopt.Options)

// WithClock sets the engine's clock (default sharedstate.SystemClock).
func WithClock(c sharedstate.Clock) Option { return func(o *agentopt.Options) { o.Clock = c } }

// WithLogger sets the logger (default: logging.New(cfg.LogFormat, cfg.LogLevel, os.Stderr)).
func WithLogger(l *slog.Logger) Option { return func(o *agentopt.Options) { o.Logger = l } }

// WithRegisterer also registers the agent's collectors on r (for example a
// process-wide registry); /metrics always serves the agent's own registry.
func WithRegisterer(r prometheus.Registerer) Option {
	return func(o *agentopt.Options) { o.Registerer = r }
}

// WithDefaultPolicy sets the fleet default used until etcd (or the cache)
// provides policies/_default (default sharedstate.DefaultPolicy()). Tests
// use it for short windows.
func WithDefaultPolicy(p sharedstate.Policy) Option {
	return func(o *agentopt.Options) { o.DefaultPolicy = &p }
}

// WithEtcdClient makes the agent use c instead of dialing Config.Etcd; the
// agent does not close it.
func WithEtcdClient(c *store.Client) Option { return func(o *agentopt.Options) { o.EtcdClient = c } }

// WithProxyListener makes the egress proxy serve ln, a listening socket
// handed to the process (systemd's socket activation: Run takes it from
// the environment), instead of binding Config.Proxy.Addr, which must name
// ln's address. The agent closes its ln when it stops; a copy held
// elsewhere keeps the socket listening for the next agent.
func WithProxyListener(ln net.Listener) Option {
	return func(o *agentopt.Options) { o.ProxyListener = ln }
}

// Agent is one running fusebox-agent. Build it with New, run it with
// Start, stop it with Close.
type Agent struct {
	cfg   Config
	opts  agentopt.Options
	lg    *slog.Logger
	clock sharedstate.Clock

	eng     *sharedstate.Engine
	gossip  *gossip.Gossip
	gsp     atomic.Pointer[gossip.Gossip] // gossip, for the handler (memberlist may call it before New returns)
	keyring *memberlist.Keyring           // nil without encryption
	signer  ed25519.PrivateKey            // signs this agent's rows and records
	keys    *gossip.KeyDirectory          // the etcd member entries' keys; nil without etcd
	reg     *prometheus.Registry
	m       *metrics
	hub     *hub
	// confirmed are the dependencies whose rows and own records go out
	// (confirm.go).
	confirmed *confirmations

	grpcSrv *grpc.Server
	health  *health.Server
	sockLn  net.Listener
	tcpLn   net.Listener
	httpSrv *http.Server
	httpLn  net.Listener
	proxy   *proxy.Proxy // the egress proxy; nil when off

	egressOutcomes prometheus.Counter // outcomes_total{source="proxy"}

	etcd     *store.Client
	ownEtcd  bool
	etcdOnce sync.Once
	store    *store.Store
	watcher  atomic.Pointer[store.Watcher] // set once watchLoop runs
	regKick  chan struct{}                 // etcdSync changed: update the registration

	policies policyState

	sessionBytes atomic.Int64 // dependency state all sessions hold (--max-sessions-bytes)
	reportRate   reportRates  // Report's rate buckets, per dependency

	ctx      context.Context // canceled by Close
	cancel   context.CancelFunc
	shutdown chan struct{} // closed when sessions must end
	wg       sync.WaitGroup

	started   atomic.Bool
	closing   atomic.Bool
	closeOnce sync.Once
	done      chan struct{}
	errMu     sync.Mutex
	err       error

	joined         atomic.Bool // gossip has at least one other member, or was joined once
	joinFailing    atomic.Bool // the last join attempt reached none of the known peers
	missingPeers   atomic.Bool // the last rejoin round found registered agents memberlist does not list as alive
	healing        atomic.Bool // the last rejoin round reached one of them (joinLoop)
	policiesLoaded atomic.Bool
	kill           atomic.Bool // Close without leaving (agentopt.Inside.Crash)
}

// New validates cfg, creates the data directory, loads the keyring and the
// policy cache, builds the engine and binds every listener (gossip, unix
// socket, loopback TCP, HTTP), so that the accessors report real addresses
// even for port 0. memberlist starts answering at once; nothing joins,
// serves or watches until Start. On error New releases what it took.
func New(cfg Config, opts ...Option) (_ *Agent, err error) {
	a := &Agent{cfg: cfg, shutdown: make(chan struct{}), done: make(chan struct{}), regKick: make(chan struct{}, 1)}
	for _, o := range opts {
		o(&a.opts)
	}
	if err := cfg.validate(a.opts.Sim.InProcessAPI); err != nil {
		return nil, err
	}
	a.lg = a.opts.Logger
	if a.lg == nil {
		a.lg = logging.New(cfg.LogFormat, cfg.LogLevel, os.Stderr)
	}
	a.lg = a.lg.With("node", cfg.Name)
	a.clock = a.opts.Clock
	if a.clock == nil {
		a.clock = sharedstate.SystemClock{}
	}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			a.release()
		}
	}()

	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return nil, fmt.Errorf("agent: data dir: %w", err)
	}
	if cfg.KeyringFile != "" {
		if a.keyring, err = gossip.LoadKeyringFile(cfg.KeyringFile); err != nil {
			return nil, err
		}
	}
	if a.signer, err = gossip.LoadOrCreateKey(filepath.Join(cfg.DataDir, KeyFileName)); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}

	a.hub = newHub()
	a.confirmed = newConfirmations(cfg.Proxy.Routes, cfg.MaxDependencies)
	ec := sharedstate.EngineConfig{
		Node: cfg.Name, Zone: cfg.Zone, Clock: a.clock, MaxDependencies: cfg.MaxDependencies,
		MaxRowsPerNode: cfg.MaxRowsPerNode, MaxZones: cfg.MaxZones, Proposers: cfg.Proposers, ProposerDelay: cfg.ProposerDelay,
		IdleRetention: cfg.IdleRetention,
		DefaultPolicy: a.opts.DefaultPolicy, OnChange: a.onChange,
	}
	if a.eng, err = sharedstate.NewEngine(ec); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	a.reg = prometheus.NewRegistry()
	// The Go runtime's and the process's standard series (go_goroutines,
	// process_resident_memory_bytes, process_open_fds, …) on /metrics too.
	for _, c := range []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := a.reg.Register(c); err != nil {
			return nil, fmt.Errorf("agent: metrics: %w", err)
		}
	}
	a.m = newMetrics(a)
	if err := a.m.register(a.reg); err != nil {
		return nil, err
	}
	if a.opts.Registerer != nil {
		if err := a.m.register(a.opts.Registerer); err != nil {
			return nil, err
		}
	}
	a.policies.init(a.opts.DefaultPolicy)
	a.loadCache()

	// Local API listeners first: their addresses go into the gossip metadata.
	if cfg.Socket != "" {
		if a.sockLn, err = listenUnix(cfg.Socket); err != nil {
			return nil, err
		}
	}
	if cfg.GRPCAddr != "" {
		if a.tcpLn, err = cliflag.Listen("grpc-addr", cfg.GRPCAddr); err != nil {
			return nil, err
		}
	}
	if cfg.HTTPAddr != "" {
		if a.httpLn, err = cliflag.Listen("http-addr", cfg.HTTPAddr); err != nil {
			return nil, err
		}
	}
	a.grpcSrv = grpc.NewServer(serverlimits.GRPCServerOptions(MaxConcurrentStreams)...)
	fuseboxv1.RegisterAgentServer(a.grpcSrv, &apiServer{a: a})
	a.health = health.NewServer()
	healthpb.RegisterHealthServer(a.grpcSrv, a.health)
	reflection.Register(a.grpcSrv)
	timeouts := DefaultHTTPTimeouts
	if a.opts.HTTPTimeouts != nil {
		timeouts = *a.opts.HTTPTimeouts
	}
	a.httpSrv = timeouts.Server(a.httpHandler())

	// etcd before gossip: the member entries are where peers' keys come from.
	if a.opts.EtcdClient != nil {
		a.etcd = a.opts.EtcdClient
	} else if len(cfg.Etcd) > 0 {
		if a.etcd, err = newEtcdClient(cfg, a.lg); err != nil {
			return nil, err
		}
		a.ownEtcd = true
	}
	if a.etcd != nil {
		if a.store, err = store.New(store.Config{Client: a.etcd, Prefix: cfg.EtcdPrefix, Clock: a.clock}); err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
		a.keys = gossip.NewKeyDirectory(a.lookupKey)
		a.keys.Set(gossip.KeyEntry{Node: cfg.Name, Key: a.signer.Public().(ed25519.PublicKey)})
	} else {
		// No etcd: the cache or the defaults are all the policies there are.
		a.policiesLoaded.Store(true)
	}

	gc := gossip.DefaultConfig()
	gc.Name = cfg.Name
	gc.BindAddr = cfg.GossipAddr
	gc.AdvertiseAddr = cfg.AdvertiseAddr
	gc.Meta = a.nodeMeta()
	gc.Keyring = a.keyring
	gc.GossipInterval = cfg.GossipInterval
	gc.PushPullInterval = cfg.PushPullInterval
	gc.ProbeInterval = cfg.ProbeInterval
	gc.RetransmitMult = cfg.RetransmitMult
	gc.GossipNodes = cfg.GossipNodes
	gc.ProbeTimeout = cfg.ProbeTimeout
	gc.TCPTimeout = cfg.GossipTCPTimeout
	gc.DeadNodeReclaimTime = cfg.DeadNodeReclaimTime
	gc.RowFanout = cfg.RowFanout
	gc.Relay = true
	gc.Handler = (*gossipHandler)(a)
	gc.Events = (*memberEvents)(a)
	gc.Logger = a.lg
	gc.Transport = a.opts.Sim.Transport
	gc.VerifyMemo = a.opts.Sim.VerifyMemo
	gc.Signer = a.signer
	if a.keys != nil {
		gc.Keys = a.keys.Key
	}
	a.gossip, err = gossip.New(gc)
	if err != nil {
		return nil, cliflag.AsListenError("gossip-addr", cfg.GossipAddr, err)
	}
	a.gsp.Store(a.gossip)

	if a.opts.ProxyListener != nil && cfg.Proxy.Addr == "" {
		a.opts.ProxyListener.Close()
		return nil, fmt.Errorf("agent: proxy-addr: a socket was handed to the agent for the proxy (%s), but --proxy-addr is not set", a.opts.ProxyListener.Addr())
	}
	if cfg.Proxy.Addr != "" { // after the other listeners: it never calls them
		a.egressOutcomes = a.m.outcomes.WithLabelValues("proxy")
		if a.proxy, err = a.newProxy(); err != nil {
			if le := cliflag.AsListenError("proxy-addr", cfg.Proxy.Addr, err); le != err {
				return nil, le
			}
			return nil, fmt.Errorf("agent: proxy-addr: %w", err)
		}
	}
	if a.opts.Sim.Attach != nil {
		a.opts.Sim.Attach(agentopt.Inside{API: &apiServer{a: a},
			PushPullState: func() *fuseboxv1.PushPullState { return (*gossipHandler)(a).LocalState(false) },
			Crash:         a.crash,
			GossipKeys:    a.gossipKeys,
			PeerKey:       a.peerKey})
	}
	return a, nil
}

func (a *Agent) nodeMeta() gossip.NodeMeta {
	m := gossip.NodeMeta{Role: gossip.RoleAgent, Zone: a.cfg.Zone, Software: Version}
	if a.tcpLn != nil {
		m.GRPCAddr = a.tcpLn.Addr().String()
	}
	if a.httpLn != nil {
		m.HTTPAddr = a.httpLn.Addr().String()
	}
	return m
}

// Start joins the gossip cluster, serves the local API and HTTP, and
// starts the tick loop and the etcd watch and registration. It returns at
// once; the goroutines run until Close. ctx bounds nothing but Start itself.
func (a *Agent) Start(ctx context.Context) error {
	if a.closing.Load() {
		return ErrClosed
	}
	if !a.started.CompareAndSwap(false, true) {
		return errors.New("agent: already started")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	a.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	a.health.SetServingStatus(fuseboxv1.Agent_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	serve := func(name string, fn func() error) {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			if err := fn(); err != nil && !a.closing.Load() {
				a.lg.Error("server stopped", "server", name, "err", err)
				a.fail(fmt.Errorf("agent: %s: %w", name, err))
			}
		}()
	}
	if a.sockLn != nil {
		serve("unix socket", func() error { return a.grpcSrv.Serve(a.sockLn) })
	}
	if a.tcpLn != nil {
		serve("grpc tcp", func() error { return a.grpcSrv.Serve(a.tcpLn) })
	}
	if a.httpLn != nil {
		serve("http", func() error {
			if err := a.httpSrv.Serve(a.httpLn); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
	}
	if a.proxy != nil {
		serve("proxy", a.proxy.Serve)
	}
	a.goLoop(a.tickLoop)
	a.goLoop(a.joinLoop)
	if a.keyring != nil {
		a.goLoop(a.keyringLoop)
	}
	if a.store != nil {
		a.goLoop(a.watchLoop)
		a.goLoop(a.registerLoop)
	}
	a.lg.Info("agent started", "gossip", a.GossipAddr(), "socket", a.cfg.Socket,
		"grpc", a.GRPCAddr(), "http", a.HTTPAddr(), "proxy", a.ProxyAddr(), "etcd", a.cfg.Etcd, "version", Version)
	return nil
}

func (a *Agent) goLoop(fn func()) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		fn()
	}()
}

// fail records a fatal error and starts closing: Done closes, Err reports it.
func (a *Agent) fail(err error) {
	a.errMu.Lock()
	if a.err == nil {
		a.err = err
	}
	a.errMu.Unlock()
	go a.Close()
}

// Close shuts the agent down, bounded by Config.ShutdownTimeout, in this
// order: health and readiness turn to NOT_SERVING; open Session streams end
// with codes.Unavailable and ShutdownMessage; the gRPC servers stop; the
// egress proxy stops (its requests in flight get a third of the timeout);
// the agent leaves the gossip cluster (peers see it "left" at once, not dead
// after a timeout) and shuts memberlist down; the etcd watch and the
// registration stop (the registration's lease is revoked); HTTP stops; the
// socket file is removed. Close waits for every goroutine the agent started
// and is idempotent; it returns the error that made the agent stop, if any.
func (a *Agent) Close() error {
	a.closeOnce.Do(func() {
		a.closing.Store(true)
		deadline := time.Now().Add(a.cfg.ShutdownTimeout)
		a.health.Shutdown()
		close(a.shutdown)

		// Sessions end with Unavailable; GracefulStop waits for them and
		// for unary calls in flight, bounded.
		stopped := make(chan struct{})
		go func() {
			a.grpcSrv.GracefulStop()
			close(stopped)
		}()
		t := time.NewTimer(time.Until(deadline) / 3)
		select {
		case <-stopped:
		case <-t.C:
			a.grpcSrv.Stop()
			<-stopped
		}
		t.Stop()
		if a.proxy != nil {
			a.proxy.Close()
		}

		leave := min(a.cfg.LeaveTimeout, time.Until(deadline)/2)
		if a.kill.Load() {
			leave = 0
		}
		if err := a.gossip.Close(leave); err != nil {
			a.lg.Warn("gossip leave", "err", err)
		}
		a.cancel() // tick, join, watch, registration loops
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		if err := a.httpSrv.Shutdown(ctx); err != nil {
			a.httpSrv.Close()
		}
		cancel()
		a.wg.Wait()
		a.release()
		a.lg.Info("agent stopped")
		close(a.done)
	})
	<-a.done
	return a.Err()
}

// release frees what New took; it is safe on a partly built agent.
func (a *Agent) release() {
	if a.cancel != nil {
		a.cancel()
	}
	if a.proxy != nil {
		a.proxy.Close()
	}
	if a.gossip != nil {
		a.gossip.Close(0)
	}
	for _, ln := range []net.Listener{a.sockLn, a.tcpLn, a.httpLn} {
		if ln != nil {
			ln.Close()
		}
	}
	if a.sockLn != nil {
		os.Remove(a.cfg.Socket)
	}
	if a.keys != nil {
		a.keys.Close()
	}
	a.closeEtcd()
}

// closeEtcd closes the etcd client if the agent dialed it; idempotent.
func (a *Agent) closeEtcd() {
	a.etcdOnce.Do(func() {
		if a.ownEtcd && a.etcd != nil {
			a.etcd.Close()
		}
	})
}

// Done is closed when the agent has stopped (after Close, or after a fatal
// error made it close itself).
func (a *Agent) Done() <-chan struct{} { return a.done }

// Err returns the error that made the agent stop by itself, or nil.
func (a *Agent) Err() error {
	a.errMu.Lock()
	defer a.errMu.Unlock()
	return a.err
}

// Run runs an agent until ctx is done, then closes it (SIGTERM handling
// lives in the caller: cancel ctx on the signal). The proxy serves the
// listening socket the process was handed by systemd's socket activation
// (LISTEN_FDS; the one named ProxySocketName, or bound to --proxy-addr),
// if any: it outlives the process, so a restart refuses no caller.
func Run(ctx context.Context, cfg Config, opts ...Option) error {
	socks, err := inheritedSockets(os.Getenv)
	if err != nil {
		return err
	}
	ln, err := proxySocket(socks, cfg.Proxy.Addr)
	if err != nil {
		return err
	}
	if ln != nil {
		opts = append(opts, WithProxyListener(ln))
	}
	a, err := New(cfg, opts...)
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		return err
	}
	if err := a.Start(ctx); err != nil {
		a.Close()
		return err
	}
	select {
	case <-ctx.Done():
	case <-a.Done():
	}
	return a.Close()
}
