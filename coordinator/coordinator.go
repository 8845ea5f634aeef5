package coordinator

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/fusebox-dev/fusebox/coordinator/internal/auth"
	"github.com/fusebox-dev/fusebox/coordinator/internal/events"
	"github.com/fusebox-dev/fusebox/coordinator/internal/fleet"
	"github.com/fusebox-dev/fusebox/protocol/gossip"
	"github.com/fusebox-dev/fusebox/sharedstate"
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
	authn   auth.Authenticator
	broker  *events.Broker
	view    *fleet.View
	cache   *cache

	etcdSrv *embedded.Server // nil with an external etcd
	cli     *clientv3.Client
	store   *store.Store
	reg8n   *store.Registration

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
	o := options{tickInterval: time.Second, historyEvery: fleet.DefaultHistoryInterval}
	for _, opt := range opts {
		opt(&o)
	}
	if o.logger == nil {
		o.logger = NewLogger(cfg, os.Stderr)
	}
	if o.registry == nil {
		o.registry = prometheus.NewRegistry()
	}
	if o.clock == nil {
		o.clock = sharedstate.SystemClock{}
	}
	if o.tickInterval <= 0 {
		o.tickInterval = time.Second
	}
	if o.historyEvery <= 0 {
		o.historyEvery = fleet.DefaultHistoryInterval
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

// NewLogger returns the slog logger cfg asks for (LogFormat, LogLevel),
// writing to w.
func NewLogger(cfg Config, w io.Writer) *slog.Logger {
	var lvl slog.Level
	switch cfg.LogLevel {
	case "debug":
		lvl = slog.LevelDebug
	case "warn":
		lvl = slog.LevelWarn
	case "error":
		lvl = slog.LevelError
	}
	ho := &slog.HandlerOptions{Level: lvl}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, ho))
	}
	return slog.New(slog.NewTextHandler(w, ho))
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
		c.authn = auth.Authenticator{Tokens: tokens}
		c.log.Info("bearer tokens loaded", "file", c.cfg.TokensFile, "tokens", tokens.Len())
		if fi, err := os.Stat(c.cfg.TokensFile); err == nil && fi.Mode().Perm()&0o077 != 0 {
			c.log.Warn("the tokens file is readable by other users; chmod 600 it", "file", c.cfg.TokensFile, "mode", fi.Mode().Perm().String())
		}
		if c.cfg.TLSCert == "" && (!auth.IsLoopbackHost(c.cfg.GRPCAddr) || !auth.IsLoopbackHost(c.cfg.HTTPAddr)) {
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
	c.view = fleet.New(fleet.Config{
		MaxDependencies: c.cfg.MaxDependencies,
		HistoryInterval: c.opts.historyEvery,
		Clock:           c.clock,
		OnTransition:    c.publishTransition,
		OnRefused:       func(reason string) { c.metrics.gossipRefused.WithLabelValues(reason).Inc() },
	})
	c.cache = newCache(c.log, c.publish, func(kind string) { c.metrics.invalidValues.WithLabelValues(kind).Inc() }, c.clock)
	if c.metrics, err = newMetrics(c.reg, c); err != nil {
		return fmt.Errorf("coordinator: metrics: %w", err)
	}

	if err := c.startEtcd(ctx); err != nil {
		return err
	}
	if err := c.cache.start(ctx, c.store, func() { c.metrics.watchRestarts.Inc() }); err != nil {
		return err
	}

	if c.grpcLn, err = net.Listen("tcp", c.cfg.GRPCAddr); err != nil {
		return fmt.Errorf("coordinator: grpc-addr: %w", err)
	}
	if c.httpLn, err = net.Listen("tcp", c.cfg.HTTPAddr); err != nil {
		return fmt.Errorf("coordinator: http-addr: %w", err)
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
	c.goBackground("", func() error { c.joinLoop(); return nil })

	c.log.Info("coordinator serving", "grpc_addr", c.GRPCAddr(), "http_addr", c.HTTPAddr(),
		"gossip_addr", c.GossipAddr(), "etcd", strings.Join(c.endpoint, ","), "tls", c.tlsConf != nil)
	return nil
}

// startEtcd starts the embedded etcd (or connects to the external one) and
// builds the store.
func (c *Coordinator) startEtcd(ctx context.Context) error {
	var cc clientv3.Config
	if len(c.cfg.Etcd) == 0 {
		ec := embedded.DefaultConfig()
		ec.Dir = filepath.Join(c.cfg.DataDir, "etcd")
		ec.ClientURL = c.cfg.EmbeddedEtcdURL
		for _, f := range c.opts.embedded {
			f(&ec)
		}
		if ec.Logger == nil {
			lg, err := etcdLogger(ec.LogLevel, &c.closing)
			if err != nil {
				return err
			}
			ec.Logger = lg
		}
		srv, err := embedded.Start(ctx, ec)
		if err != nil {
			return fmt.Errorf("coordinator: embedded etcd: %w", err)
		}
		c.etcdSrv = srv
		cc = srv.ClientConfig()
		c.endpoint = srv.Endpoints()
		c.log.Info("embedded etcd ready: start agents with --etcd "+strings.Join(c.endpoint, ","),
			"etcd", strings.Join(c.endpoint, ","), "data_dir", ec.Dir)
	} else {
		var err error
		cc, err = store.NewClientConfig(store.ClientOptions{
			Endpoints: c.cfg.Etcd,
			CAFile:    c.cfg.EtcdCA, CertFile: c.cfg.EtcdCert, KeyFile: c.cfg.EtcdKey,
			Username: c.cfg.EtcdUsername, Password: c.cfg.EtcdPassword,
		})
		if err != nil {
			return fmt.Errorf("coordinator: %w", err)
		}
		c.endpoint = append([]string(nil), c.cfg.Etcd...)
		lg, err := etcdLogger("error", &c.closing)
		if err != nil {
			return err
		}
		cc.Logger = lg
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < cc.DialTimeout {
		cc.DialTimeout = max(time.Until(dl), 100*time.Millisecond)
	}
	cli, err := clientv3.New(cc)
	if err != nil {
		return fmt.Errorf("coordinator: etcd client: %w", err)
	}
	c.cli = cli
	st, err := store.New(store.Config{Client: cli, Prefix: c.cfg.EtcdPrefix, Clock: c.clock})
	if err != nil {
		return err
	}
	c.store = st
	return nil
}

// serverTLS loads the TLS configuration of the Admin API and HTTP (nil
// without --tls-cert).
func (c *Coordinator) serverTLS() (*tls.Config, error) {
	if c.cfg.TLSCert == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.cfg.TLSCert, c.cfg.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("coordinator: tls-cert/tls-key: %w", err)
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if c.cfg.TLSClientCA != "" {
		pem, err := os.ReadFile(c.cfg.TLSClientCA)
		if err != nil {
			return nil, fmt.Errorf("coordinator: tls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("coordinator: tls-client-ca %s: no PEM certificates", c.cfg.TLSClientCA)
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

// startGossip starts the fleet observer's gossip member and registers the
// coordinator in etcd (role observer), so agents and operators can find it.
func (c *Coordinator) startGossip() error {
	kr, err := c.keyring()
	if err != nil {
		return err
	}
	gc := gossip.DefaultConfig()
	gc.BindAddr = c.cfg.GossipAddr
	gc.AdvertiseAddr = c.cfg.GossipAdvertiseAddr
	gc.Keyring = kr
	gc.Logger = c.log
	for _, f := range c.opts.gossip {
		f(&gc)
	}
	gc.Name = c.cfg.Name
	gc.Meta = gossip.NodeMeta{Role: gossip.RoleObserver, Software: version(), GRPCAddr: c.GRPCAddr(), HTTPAddr: c.HTTPAddr()}
	gc.Handler = c.view
	gc.Events = c.view
	gc.Relay = false
	g, err := gossip.New(gc)
	if err != nil {
		return fmt.Errorf("coordinator: fleet observer: %w", err)
	}
	c.gossipMu.Lock()
	c.gossip = g
	c.gossipMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	reg, err := c.store.Register(ctx, store.Member{Node: c.cfg.Name, Role: string(gossip.RoleObserver),
		Version: version(), GossipAddr: g.Addr(), APIAddr: c.GRPCAddr()})
	if err != nil {
		// Not fatal: the observer works without it, agents just cannot
		// find the coordinator through etcd.
		c.log.Warn("could not register in etcd", "err", err)
	} else {
		c.reg8n = reg
	}
	return nil
}

func (c *Coordinator) keyring() (*memberlist.Keyring, error) {
	if c.cfg.KeyringFile == "" {
		return nil, nil
	}
	kr, err := gossip.LoadKeyringFile(c.cfg.KeyringFile)
	if err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	return kr, nil
}

func (c *Coordinator) gossipNode() *gossip.Gossip {
	c.gossipMu.Lock()
	defer c.gossipMu.Unlock()
	return c.gossip
}

// joinLoop joins --join, or the agents registered in etcd, and keeps
// trying while the observer sees no agent (agents started later, or all
// restarted). It asks the fleet view, whose members come from memberlist's
// event callbacks, and not Gossip.Members: memberlist's Members returns
// pointers into nodes that its packet handler rewrites without a lock the
// caller can take (hashicorp/memberlist#306), a data race under -race.
func (c *Coordinator) joinLoop() {
	backoff := 500 * time.Millisecond
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-timer.C:
		}
		g := c.gossipNode()
		if c.view.AliveAgents() == 0 {
			if addrs := c.joinAddrs(); len(addrs) > 0 {
				if n, err := g.Join(addrs); err != nil && n == 0 {
					c.log.Debug("fleet observer could not join yet", "addrs", addrs, "err", err)
				} else {
					c.log.Info("fleet observer joined the gossip", "contacted", n)
					backoff = 500 * time.Millisecond
				}
			}
			backoff = min(2*backoff, 30*time.Second)
		} else {
			backoff = 10 * time.Second
		}
		timer.Reset(backoff)
	}
}

// joinAddrs is --join, else the gossip addresses of the agents registered
// in etcd.
func (c *Coordinator) joinAddrs() []string {
	if len(c.cfg.Join) > 0 {
		return c.cfg.Join
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	members, _, err := c.store.ListMembers(ctx)
	if err != nil && len(members) == 0 {
		return nil
	}
	var addrs []string
	self := c.GossipAddr()
	for _, m := range members {
		if m.GossipAddr != "" && m.GossipAddr != self && m.Node != c.cfg.Name {
			addrs = append(addrs, m.GossipAddr)
		}
	}
	return addrs
}

// tickLoop runs the fleet view's periodic work.
func (c *Coordinator) tickLoop() {
	t := time.NewTicker(c.opts.tickInterval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			c.view.Tick(c.clock.Now(), c.cache)
		}
	}
}

// goBackground runs fn on a goroutine Close waits for. A non-nil error of
// a named component is fatal: the coordinator reports it through Err and
// Done.
func (c *Coordinator) goBackground(name string, fn func() error) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if err := fn(); err != nil && name != "" {
			c.fail(fmt.Errorf("coordinator: %s: %w", name, err))
		}
	}()
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
		timeout := c.cfg.ShutdownTimeout
		if timeout <= 0 {
			timeout = 5 * time.Second
		}
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

// version is the module version the binary was built from ("dev" when
// unknown).
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
