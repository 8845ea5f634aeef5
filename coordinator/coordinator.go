package coordinator

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"

	"github.com/fusebox-dev/fusebox/coordinator/internal/auth"
	"github.com/fusebox-dev/fusebox/coordinator/internal/events"
	"github.com/fusebox-dev/fusebox/coordinator/internal/fleet"
	"github.com/fusebox-dev/fusebox/coordinator/internal/history"
	"github.com/fusebox-dev/fusebox/protocol/gossip"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/cliflag"
	"github.com/fusebox-dev/fusebox/sharedstate/logging"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded"
)

// Coordinator is one running control plane. Build it with New, start it
// with Start, stop it with Close. Its accessors are safe for concurrent use
// once Start has returned.
type Coordinator struct {
	cfg   Config
	opts  options
	log   *slog.Logger
	reg   *prometheus.Registry
	clock sharedstate.Clock

	metrics *metrics
	tokens  atomic.Pointer[auth.Tokens] // nil: no tokens file, loopback only
	broker  *events.Broker
	view    *fleet.View
	cache   *cache
	history *history.History
	simSem  chan struct{} // a slot per simulation running

	etcdSrv *embedded.Server // nil with an external etcd
	cli     *store.Client
	store   *store.Store
	reg8n   *store.Registration
	keys    *gossip.KeyDirectory // the etcd member entries' keys, for the observer

	gossipMu sync.Mutex
	gossip   *gossip.Gossip

	grpcLn   net.Listener
	httpLn   net.Listener
	grpcSrv  *grpc.Server
	httpSrv  *http.Server
	tlsConf  *tls.Config
	endpoint []string

	wg        sync.WaitGroup
	stop      chan struct{} // closed when Close starts: background loops end
	stopping  chan struct{} // closed on Close or on a fatal error
	failOnce  sync.Once
	errMu     sync.Mutex
	err       error
	startMu   sync.Mutex
	started   bool
	closeOnce sync.Once
	closed    bool
	closing   atomic.Bool // quiets the embedded etcd's log during Close
}

// New checks cfg and prepares a coordinator; Start starts it.
func New(cfg Config, opts ...Option) (*Coordinator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	o := options{tickInterval: time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	if o.logger == nil {
		o.logger = logging.New(cfg.LogFormat, cfg.LogLevel, os.Stderr)
	}
	if o.registry == nil {
		// A registry of its own carries the Go runtime's and the process's
		// standard series (go_goroutines, process_resident_memory_bytes,
		// process_open_fds, …) too; a registry passed in has what its owner
		// put there.
		o.registry = prometheus.NewRegistry()
		for _, c := range []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
			if err := o.registry.Register(c); err != nil {
				return nil, fmt.Errorf("coordinator: metrics: %w", err)
			}
		}
	}
	if o.clock == nil {
		o.clock = sharedstate.SystemClock{}
	}
	if o.tickInterval <= 0 {
		o.tickInterval = time.Second
	}
	if cfg.Name == "" {
		host, _ := os.Hostname()
		cfg.Name = "coordinator-" + host
	}
	c := &Coordinator{
		cfg: cfg, opts: o, log: o.logger, reg: o.registry, clock: o.clock,
		stop: make(chan struct{}), stopping: make(chan struct{}),
	}
	return c, nil
}

