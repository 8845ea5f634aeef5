package agent

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/fusebox-dev/fusebox/agent/proxy"
	"github.com/fusebox-dev/fusebox/protocol/gossip"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/cliflag"
	"github.com/fusebox-dev/fusebox/sharedstate/logging"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

// Default ports and paths (sharedstate/DESIGN.md, "Names").
const (
	DefaultGossipAddr = "0.0.0.0:7946"
	DefaultGRPCAddr   = "" // loopback TCP is off unless asked for, e.g. 127.0.0.1:7950
	DefaultHTTPAddr   = "127.0.0.1:7951"
	DefaultSocket     = "/run/fusebox/agent.sock"
	// DefaultProxyAddr is the usual --proxy-addr (the proxy is off unless
	// given): loopback, beside the HTTP port.
	DefaultProxyAddr  = "127.0.0.1:7952"
	DefaultDataDir    = "/var/lib/fusebox/agent"
	DefaultEtcdPrefix = "/fusebox/"
)

// Default timings. Tests shorten them through Config.
const (
	DefaultTickInterval    = 100 * time.Millisecond
	DefaultShutdownTimeout = 5 * time.Second
	DefaultMemberTTL       = 10 * time.Second
	// DefaultMaxDependencies fits the manifests' 256 MiB memory limit:
	// an agent at the cap with every dependency in use peaks at ~150 MiB
	// while /metrics is scraped (BenchmarkAgentAtTheCap; at 10,000,
	// 276 MiB: deploy/README.md, "Sizing").
	DefaultMaxDependencies = 5000
	// DefaultMaxSessions is the default of Config.MaxSessions.
	DefaultMaxSessions   = 1024
	DefaultKeyringReload = 10 * time.Second
	// DefaultRejoinInterval: how often an agent with company looks for
	// registered agents memberlist does not list as alive and joins a few
	// (gossip.Rejoin). A round costs nothing while every agent is alive;
	// while some are unreachable it dials up to gossip.RejoinFanout of them
	// (at most one gossip TCP timeout, beside the join loop). Rounds come
	// every half to one and a half intervals, at random, so the first of a
	// half's agents to try again after a heal does so a small fraction of
	// the interval after it.
	DefaultRejoinInterval = 2 * time.Second
	// DefaultHealRejoinInterval: after a rejoin round reached an agent
	// memberlist did not list as alive (a partition healed, or agents came
	// back), the next round comes this soon, for as long as rounds reach
	// missing agents. A join is a push-pull of the whole membership, but a
	// member declared dead is believed alive again only at a higher
	// incarnation, which it takes only when it learns of its death (in the
	// join itself): the first join across makes both sides refute, and it
	// is the next exchange that brings the refutations over. Waiting the
	// full RejoinInterval for it doubled the heal (scale (e)); 500 ms is a
	// few gossip rounds, time for a refutation to spread within its half.
	DefaultHealRejoinInterval = 500 * time.Millisecond
	// DefaultLeaveTimeout: how long Close waits for its leave message to
	// spread (at most half of what ShutdownTimeout leaves). One second is
	// a few gossip rounds: enough for the leave to reach most members
	// directly, and the rest learn it from them.
	DefaultLeaveTimeout = time.Second
	// DefaultJoinRetryMin and DefaultJoinRetryMax bound the backoff of an
	// agent that has no company and retries its joins: the first retry
	// comes quickly (the peers may be starting too), later ones at most
	// every 10 s so that a fleet restarting at once does not dial the
	// registry in lockstep.
	DefaultJoinRetryMin = 200 * time.Millisecond
	DefaultJoinRetryMax = 10 * time.Second
)

