package embedded

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate/secretfile"
	"go.etcd.io/etcd/client/pkg/v3/logutil"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// ErrClosed is returned by Restart after Close.
var ErrClosed = errors.New("embedded: server closed")

// Server is a single-member etcd cluster running in this process.
//
// All methods are safe for concurrent use; lifecycle calls (Stop, Restart,
// Close) are serialized.
type Server struct {
	cfg Config
	lg  *zap.Logger

	mu        sync.Mutex
	etcd      *embed.Etcd // nil while stopped
	clientURL url.URL     // the real client URL once known (port resolved)
	peerURL   url.URL
	endpoints []string // fixed at the first successful start
	closed    bool
	running   atomic.Bool // etcd != nil, readable without mu

	grpcMu      sync.Mutex
	grpcServers []*grpc.Server // the running etcd's client-facing gRPC servers
}

// Start validates cfg, creates cfg.Dir when missing, starts etcd in it and
// waits until the member is ready to serve (bounded by ctx and
// cfg.StartTimeout). On any failure it stops what it started and returns an
// error; the data directory is left in place.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	lg := cfg.Logger
	if lg == nil {
		lvl, _ := zapcore.ParseLevel(cfg.LogLevel) // checked by Validate
		var err error
		if lg, err = logutil.CreateDefaultZapLogger(lvl); err != nil {
			return nil, fmt.Errorf("embedded: logger: %w", err)
		}
	}
	if cfg.TLS.KeyFile != "" {
		if err := secretfile.Check(cfg.TLS.KeyFile); err != nil {
			return nil, fmt.Errorf("embedded: TLS key: %w", err)
		}
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded: data dir: %w", err)
	}
	cu, _ := url.Parse(cfg.ClientURL) // checked by Validate
	pu, _ := url.Parse(cfg.PeerURL)
	s := &Server{cfg: cfg, lg: lg, clientURL: *cu, peerURL: *pu}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.startLocked(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// startLocked starts etcd with s's URLs and waits for it to be ready.
func (s *Server) startLocked(ctx context.Context) (err error) {
	ec := embed.NewConfig()
	ec.Name = s.cfg.Name
	ec.Dir = s.cfg.Dir
	ec.ListenClientUrls = []url.URL{s.clientURL}
	ec.AdvertiseClientUrls = []url.URL{s.clientURL}
	ec.ListenPeerUrls = []url.URL{s.peerURL}
	ec.AdvertisePeerUrls = []url.URL{s.peerURL}
	ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	ec.InitialClusterToken = s.cfg.ClusterToken
	ec.TickMs = s.cfg.TickMs
	ec.ElectionMs = s.cfg.ElectionMs
	ec.LogLevel = s.cfg.LogLevel
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(s.lg)
	ec.UnsafeNoFsync = s.cfg.UnsafeNoFsync
	ec.AutoCompactionMode = s.cfg.AutoCompactionMode
	ec.AutoCompactionRetention = s.cfg.AutoCompactionRetention
	ec.QuotaBackendBytes = s.cfg.QuotaBackendBytes
	if s.cfg.MaxTxnOps > 0 {
		ec.MaxTxnOps = s.cfg.MaxTxnOps
	}
	if s.cfg.TLS.Enabled() {
		ec.ClientTLSInfo = transport.TLSInfo{
			CertFile: s.cfg.TLS.CertFile, KeyFile: s.cfg.TLS.KeyFile,
			TrustedCAFile: s.cfg.TLS.ClientCAFile, ClientCertAuth: true,
		}
	}
	// Called (from etcd's goroutines, once it is ready) with each gRPC
	// server, so that Stop can end client streams at once.
	ec.ServiceRegister = func(gs *grpc.Server) {
		s.grpcMu.Lock()
		defer s.grpcMu.Unlock()
		s.grpcServers = append(s.grpcServers, gs)
	}

	e, err := embed.StartEtcd(ec) // cleans up after itself on error
	if err != nil {
		return fmt.Errorf("embedded: start etcd in %s: %w", s.cfg.Dir, err)
	}
	defer func() {
		if err != nil {
			e.Close()
			s.grpcMu.Lock()
			s.grpcServers = nil
			s.grpcMu.Unlock()
		}
	}()

	timer := time.NewTimer(s.cfg.StartTimeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case <-e.Server.StopNotify():
		return fmt.Errorf("embedded: etcd in %s stopped before it was ready", s.cfg.Dir)
	case err, ok := <-e.Err():
		if !ok || err == nil {
			err = errors.New("stopped")
		}
		return fmt.Errorf("embedded: etcd in %s failed before it was ready: %w", s.cfg.Dir, err)
	case <-ctx.Done():
		return fmt.Errorf("embedded: waiting for etcd in %s: %w", s.cfg.Dir, ctx.Err())
	case <-timer.C:
		return fmt.Errorf("embedded: etcd in %s not ready after %v", s.cfg.Dir, s.cfg.StartTimeout)
	}

	// Port 0 resolved: pin the real address so Restart comes back on it.
	if (s.clientURL.Scheme == "http" || s.clientURL.Scheme == "https") && s.clientURL.Port() == "0" && len(e.Clients) > 0 {
		s.clientURL.Host = e.Clients[0].Addr().String()
	}
	if s.endpoints == nil {
		s.endpoints = []string{s.clientURL.String()}
	}
	s.etcd = e
	s.running.Store(true)
	return nil
}

// Endpoints returns the client URLs to pass to clientv3.Config.Endpoints.
// They never change, across Stop and Restart.
func (s *Server) Endpoints() []string {
	// Set before Start returned s and never written again: no lock, so
	// that it does not wait for a Restart in progress.
	return append([]string(nil), s.endpoints...)
}

// DataDir returns the data directory.
func (s *Server) DataDir() string { return s.cfg.Dir }

// Config returns the configuration the server runs with: its defaults
// filled in, ClientURL with the port the kernel picked at the first start.
func (s *Server) Config() Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	cfg := s.cfg
	cfg.ClientURL = s.clientURL.String()
	return cfg
}

