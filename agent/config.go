package agent

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
)

// Default ports and paths (DESIGN.md "Names").
const (
	DefaultGossipAddr = "0.0.0.0:7946"
	DefaultGRPCAddr   = "" // loopback TCP is off unless asked for, e.g. 127.0.0.1:7950
	DefaultHTTPAddr   = "127.0.0.1:7951"
	DefaultSocket     = "/run/fusebox/agent.sock"
	DefaultDataDir    = "/var/lib/fusebox/agent"
)

// Config configures one agent. Build it with DefaultConfig and check it with
// Validate, which has no side effects.
type Config struct {
	// Name is the node name in the gossip cluster (optional, default the hostname).
	Name string
	// Zone is the failure zone of this host, used by `scope: zone` policies
	// (optional, default "default").
	Zone string
	// DataDir holds the last good policies and overrides, used at start when
	// etcd is unreachable (optional, default /var/lib/fusebox/agent).
	DataDir string
	// GossipAddr is the memberlist bind address, host:port (optional, default 0.0.0.0:7946).
	GossipAddr string
	// AdvertiseAddr is the address other agents reach this one at, host:port
	// (optional, default: derived from GossipAddr).
	AdvertiseAddr string
	// Join lists gossip addresses of agents to join, host:port (optional).
	Join []string
	// Etcd lists etcd client endpoints (optional: without it the agent runs
	// on its cached policies and --join alone).
	Etcd []string
	// EtcdCA, EtcdCert, EtcdKey configure TLS to etcd (optional).
	EtcdCA, EtcdCert, EtcdKey string
	// EtcdUsername and EtcdPassword authenticate to etcd (optional).
	EtcdUsername, EtcdPassword string
	// EtcdPrefix is the key prefix of Fusebox's etcd data (optional, default /fusebox/).
	EtcdPrefix string
	// Socket is the unix socket path of the local API (optional, default
	// /run/fusebox/agent.sock; its directory is created, mode 0660).
	Socket string
	// GRPCAddr serves the local API on loopback TCP too, host:port
	// (optional, default off).
	GRPCAddr string
	// HTTPAddr serves /metrics, /healthz and /readyz (optional, default 127.0.0.1:7951).
	HTTPAddr string
	// KeyringFile holds base64 gossip encryption keys, one per line, the
	// first one primary (optional, default: no encryption).
	KeyringFile string
	// MaxDependencies caps how many dependencies this agent tracks (optional,
	// default 10000).
	MaxDependencies int
	// LogFormat is "text" or "json" (optional, default "text").
	LogFormat string
	// LogLevel is "debug", "info", "warn" or "error" (optional, default "info").
	LogLevel string
}

// DefaultConfig returns the defaults documented on each field.
func DefaultConfig() Config {
	host, _ := os.Hostname()
	return Config{
		Name:            host,
		Zone:            "default",
		DataDir:         DefaultDataDir,
		GossipAddr:      DefaultGossipAddr,
		Socket:          DefaultSocket,
		GRPCAddr:        DefaultGRPCAddr,
		HTTPAddr:        DefaultHTTPAddr,
		EtcdPrefix:      "/fusebox/",
		MaxDependencies: 10000,
		LogFormat:       "text",
		LogLevel:        "info",
	}
}

// Validate reports every problem of the configuration at once, each naming
// the field and the offending value. It changes nothing.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("agent config: %s: "+format, append([]any{field}, args...)...))
	}
	if strings.TrimSpace(c.Name) == "" {
		bad("name", "must not be empty")
	}
	if c.Zone == "" {
		bad("zone", "must not be empty")
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
	checkAddr("advertise-addr", c.AdvertiseAddr, true)
	checkAddr("grpc-addr", c.GRPCAddr, true)
	checkAddr("http-addr", c.HTTPAddr, true)
	for _, j := range c.Join {
		checkAddr("join", j, false)
	}
	if c.GRPCAddr != "" {
		if host, _, err := net.SplitHostPort(c.GRPCAddr); err == nil {
			if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
				bad("grpc-addr", "must be a loopback address (the local API has no auth), got %q", c.GRPCAddr)
			}
		}
	}
	if c.Socket == "" && c.GRPCAddr == "" {
		bad("socket", "must be set when grpc-addr is not (clients need a way in)")
	}
	if (c.EtcdCert == "") != (c.EtcdKey == "") {
		bad("etcd-cert", "etcd-cert and etcd-key go together, got cert %q key %q", c.EtcdCert, c.EtcdKey)
	}
	if c.EtcdPassword != "" && c.EtcdUsername == "" {
		bad("etcd-password", "needs etcd-user")
	}
	if !strings.HasPrefix(c.EtcdPrefix, "/") || !strings.HasSuffix(c.EtcdPrefix, "/") {
		bad("etcd-prefix", "must start and end with '/', got %q", c.EtcdPrefix)
	}
	if c.MaxDependencies <= 0 {
		bad("max-dependencies", "must be > 0, got %d", c.MaxDependencies)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		bad("log-format", `must be "text" or "json", got %q`, c.LogFormat)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("log-level", `must be debug, info, warn or error, got %q`, c.LogLevel)
	}
	return errors.Join(errs...)
}