// Config configures one agent. Build it with DefaultConfig and check it with
// Validate, which has no side effects. LoadConfig fills it from flags,
// FUSEBOX_* environment variables and a YAML file.
type Config struct {
	// Name is the node name in the gossip cluster, unique in the fleet
	// (optional, default the hostname).
	Name string
	// Zone is the failure zone of this host, used by `scope: zone` policies
	// (optional, default "default").
	Zone string
	// DataDir holds the last good policies and overrides, used at start when
	// etcd is unreachable (optional, default /var/lib/fusebox/agent; created
	// when missing).
	DataDir string
	// GossipAddr is the memberlist bind address, host:port; port 0 picks a
	// free port (optional, default 0.0.0.0:7946).
	GossipAddr string
	// AdvertiseAddr is the address other agents reach this one at, host:port
	// (optional, default: derived from GossipAddr).
	AdvertiseAddr string
	// Join lists gossip addresses of agents to join, host:port (optional).
	Join []string
	// Etcd lists etcd client endpoints (optional: without it the agent runs
	// on its cached policies and Join alone).
	Etcd []string
	// EtcdAuth is TLS and user/password to etcd (optional): EtcdCA,
	// EtcdCert, EtcdKey, EtcdUsername, EtcdPassword, EtcdPasswordFile.
	store.EtcdAuth
	// EtcdPrefix is the key prefix of Fusebox's etcd data (optional, default /fusebox/).
	EtcdPrefix string
	// Socket is the unix socket path of the local API (optional, default
	// /run/fusebox/agent.sock; its directory is created, the socket gets
	// mode 0660). Empty turns the socket off when GRPCAddr is set.
	Socket string
	// GRPCAddr serves the local API on loopback TCP too, host:port
	// (optional, default off).
	GRPCAddr string
	// HTTPAddr serves /metrics, /healthz and /readyz (optional, default
	// 127.0.0.1:7951; empty turns HTTP off).
	HTTPAddr string
	// KeyringFile holds base64 gossip encryption keys (16, 24 or 32 bytes
	// each), one per line, the first one primary (optional, default: no
	// encryption). The file is re-read every KeyringReloadInterval, so a
	// rotation needs no restart: add the new key as a second line on every
	// agent, then move it to the first line everywhere, then remove the old
	// one.
	KeyringFile string
	// InsecureGossip allows plaintext gossip on a GossipAddr that is not
	// loopback (optional, default false: such an agent refuses to start
	// without KeyringFile, because anyone who can reach the port could then
	// speak for a member).
	InsecureGossip bool
	// MaxDependencies caps how many dependencies this agent tracks (optional,
	// default DefaultMaxDependencies, 5000).
	MaxDependencies int
	// MaxRowsPerNode caps the rows (one per dependency) this agent keeps
	// from any one other agent (optional, default 1000); more are dropped
	// with reason too_many_rows.
	MaxRowsPerNode int
	// MaxZones caps the zone records of one dependency under a `scope: zone`
	// policy (optional, default 64); more are dropped with reason
	// too_many_zones.
	MaxZones int
	// Proposers is how many agents propose a breaker trip: the first
	// Proposers agents by rendezvous rank of (dependency, generation) among
	// the live agents of the scope; the others adopt the record through
	// gossip, and propose it themselves only if it has not arrived after
	// ProposerDelay per rank group (optional, default 3).
	Proposers int
	// RejoinInterval is how often an agent with company joins the agents of
	// Join and of the etcd registry that memberlist does not list as alive,
	// so that the halves of a healed partition merge again (optional,
	// default DefaultRejoinInterval).
	RejoinInterval time.Duration
	// HealRejoinInterval is how soon the next rejoin round comes after one
	// that reached an agent memberlist did not list as alive, while rounds
	// keep reaching missing agents (optional, default
	// DefaultHealRejoinInterval; at least 1ms and at most RejoinInterval).
	HealRejoinInterval time.Duration
	// JoinRetryMin and JoinRetryMax bound the exponential backoff between
	// the join attempts of an agent without company (optional, defaults
	// DefaultJoinRetryMin and DefaultJoinRetryMax; min at least 1ms and at
	// most max).
	JoinRetryMin, JoinRetryMax time.Duration
	// ProposerDelay is how long each further rank group waits for a trip
	// record before proposing it itself (optional, default 1s).
	ProposerDelay time.Duration
	// MaxSessions caps the client sessions (Session streams) open at once;
	// one more is refused with ResourceExhausted (optional, default
	// DefaultMaxSessions).
	MaxSessions int
	// MaxSessionBytes bounds the dependency state one session holds: each
	// dependency it follows counts its name and 256 bytes; one more is
	// refused (reason session_bytes) and its deltas with it (optional,
	// default DefaultMaxSessionBytes).
	MaxSessionBytes int
	// MaxSessionsBytes bounds the same for all sessions together
	// (optional, default DefaultMaxSessionsBytes).
	MaxSessionsBytes int
	// IdleRetention is how long a dependency whose breaker ever moved is
	// kept while no agent reports traffic for it; then every agent forgets
	// it, whatever its record, and refuses copies of that record for as
	// long again (optional, default 1h; a dependency whose breaker never
	// moved is forgotten after 2×window).
	IdleRetention time.Duration
	// MaxReportRate bounds the outcomes one session, and all Report calls
	// together, may report for one dependency per second (a second's worth
	// at once); a delta past it is refused whole (reason rate_exceeded),
	// never capped (optional, default DefaultMaxReportRate).
	MaxReportRate int
	// LogFormat is "text" or "json" (optional, default "text").
	LogFormat string
	// LogLevel is "debug", "info", "warn" or "error" (optional, default "info").
	LogLevel string

	// GossipInterval is memberlist's gossip interval (optional, default 300ms).
	GossipInterval time.Duration
	// PushPullInterval is memberlist's full-state exchange interval, which
	// repairs missed broadcasts (optional, default 15s).
	PushPullInterval time.Duration
	// ProbeInterval is memberlist's failure-detection probe interval
	// (optional, default 1s).
	ProbeInterval time.Duration
	// ProbeTimeout is how long a probe waits for an ack; memberlist gets at
	// most half of ProbeInterval (optional, default
	// gossip.DefaultProbeTimeout).
	ProbeTimeout time.Duration
	// GossipTCPTimeout bounds memberlist's stream dials, reads and writes
	// (joins, push-pull; optional, default gossip.DefaultTCPTimeout).
	GossipTCPTimeout time.Duration
	// DeadNodeReclaimTime is how long after its death an agent's name may be
	// taken by one at another address, as a restarted agent with a new pod
	// IP does (optional, default gossip.DefaultDeadNodeReclaimTime).
	DeadNodeReclaimTime time.Duration
	// RetransmitMult scales how often a broadcast is retransmitted
	// (optional, default 4; FIELD-NOTES: 2 loses broadcasts at 20+ nodes).
	RetransmitMult int
	// GossipNodes is how many random members memberlist gossips membership
	// changes to every GossipInterval (optional, default
	// gossip.DefaultGossipNodes; 1..64).
	GossipNodes int
	// RowFanout is how many random members each broadcast round (every
	// GossipInterval) sends a packet of queued records and rows to; 0 sends
	// them in memberlist's own gossip packets instead (optional, default
	// gossip.DefaultRowFanout; 0..64).
	RowFanout int
	// TickInterval is how often the agent ticks the engine and gossips the
	// rows that changed (optional, default 100ms).
	TickInterval time.Duration
	// ShutdownTimeout bounds Close: leave, session close, servers stop
	// (optional, default 5s).
	ShutdownTimeout time.Duration
	// LeaveTimeout is how long Close waits for the gossip leave to spread,
	// at most half of what is left of ShutdownTimeout (optional, default
	// DefaultLeaveTimeout).
	LeaveTimeout time.Duration
	// MemberTTL is the TTL of this agent's etcd registration lease (optional,
	// default 10s, at least 2s).
	MemberTTL time.Duration
	// KeyringReloadInterval is how often KeyringFile is re-read; changes
	// apply without a restart (optional, default 10s).
	KeyringReloadInterval time.Duration

	// Proxy configures the HTTP egress proxy for services in any language
	// (agent/README.md, "The egress proxy"; package agent/proxy).
	Proxy ProxyConfig

	// maxStateBytes overrides the push-pull state budget (tests).
	maxStateBytes int
}

