package coordinator

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"time"

	"github.com/fusebox-dev/fusebox/coordinator/internal/history"
	"github.com/fusebox-dev/fusebox/sharedstate/cliflag"
	"github.com/fusebox-dev/fusebox/sharedstate/logging"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded"
)

// Default addresses (sharedstate/DESIGN.md, "Names").
const (
	DefaultGRPCAddr        = "127.0.0.1:7960"
	DefaultHTTPAddr        = "127.0.0.1:7070"
	DefaultGossipAddr      = "127.0.0.1:7947"
	DefaultEmbeddedEtcdURL = "http://127.0.0.1:2379"
	DefaultDataDir         = "/var/lib/fusebox/coordinator"
	DefaultEtcdPrefix      = "/fusebox/"
)

// Event stream limits (Config.MaxEventStreams, MaxEventStreamsPerIdentity):
// each open stream holds memory (its goroutine, buffers and event queue)
// and a file descriptor.
const (
	DefaultMaxEventStreams            = 1000
	DefaultMaxEventStreamsPerIdentity = 100
)

// Audit retention defaults.
const (
	DefaultAuditRetention  = 90 * 24 * time.Hour
	DefaultAuditMaxEntries = 1_000_000
)

// Config configures one coordinator. Build it with DefaultConfig and check it
// with Validate, which has no side effects. Every address may use port 0
// (the kernel picks one; the Coordinator's accessors report it).
type Config struct {
	// Name is the observer's node name in the gossip cluster (optional,
	// default "coordinator-<hostname>"). Two coordinators in one cluster need
	// different names.
	Name string
	// DataDir holds the embedded etcd's data when Etcd is empty (optional,
	// default /var/lib/fusebox/coordinator; the data goes in DataDir/etcd).
	DataDir string
	// EmbeddedEtcdURL is the client URL the embedded etcd listens on and
	// agents connect to (optional, default http://127.0.0.1:2379; used only
	// when Etcd is empty).
	EmbeddedEtcdURL string
	// EmbeddedEtcdCert, EmbeddedEtcdKey and EmbeddedEtcdClientCA serve the
	// embedded etcd's clients over TLS with client certificates (all three
	// or none; EmbeddedEtcdURL then https). The certificate must also be
	// usable as a client certificate, signed by the client CA: the
	// coordinator connects with it.
	EmbeddedEtcdCert, EmbeddedEtcdKey, EmbeddedEtcdClientCA string
	// InsecureEmbeddedEtcd allows a non-loopback EmbeddedEtcdURL without
	// TLS: anyone who reaches it can write policies and overrides, past the
	// tokens and the audit trail.
	InsecureEmbeddedEtcd bool
	// EmbeddedEtcdCompaction ("periodic" or "revision") and
	// EmbeddedEtcdCompactionRetention (a duration, or a number of
	// revisions) set the embedded etcd's auto-compaction (optional, default
	// periodic, 1h); EmbeddedEtcdQuotaBytes its backend quota (optional,
	// default 1 GiB).
	EmbeddedEtcdCompaction, EmbeddedEtcdCompactionRetention string
	EmbeddedEtcdQuotaBytes                                  int64
	// AuditRetention deletes audit entries older than this, and
	// AuditMaxEntries the oldest beyond this many (0: no limit of that
	// kind). One coordinator at a time trims (an etcd election); each trim
	// leaves an audit.trim summary entry. Defaults: 90 days, 1,000,000.
	AuditRetention  time.Duration
	AuditMaxEntries int
	// Etcd lists external etcd endpoints (optional: empty starts an embedded
	// etcd in DataDir and prints its client URL for the agents).
	Etcd []string
	// EtcdAuth is TLS and user/password to an external etcd (optional):
	// EtcdCA, EtcdCert, EtcdKey, EtcdUsername, EtcdPassword,
	// EtcdPasswordFile.
	store.EtcdAuth
	// EtcdPrefix is the key prefix of Fusebox's etcd data (optional, default /fusebox/).
	EtcdPrefix string
	// GRPCAddr serves the Admin API (optional, default 127.0.0.1:7960).
	GRPCAddr string
	// HTTPAddr serves the JSON API, SSE, /metrics, /healthz and the page at /
	// (optional, default 127.0.0.1:7070).
	HTTPAddr string
	// GossipAddr is the fleet observer's memberlist bind address (optional,
	// default 127.0.0.1:7947). It must be reachable by the agents.
	GossipAddr string
	// GossipAdvertiseAddr is the address agents reach the observer at
	// (optional, default: derived from GossipAddr).
	GossipAdvertiseAddr string
	// Join lists agents' gossip addresses to join, host:port (optional,
	// default: the gossip addresses of the agents registered in etcd).
	Join []string
	// RejoinInterval is how often the observer, once it sees agents, joins
	// again every address of Join and every agent registered in etcd that
	// gossip does not list as alive, so it heals after a partition
	// (optional, default 2s, at least 10ms).
	RejoinInterval time.Duration
	// KeyringFile holds the gossip encryption keys, the agents' format
	// (optional, default no encryption; must match the agents').
	KeyringFile string
	// InsecureGossip allows the observer plaintext gossip on a GossipAddr
	// that is not loopback (optional, default false: such a coordinator
	// refuses to start without KeyringFile).
	InsecureGossip bool
	// TokensFile holds "ROLE TOKEN [NAME]" lines, ROLE viewer or admin
	// (optional: without it the coordinator serves loopback only, every
	// loopback caller is an admin, and it says so in its log).
	TokensFile string
	// TLSCert and TLSKey serve the Admin API and HTTP over TLS (optional).
	TLSCert, TLSKey string
	// TLSClientCA requires client certificates signed by this CA on both the
	// Admin API and HTTP (optional, mTLS). Bearer tokens are still checked
	// when there is a tokens file.
	TLSClientCA string
	// MaxDependencies caps how many dependencies the fleet view tracks
	// (optional, default 10000); more are dropped and counted.
	MaxDependencies int
	// HistoryFine and HistoryCoarse are how long the history (the
	// dashboard's plots, the what-if replays) keeps each dependency's counts
	// at window/100 (at least 100 ms) and at 1 s (optional, defaults 15m and
	// 3h; at most a week, coarse at least fine). HistoryMaxDependencies caps
	// the dependencies it keeps (optional, default 64; past it the room rule
	// decides who keeps one: coordinator/README.md, "What-if: replaying a
	// policy"). A dependency with traffic all the time costs about 1 MiB at
	// the defaults; the history is in memory and lost when the coordinator
	// restarts.
	HistoryFine, HistoryCoarse time.Duration
	HistoryMaxDependencies     int
	// MaxEventStreams bounds the event streams open at once (/api/v1/events
	// and the Admin API's Watch), and MaxEventStreamsPerIdentity those of
	// one identity (a token's name; "loopback" without a tokens file)
	// (optional, defaults 1000 and 100). Past either a new stream is
	// refused, named (HTTP 503 or 429, gRPC RESOURCE_EXHAUSTED) and counted
	// in fusebox_coordinator_event_streams_refused_total; open ones stay.
	MaxEventStreams, MaxEventStreamsPerIdentity int
	// LogFormat is "text" or "json" (optional, default "text").
	LogFormat string
	// LogLevel is "debug", "info", "warn" or "error" (optional, default "info").
	LogLevel string
	// ShutdownTimeout bounds the graceful part of Close (optional, default 5s).
	ShutdownTimeout time.Duration
}