// Start starts etcd (embedded, or a client of the external one), the etcd
// cache, the fleet observer and the gRPC and HTTP servers, and returns once
// they all serve. On failure it stops whatever it started. ctx bounds the
// start only.
func (c *Coordinator) Start(ctx context.Context) (err error) {
	c.startMu.Lock()
	defer c.startMu.Unlock()
	if c.closed {
		return ErrClosed
	}
	if c.started {
		return errors.New("coordinator: already started")
	}
	c.started = true
	defer func() {
		if err != nil {
			c.shutdown()
		}
	}()

	if c.cfg.TokensFile != "" {
		tokens, err := auth.LoadTokensFile(c.cfg.TokensFile)
		if err != nil {
			return err
		}
		c.tokens.Store(tokens)
		c.log.Info("bearer tokens loaded", "file", c.cfg.TokensFile, "tokens", tokens.Len())
		if c.cfg.TLSCert == "" && (!cliflag.IsLoopback(c.cfg.GRPCAddr) || !cliflag.IsLoopback(c.cfg.HTTPAddr)) {
			c.log.Warn("serving beyond loopback without TLS: bearer tokens travel in clear text (set --tls-cert and --tls-key)")
		}
	} else {
		c.log.Warn("no --tokens-file: serving loopback callers only, and every loopback caller is an admin",
			"grpc_addr", c.cfg.GRPCAddr, "http_addr", c.cfg.HTTPAddr)
	}
	if c.tlsConf, err = c.serverTLS(); err != nil {
		return err
	}

	// Event IDs start from the start time in microseconds: an ID a client
	// kept from before a restart is then never one of this process's, and
	// Watch says so instead of resuming at the wrong place.
	c.broker = events.NewBroker(256, 512, uint64(max(time.Now().UnixMicro(), 0)), func() { c.metrics.sseDropped.Inc() })
	c.broker.Limit(events.Limits{Total: c.cfg.MaxEventStreams, PerKey: c.cfg.MaxEventStreamsPerIdentity}, func(scope string) {
		c.metrics.streamsRefused.WithLabelValues(streamLimitOf(scope)).Inc()
	})
	c.history = history.New(history.Config{
		FineHorizon: c.cfg.HistoryFine, CoarseHorizon: c.cfg.HistoryCoarse, MaxDependencies: c.cfg.HistoryMaxDependencies,
		Start: c.clock.Now(), Pinned: c.pinned,
		OnDrop: func(reason string) { c.metrics.historyDropped.WithLabelValues(reason).Inc() },
	})
	c.simSem = make(chan struct{}, maxSimulations)
	c.view = fleet.New(fleet.Config{
		MaxDependencies: c.cfg.MaxDependencies,
		Clock:           c.clock,
		OnTransition:    c.publishTransition,
		OnRefused:       func(reason string) { c.metrics.gossipRefused.WithLabelValues(reason).Inc() },
		OnRow:           c.observeRow,
		OnRecord:        func(r sharedstate.BreakerRecord, at time.Time) { c.history.ObserveRecord(at, r) },
	})
	c.cache = newCache(c.log, c.publish, func(kind string) { c.metrics.invalidValues.WithLabelValues(kind).Inc() },
		func(r store.RewindReason) { c.metrics.rewinds.WithLabelValues(string(r)).Inc() }, c.clock)
	if c.metrics, err = newMetrics(c.reg, c); err != nil {
		return fmt.Errorf("coordinator: metrics: %w", err)
	}

	if err := c.startEtcd(ctx); err != nil {
		return err
	}
	if err := c.cache.start(ctx, c.store, func() { c.metrics.watchRestarts.Inc() }); err != nil {
		return err
	}
	c.seedHistory()

	if c.grpcLn, err = cliflag.Listen("grpc-addr", c.cfg.GRPCAddr); err != nil {
		return err
	}
	if c.httpLn, err = cliflag.Listen("http-addr", c.cfg.HTTPAddr); err != nil {
		return err
	}
	c.grpcSrv = c.newGRPCServer()
	c.httpSrv = c.newHTTPServer()
	httpLn := c.httpLn
	if c.tlsConf != nil {
		httpLn = tls.NewListener(c.httpLn, c.tlsConf)
	}
	c.goBackground("grpc server", func() error { return c.grpcSrv.Serve(c.grpcLn) })
	c.goBackground("http server", func() error {
		if err := c.httpSrv.Serve(httpLn); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})

	if err := c.startGossip(); err != nil {
		return err
	}
	c.goBackground("", func() error { c.tickLoop(); return nil })
	if c.cfg.TokensFile != "" {
		c.watchTokens()
	}
	c.startAuditRetention()
	c.goBackground("", func() error { c.joinLoop(); return nil })

	c.log.Info("coordinator serving", "grpc_addr", c.GRPCAddr(), "http_addr", c.HTTPAddr(),
		"gossip_addr", c.GossipAddr(), "etcd", strings.Join(c.endpoint, ","), "tls", c.tlsConf != nil)
	return nil
}

// goBackground runs fn on a goroutine Close waits for. A non-nil error of
// a named component is fatal: the coordinator reports it through Err and
// Done.
func (c *Coordinator) goBackground(name string, fn func() error) {
	c.wg.Go(func() {
		if err := fn(); err != nil && name != "" {
			c.fail(fmt.Errorf("coordinator: %s: %w", name, err))
		}
	})
}