// ProxyConfig configures the agent's HTTP egress proxy.
type ProxyConfig struct {
	// Addr serves the proxy, host:port, e.g. 127.0.0.1:7952; services set
	// it as their HTTP client's proxy, http://ADDR (optional, default off).
	// It must be loopback unless Insecure.
	Addr string
	// Insecure allows a non-loopback Addr (optional, default false: the
	// proxy has no authentication, so whoever reaches it makes this host
	// call any upstream AllowHosts admits).
	Insecure bool
	// AllowHosts, when set, are the only upstream hosts the proxy
	// forwards to: names, *.domain, IPs, CIDR prefixes (optional, default
	// any host but the agent's own listeners).
	AllowHosts []string
	// Routes map upstreams to dependencies, each
	// [SCHEME://]HOST[:PORT]=DEPENDENCY; scheme https makes the proxy
	// originate TLS, h2c speak HTTP/2 without TLS (optional).
	Routes []string
	// AllowAnyDependency lets a caller's Fusebox-Dependency name any
	// dependency (optional, default false: only its upstream's
	// host[:port] or that upstream's Routes name).
	AllowAnyDependency bool
	// MaxConns caps the proxy's client connections (optional, default 1024).
	MaxConns int
	// MaxConnsPerClient caps the proxy's client connections from one
	// address (optional, default 256).
	MaxConnsPerClient int
	// MaxHeaderBytes caps a request's line and headers (optional, default 64 KiB).
	MaxHeaderBytes int
	// MaxBodyBuffer is the largest request body kept for retries (optional,
	// default 1 MiB).
	MaxBodyBuffer int
	// BodyBufferBudget caps the bytes all kept request bodies hold
	// together (optional, default 16 MiB).
	BodyBufferBudget int
	// BodyTimeout bounds a request body's arrival (optional, default 30s).
	BodyTimeout time.Duration
	// CAFile is a PEM bundle of the CAs of upstreams the proxy originates
	// TLS to (optional, default the system's).
	CAFile string
}