// DefaultConfig returns the defaults documented on each field.
func DefaultConfig() Config {
	return Config{
		DataDir:         DefaultDataDir,
		EmbeddedEtcdURL: DefaultEmbeddedEtcdURL,
		EtcdPrefix:      DefaultEtcdPrefix,
		AuditRetention:  DefaultAuditRetention,
		AuditMaxEntries: DefaultAuditMaxEntries,
		GRPCAddr:        DefaultGRPCAddr,
		HTTPAddr:        DefaultHTTPAddr,
		GossipAddr:      DefaultGossipAddr,
		RejoinInterval:  2 * time.Second,
		MaxDependencies: 10000,
		HistoryFine:     history.DefaultFineHorizon,
		HistoryCoarse:   history.DefaultCoarseHorizon,
		LogFormat:       "text",
		LogLevel:        "info",
		ShutdownTimeout: 5 * time.Second,

		HistoryMaxDependencies: history.DefaultMaxDependencies,

		MaxEventStreams:            DefaultMaxEventStreams,
		MaxEventStreamsPerIdentity: DefaultMaxEventStreamsPerIdentity,

		EmbeddedEtcdCompaction:          embedded.DefaultAutoCompactionMode,
		EmbeddedEtcdCompactionRetention: embedded.DefaultAutoCompactionRetention,
		EmbeddedEtcdQuotaBytes:          embedded.DefaultQuotaBackendBytes,
	}
}