// ClientConfig returns a client configuration for this server: its
// endpoints, a 5 s dial timeout, the server's logger (so a quiet server has
// quiet clients) and a reconnect backoff suited to a local server (100 ms
// growing to 1 s, where gRPC's default starts at 1 s and grows to 2 min):
// after Restart, clients are back within about a second. Adjust it and pass
// it to clientv3.New.
//
// With TLS the client presents the server's certificate as its client
// certificate and verifies the server against the client CA; building that
// TLS configuration can fail (unreadable files), and then the returned
// config has no TLS and the connection will fail with a clear TLS error
// (ClientConfigTLS returns the error).
func (s *Server) ClientConfig() clientv3.Config {
	cc, _ := s.ClientConfigTLS()
	return cc
}

// ClientConfigTLS is ClientConfig returning the TLS setup's error.
func (s *Server) ClientConfigTLS() (clientv3.Config, error) {
	cc := clientv3.Config{
		Endpoints:   s.Endpoints(),
		DialTimeout: 5 * time.Second,
		Logger:      s.lg,
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 5 * time.Second,
		})},
	}
	if s.cfg.TLS.Enabled() {
		ti := transport.TLSInfo{CertFile: s.cfg.TLS.CertFile, KeyFile: s.cfg.TLS.KeyFile, TrustedCAFile: s.cfg.TLS.ClientCAFile}
		tc, err := ti.ClientConfig()
		if err != nil {
			return cc, fmt.Errorf("embedded: client TLS: %w", err)
		}
		cc.TLS = tc
	}
	return cc, nil
}

// NewClient returns a new client connected to this server (see
// ClientConfig). The caller closes it, before the server is closed when it
// runs under goleak.
func (s *Server) NewClient() (*clientv3.Client, error) {
	c, err := clientv3.New(s.ClientConfig())
	if err != nil {
		return nil, fmt.Errorf("embedded: client: %w", err)
	}
	return c, nil
}

// Running reports whether etcd is currently serving.
func (s *Server) Running() bool { return s.running.Load() }

// Stop shuts etcd down and waits for it, keeping the data directory and the
// client URL for Restart. Client connections are cut at once (in-flight
// requests fail, watches and keep-alives break, as when etcd crashes)
// rather than drained: etcd's graceful drain waits 5 s for watch streams.
// Committed data is kept. Clients retry until Restart and reconnect by
// themselves. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
}

func (s *Server) stopLocked() {
	if s.etcd == nil {
		return
	}
	// etcd's Close stops its gRPC servers gracefully, which waits up to its
	// request timeout (5 s and more) for streams that never end by
	// themselves: watches and lease keep-alives. Cut them first, as a crash
	// would; in-flight requests fail and clients reconnect.
	s.grpcMu.Lock()
	servers := s.grpcServers
	s.grpcServers = nil
	s.grpcMu.Unlock()
	for _, gs := range servers {
		gs.Stop()
	}
	s.running.Store(false)
	s.etcd.Close() // waits for etcd's goroutines
	s.etcd = nil
}

// Restart starts a stopped server again on the same data directory and
// client URL, waiting until it is ready (bounded by ctx and
// Config.StartTimeout). It does nothing on a running server and returns
// ErrClosed after Close. It fails if another process took the port in the
// meantime.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.etcd != nil {
		return nil
	}
	return s.startLocked(ctx)
}

// Close stops etcd for good, as Stop does, and waits for it. It is
// idempotent. Close clients too: a client of a closed server keeps retrying
// until it is closed.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.stopLocked()
}