// DefaultConfig returns the defaults documented on each field.
func DefaultConfig() Config {
	host, _ := os.Hostname()
	return Config{
		Name:               host,
		Zone:               "default",
		DataDir:            DefaultDataDir,
		GossipAddr:         DefaultGossipAddr,
		Socket:             DefaultSocket,
		GRPCAddr:           DefaultGRPCAddr,
		HTTPAddr:           DefaultHTTPAddr,
		EtcdPrefix:         DefaultEtcdPrefix,
		MaxDependencies:    DefaultMaxDependencies,
		MaxRowsPerNode:     sharedstate.DefaultMaxRowsPerNode,
		MaxZones:           sharedstate.DefaultMaxZones,
		Proposers:          sharedstate.DefaultProposers,
		ProposerDelay:      sharedstate.DefaultProposerDelay,
		RejoinInterval:     DefaultRejoinInterval,
		HealRejoinInterval: DefaultHealRejoinInterval,
		RowFanout:          gossip.DefaultRowFanout,
		JoinRetryMin:       DefaultJoinRetryMin,
		JoinRetryMax:       DefaultJoinRetryMax,
		MaxSessions:        DefaultMaxSessions,
		MaxSessionBytes:    DefaultMaxSessionBytes,
		MaxSessionsBytes:   DefaultMaxSessionsBytes,
		MaxReportRate:      DefaultMaxReportRate,
		IdleRetention:      sharedstate.DefaultIdleRetention,
		LogFormat:          "text",
		LogLevel:           "info",
		GossipInterval:     gossip.DefaultGossipInterval,
		PushPullInterval:   gossip.DefaultPushPullInterval,
		ProbeInterval:      gossip.DefaultProbeInterval,
		RetransmitMult:     gossip.DefaultRetransmitMult,
		GossipNodes:        gossip.DefaultGossipNodes,
		TickInterval:       DefaultTickInterval,
		ShutdownTimeout:    DefaultShutdownTimeout,
		MemberTTL:          DefaultMemberTTL,

		ProbeTimeout:        gossip.DefaultProbeTimeout,
		GossipTCPTimeout:    gossip.DefaultTCPTimeout,
		DeadNodeReclaimTime: gossip.DefaultDeadNodeReclaimTime,
		LeaveTimeout:        DefaultLeaveTimeout,

		KeyringReloadInterval: DefaultKeyringReload,
		Proxy: ProxyConfig{MaxConns: proxy.DefaultMaxConns, MaxConnsPerClient: proxy.DefaultMaxConnsPerClient,
			MaxHeaderBytes: proxy.DefaultMaxHeaderBytes, MaxBodyBuffer: proxy.DefaultMaxBodyBuffer,
			BodyBufferBudget: proxy.DefaultBodyBufferBudget, BodyTimeout: proxy.DefaultBodyTimeout},
	}
}

// Validate reports every problem of the configuration at once, each naming
// the field (by its flag name) and the offending value. It changes nothing.
func (c Config) Validate() error { return c.validate(false) }