// embeddedConfig is the embedded etcd's configuration from c (production
// timings; Dir in DataDir).
func (c Config) embeddedConfig() embedded.Config {
	ec := embedded.DefaultConfig()
	ec.Dir = filepath.Join(c.DataDir, "etcd")
	ec.ClientURL = c.EmbeddedEtcdURL
	ec.TLS = embedded.TLSFiles{CertFile: c.EmbeddedEtcdCert, KeyFile: c.EmbeddedEtcdKey, ClientCAFile: c.EmbeddedEtcdClientCA}
	if c.EmbeddedEtcdCompaction != "" || c.EmbeddedEtcdCompactionRetention != "" {
		ec.AutoCompactionMode, ec.AutoCompactionRetention = c.EmbeddedEtcdCompaction, c.EmbeddedEtcdCompactionRetention
	}
	if c.EmbeddedEtcdQuotaBytes != 0 {
		ec.QuotaBackendBytes = c.EmbeddedEtcdQuotaBytes
	}
	return ec
}

// Validate reports every problem of the configuration at once, each naming
// the flag and the offending value. It changes nothing and reads no file.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("coordinator config: %s: "+format, append([]any{field}, args...)...))
	}
	if len(c.Etcd) == 0 {
		if c.DataDir == "" {
			bad("data-dir", "must be set when --etcd is not (the embedded etcd keeps its data there)")
		}
		tlsFiles := embedded.TLSFiles{CertFile: c.EmbeddedEtcdCert, KeyFile: c.EmbeddedEtcdKey, ClientCAFile: c.EmbeddedEtcdClientCA}
		if tlsFiles.Enabled() && (c.EmbeddedEtcdCert == "" || c.EmbeddedEtcdKey == "" || c.EmbeddedEtcdClientCA == "") {
			bad("embedded-etcd-cert", "embedded-etcd-cert, embedded-etcd-key and embedded-etcd-client-ca go together")
		}
		scheme := "http"
		if tlsFiles.Enabled() {
			scheme = "https"
		}
		if u, err := url.Parse(c.EmbeddedEtcdURL); err != nil || u.Scheme != scheme || u.Port() == "" {
			bad("embedded-etcd-url", "must be %s://IP:PORT, got %q", scheme, c.EmbeddedEtcdURL)
		} else if !cliflag.IsLoopback(u.Host) && !tlsFiles.Enabled() && !c.InsecureEmbeddedEtcd {
			bad("embedded-etcd-url", "%q is not a loopback address: anyone who reaches it could write policies and overrides past the tokens and the audit; "+
				"serve it with TLS and client certificates (--embedded-etcd-cert, --embedded-etcd-key, --embedded-etcd-client-ca), "+
				"use an external etcd cluster (--etcd), or pass --insecure-embedded-etcd", c.EmbeddedEtcdURL)
		}
		ec := c.embeddedConfig()
		ec.Dir = "-" // checked in startEtcd
		if err := ec.Validate(); err != nil {
			bad("embedded-etcd", "%v", err)
		}
	}
	checkAddr := func(field, v string, optional bool) {
		if v == "" && optional {
			return
		}
		if _, _, err := net.SplitHostPort(v); err != nil {
			bad(field, "must be host:port, got %q", v)
		}
	}
	checkAddr("grpc-addr", c.GRPCAddr, false)
	checkAddr("http-addr", c.HTTPAddr, false)
	checkAddr("gossip-addr", c.GossipAddr, false)
	checkAddr("gossip-advertise-addr", c.GossipAdvertiseAddr, true)
	if _, _, err := net.SplitHostPort(c.GossipAddr); err == nil && c.KeyringFile == "" && !c.InsecureGossip && !cliflag.IsLoopback(c.GossipAddr) {
		errs = append(errs, fmt.Errorf("coordinator config: gossip-addr %s is not loopback and gossip has no keyring: "+
			"give --keyring-file FILE to encrypt and authenticate gossip, or --insecure-gossip to run it in plaintext", c.GossipAddr))
	}
	for _, j := range c.Join {
		checkAddr("join", j, false)
	}
	if c.RejoinInterval < 10*time.Millisecond {
		bad("rejoin-interval", "must be at least 10ms, got %v", c.RejoinInterval)
	}
	if c.TokensFile == "" {
		// No tokens: nobody is authenticated, so nobody off this host may
		// reach the APIs.
		for _, f := range [][2]string{{"grpc-addr", c.GRPCAddr}, {"http-addr", c.HTTPAddr}} {
			if _, _, err := net.SplitHostPort(f[1]); err == nil && !cliflag.IsLoopback(f[1]) {
				bad(f[0], "%q is not a loopback address: without --tokens-file the coordinator serves loopback only", f[1])
			}
		}
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		bad("tls-cert", "tls-cert and tls-key go together, got cert %q key %q", c.TLSCert, c.TLSKey)
	}
	if c.TLSClientCA != "" && c.TLSCert == "" {
		bad("tls-client-ca", "needs tls-cert and tls-key")
	}
	for _, v := range c.etcdOptions().Violations() {
		errs = append(errs, errors.New("coordinator config: "+v))
	}
	if len(c.Etcd) == 0 && (c.EtcdCA != "" || c.EtcdCert != "" || c.EtcdUsername != "" || c.EtcdPassword != "" || c.EtcdPasswordFile != "") {
		bad("etcd", "etcd-ca, etcd-cert and etcd-user need --etcd (the embedded etcd uses none of them)")
	}
	if c.AuditRetention < 0 {
		bad("audit-retention", "must not be negative (0: no age limit), got %v", c.AuditRetention)
	}
	if c.AuditMaxEntries != 0 && c.AuditMaxEntries < store.MinAuditMaxEntries {
		bad("audit-max-entries", "must be 0 (no limit) or at least %d, got %d", store.MinAuditMaxEntries, c.AuditMaxEntries)
	}
	if v := store.CheckPrefix(c.EtcdPrefix); v != "" {
		bad("etcd-prefix", "%s", v)
	}
	if c.MaxDependencies <= 0 {
		bad("max-dependencies", "must be > 0, got %d", c.MaxDependencies)
	}
	if c.HistoryFine < history.MinFineStep || c.HistoryFine > history.MaxHorizon {
		bad("history-fine", "must be between %v and %v, got %v", history.MinFineStep, history.MaxHorizon, c.HistoryFine)
	}
	if c.HistoryCoarse < c.HistoryFine || c.HistoryCoarse > history.MaxHorizon {
		bad("history-coarse", "must be between --history-fine (%v) and %v, got %v", c.HistoryFine, history.MaxHorizon, c.HistoryCoarse)
	}
	if c.HistoryMaxDependencies <= 0 {
		bad("history-max-dependencies", "must be > 0, got %d", c.HistoryMaxDependencies)
	}
	if c.MaxEventStreams <= 0 {
		bad("max-event-streams", "must be > 0, got %d", c.MaxEventStreams)
	}
	if c.MaxEventStreamsPerIdentity <= 0 || c.MaxEventStreamsPerIdentity > c.MaxEventStreams {
		bad("max-event-streams-per-identity", "must be between 1 and --max-event-streams (%d), got %d", c.MaxEventStreams, c.MaxEventStreamsPerIdentity)
	}
	for _, v := range logging.Violations(c.LogFormat, c.LogLevel) {
		errs = append(errs, errors.New("coordinator config: "+v))
	}
	if c.ShutdownTimeout < 0 {
		bad("shutdown-timeout", "must not be negative, got %v", c.ShutdownTimeout)
	}
	return errors.Join(errs...)
}

// etcdOptions are the settings of the client of an external etcd.
func (c Config) etcdOptions() store.ClientOptions { return store.ClientOptionsFor(c.Etcd, c.EtcdAuth) }