func (c *Coordinator) fail(err error) {
	select {
	case <-c.stop:
		return // shutting down: servers stop with errors of their own
	default:
	}
	c.failOnce.Do(func() {
		c.errMu.Lock()
		c.err = err
		c.errMu.Unlock()
		c.log.Error("coordinator failed", "err", err)
		close(c.stopping)
	})
}

// Done is closed when the coordinator stops: Close was called, or a server
// failed (see Err).
func (c *Coordinator) Done() <-chan struct{} { return c.stopping }

// Err returns the error that stopped the coordinator, nil if none did.
func (c *Coordinator) Err() error {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return c.err
}

// Close stops the coordinator and waits for everything it started, in
// this order: the event broker (SSE and Watch streams end), the HTTP
// server, the gRPC server (graceful, bounded by ShutdownTimeout: a Watch
// client that stopped reading holds it that long), the background loops,
// the gossip member (leaving the cluster), the etcd registration and
// watch, the etcd client, and the embedded etcd. It is idempotent and safe
// to call after a failed Start or without Start.
func (c *Coordinator) Close() error {
	c.startMu.Lock()
	c.closed = true
	c.startMu.Unlock()
	c.shutdown()
	return nil
}

func (c *Coordinator) shutdown() {
	c.closeOnce.Do(func() {
		c.closing.Store(true)
		close(c.stop)
		c.failOnce.Do(func() { close(c.stopping) })
		timeout := cmp.Or(c.cfg.ShutdownTimeout, 5*time.Second) // Validate refuses a negative one
		if c.broker != nil {
			c.broker.Close()
		}
		if c.httpSrv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			if err := c.httpSrv.Shutdown(ctx); err != nil {
				_ = c.httpSrv.Close()
			}
			cancel()
		} else if c.httpLn != nil {
			_ = c.httpLn.Close()
		}
		if c.grpcSrv != nil {
			done := make(chan struct{})
			go func() { c.grpcSrv.GracefulStop(); close(done) }()
			t := time.NewTimer(timeout)
			select {
			case <-done:
			case <-t.C:
				c.grpcSrv.Stop()
				<-done
			}
			t.Stop()
		} else if c.grpcLn != nil {
			_ = c.grpcLn.Close()
		}
		c.wg.Wait()
		if g := c.gossipNode(); g != nil {
			if err := g.Close(time.Second); err != nil {
				c.log.Debug("fleet observer leave", "err", err)
			}
		}
		if c.reg8n != nil {
			_ = c.reg8n.Close()
		}
		if c.keys != nil {
			c.keys.Close()
		}
		if c.cache != nil {
			c.cache.close()
		}
		if c.cli != nil {
			_ = c.cli.Close()
		}
		if c.etcdSrv != nil {
			c.etcdSrv.Close()
		}
		if c.started {
			c.log.Info("coordinator stopped")
		}
	})
}

// Run runs a coordinator with cfg until ctx is done (then it returns nil)
// or the coordinator fails.
func Run(ctx context.Context, cfg Config, opts ...Option) error {
	c, err := New(cfg, opts...)
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return nil // asked to stop while starting
		}
		return err
	}
	select {
	case <-ctx.Done():
	case <-c.Done():
	}
	_ = c.Close()
	return c.Err()
}

// GRPCAddr returns the Admin API's bound address, host:port.
func (c *Coordinator) GRPCAddr() string { return addrOf(c.grpcLn) }

// HTTPAddr returns the HTTP server's bound address, host:port.
func (c *Coordinator) HTTPAddr() string { return addrOf(c.httpLn) }

// GossipAddr returns the fleet observer's gossip address, host:port.
func (c *Coordinator) GossipAddr() string {
	if g := c.gossipNode(); g != nil {
		return g.Addr()
	}
	return ""
}

// EtcdEndpoints returns the etcd client URLs the coordinator uses (the
// embedded etcd's when it runs one): what agents pass as --etcd.
func (c *Coordinator) EtcdEndpoints() []string { return append([]string(nil), c.endpoint...) }

// Store returns the coordinator's etcd store (tests and the demo use it to
// write around the Admin API).
func (c *Coordinator) Store() *store.Store { return c.store }

func addrOf(l net.Listener) string {
	if l == nil {
		return ""
	}
	return l.Addr().String()
}

// Version is the coordinator's software version when the build stamps it
// (go build -ldflags "-X github.com/fusebox-dev/fusebox/coordinator.Version=v1.2.3",
// as deploy/docker/Dockerfile does); empty: see version.
var Version string

// version is Version, else the module version the binary was built from
// ("dev" when unknown).
func version() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