// validate is Validate; inProcessAPI (agentopt.Sim.InProcessAPI) lets the agent run
// without a socket or TCP listener for its local API.
func (c Config) validate(inProcessAPI bool) error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("agent config: %s: "+format, append([]any{field}, args...)...))
	}
	switch {
	case strings.TrimSpace(c.Name) == "":
		bad("name", "must not be empty")
	case len(c.Name) > 128 || strings.ContainsAny(c.Name, " \t\r\n/"):
		bad("name", "must be 1-128 characters without blanks or '/', got %q", c.Name)
	}
	switch {
	case c.Zone == "":
		bad("zone", "must not be empty")
	case len(c.Zone) > 64:
		bad("zone", "must be at most 64 characters, got %d", len(c.Zone))
	}
	if c.DataDir == "" {
		bad("data-dir", "must not be empty")
	}
	checkAddr := func(field, v string, optional bool) {
		if v == "" {
			if !optional {
				bad(field, "must not be empty")
			}
			return
		}
		if _, _, err := net.SplitHostPort(v); err != nil {
			bad(field, "must be host:port, got %q", v)
		}
	}
	checkAddr("gossip-addr", c.GossipAddr, false)
	if c.GossipAddr != "" && c.KeyringFile == "" && !c.InsecureGossip && !cliflag.IsLoopback(c.GossipAddr) {
		errs = append(errs, fmt.Errorf("agent config: gossip-addr %s is not loopback and gossip has no keyring: "+
			"give --keyring-file FILE to encrypt and authenticate gossip, or --insecure-gossip to run it in plaintext", c.GossipAddr))
	}
	checkAddr("advertise-addr", c.AdvertiseAddr, true)
	checkAddr("grpc-addr", c.GRPCAddr, true)
	checkAddr("http-addr", c.HTTPAddr, true)
	for _, j := range c.Join {
		checkAddr("join", j, false)
	}
	if _, _, err := net.SplitHostPort(c.GRPCAddr); err == nil && !cliflag.IsLoopback(c.GRPCAddr) {
		bad("grpc-addr", "must be a loopback address (the local API has no auth), got %q", c.GRPCAddr)
	}
	if c.Socket == "" && c.GRPCAddr == "" && !inProcessAPI {
		bad("socket", "must be set when grpc-addr is not (clients need a way in)")
	}
	if len(c.Socket) > 104 {
		bad("socket", "path too long for a unix socket (%d bytes, at most 104)", len(c.Socket))
	}
	for _, v := range c.etcdOptions().Violations() {
		errs = append(errs, errors.New("agent config: "+v))
	}
	if v := store.CheckPrefix(c.EtcdPrefix); v != "" {
		bad("etcd-prefix", "%s", v)
	}
	if c.MaxDependencies <= 0 {
		bad("max-dependencies", "must be > 0, got %d", c.MaxDependencies)
	}
	if c.MaxRowsPerNode <= 0 {
		bad("max-rows-per-node", "must be > 0, got %d", c.MaxRowsPerNode)
	}
	if c.MaxZones <= 0 {
		bad("max-zones", "must be > 0, got %d", c.MaxZones)
	}
	if c.Proposers <= 0 {
		bad("proposers", "must be > 0, got %d", c.Proposers)
	}
	if c.MaxSessions <= 0 {
		bad("max-sessions", "must be > 0, got %d", c.MaxSessions)
	}
	if c.MaxSessionBytes < 1024 {
		bad("max-session-bytes", "must be at least 1024, got %d", c.MaxSessionBytes)
	}
	if c.MaxSessionsBytes < c.MaxSessionBytes {
		bad("max-sessions-bytes", "must be at least --max-session-bytes (%d), got %d", c.MaxSessionBytes, c.MaxSessionsBytes)
	}
	if c.MaxReportRate <= 0 {
		bad("max-report-rate", "must be > 0, got %d", c.MaxReportRate)
	}
	for _, v := range logging.Violations(c.LogFormat, c.LogLevel) {
		errs = append(errs, errors.New("agent config: "+v))
	}
	positive := func(field string, d, min time.Duration) {
		if d < min {
			bad(field, "must be at least %v, got %v", min, d)
		}
	}
	positive("gossip-interval", c.GossipInterval, time.Millisecond)
	positive("push-pull-interval", c.PushPullInterval, time.Millisecond)
	positive("probe-interval", c.ProbeInterval, time.Millisecond)
	positive("tick-interval", c.TickInterval, time.Millisecond)
	positive("shutdown-timeout", c.ShutdownTimeout, 100*time.Millisecond)
	positive("member-ttl", c.MemberTTL, 2*time.Second)
	positive("keyring-reload-interval", c.KeyringReloadInterval, 10*time.Millisecond)
	positive("proposer-delay", c.ProposerDelay, time.Millisecond)
	positive("rejoin-interval", c.RejoinInterval, 10*time.Millisecond)
	positive("heal-rejoin-interval", c.HealRejoinInterval, time.Millisecond)
	if c.HealRejoinInterval > c.RejoinInterval {
		bad("heal-rejoin-interval", "must be at most rejoin-interval (%v), got %v", c.RejoinInterval, c.HealRejoinInterval)
	}
	if c.GossipNodes < 1 || c.GossipNodes > 64 {
		bad("gossip-nodes", "must be in 1..64, got %d", c.GossipNodes)
	}
	if c.RowFanout < 0 || c.RowFanout > 64 {
		bad("row-fanout", "must be in 0..64, got %d", c.RowFanout)
	}
	positive("join-retry-min", c.JoinRetryMin, time.Millisecond)
	if c.JoinRetryMax < c.JoinRetryMin {
		bad("join-retry-max", "must be at least join-retry-min (%v), got %v", c.JoinRetryMin, c.JoinRetryMax)
	}
	positive("probe-timeout", c.ProbeTimeout, time.Millisecond)
	positive("gossip-tcp-timeout", c.GossipTCPTimeout, time.Millisecond)
	positive("dead-node-reclaim-time", c.DeadNodeReclaimTime, time.Millisecond)
	positive("leave-timeout", c.LeaveTimeout, time.Millisecond)
	positive("idle-retention", c.IdleRetention, 100*time.Millisecond)
	if c.RetransmitMult < 1 {
		bad("retransmit-mult", "must be >= 1, got %d", c.RetransmitMult)
	}
	errs = append(errs, c.Proxy.violations()...)
	return errors.Join(errs...)
}

// etcdOptions are the etcd client settings of c.
func (c Config) etcdOptions() store.ClientOptions { return store.ClientOptionsFor(c.Etcd, c.EtcdAuth) }

// violations are the problems of the proxy's settings, named by flag.
func (c ProxyConfig) violations() []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("agent config: %s: "+format, append([]any{field}, args...)...))
	}
	if c.Addr != "" {
		if _, _, err := net.SplitHostPort(c.Addr); err != nil {
			bad("proxy-addr", "must be host:port, got %q", c.Addr)
		} else if !c.Insecure && !cliflag.IsLoopback(c.Addr) {
			errs = append(errs, fmt.Errorf("agent config: proxy-addr %s is not loopback and the proxy has no authentication "+
				"(whoever reaches it makes this host call any upstream): give --insecure-proxy to serve it there, "+
				"and limit its upstreams with --proxy-allow-hosts", c.Addr))
		}
	}
	for _, h := range c.AllowHosts {
		if _, err := proxy.ParseAllowHost(h); err != nil {
			bad("proxy-allow-hosts", "%v", err)
		}
	}
	if err := proxy.ValidateRoutes(c.Routes); err != nil {
		bad("proxy-routes", "%v", err)
	}
	if c.MaxConns <= 0 {
		bad("proxy-max-conns", "must be > 0, got %d", c.MaxConns)
	}
	if c.MaxConnsPerClient <= 0 {
		bad("proxy-max-conns-per-client", "must be > 0, got %d", c.MaxConnsPerClient)
	}
	if c.BodyBufferBudget < 0 {
		bad("proxy-body-buffer-budget", "must be >= 0, got %d", c.BodyBufferBudget)
	}
	if c.BodyTimeout < time.Millisecond {
		bad("proxy-body-timeout", "must be at least 1ms, got %v", c.BodyTimeout)
	}
	if c.MaxHeaderBytes <= 0 {
		bad("proxy-max-header-bytes", "must be > 0, got %d", c.MaxHeaderBytes)
	}
	if c.MaxBodyBuffer < 0 {
		bad("proxy-max-body-buffer", "must be >= 0, got %d", c.MaxBodyBuffer)
	}
	return errs
}
