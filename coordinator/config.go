package coordinator

import (
	"errors"
	"fmt"
	"net"
)

// Config configures one coordinator. Build it with DefaultConfig and check it
// with Validate, which has no side effects.
type Config struct {
	// DataDir holds the embedded etcd's data when Etcd is empty (optional,
	// default /var/lib/fusebox/coordinator).
	DataDir string
	// Etcd lists external etcd endpoints (optional: empty starts an embedded
	// etcd in DataDir and prints its client URL for the agents).
	Etcd []string
	// EtcdCA, EtcdCert, EtcdKey configure TLS to an external etcd (optional).
	EtcdCA, EtcdCert, EtcdKey string
	// EtcdUsername and EtcdPassword authenticate to etcd (optional).
	EtcdUsername, EtcdPassword string
	// EtcdPrefix is the key prefix of Fusebox's etcd data (optional, default /fusebox/).
	EtcdPrefix string
	// GRPCAddr serves the Admin API (optional, default 127.0.0.1:7960).
	GRPCAddr string
	// HTTPAddr serves the dashboard, JSON API, SSE and /metrics (optional,
	// default 127.0.0.1:7070).
	HTTPAddr string
	// GossipAddr is the fleet observer's memberlist bind address (optional,
	// default 127.0.0.1:7947).
	GossipAddr string
	// Join lists agents' gossip addresses to join, host:port (optional).
	Join []string
	// TokensFile holds "ROLE TOKEN" lines, ROLE viewer or admin (optional:
	// without it the coordinator serves loopback only and says so).
	TokensFile string
	// TLSCert and TLSKey serve the Admin API and HTTP over TLS (optional).
	TLSCert, TLSKey string
	// TLSClientCA requires client certificates signed by this CA (optional, mTLS).
	TLSClientCA string
	// LogFormat is "text" or "json" (optional, default "text").
	LogFormat string
}

// DefaultConfig returns the defaults documented on each field.
func DefaultConfig() Config {
	return Config{
		DataDir:    "/var/lib/fusebox/coordinator",
		EtcdPrefix: "/fusebox/",
		GRPCAddr:   "127.0.0.1:7960",
		HTTPAddr:   "127.0.0.1:7070",
		GossipAddr: "127.0.0.1:7947",
		LogFormat:  "text",
	}
}

// Validate reports every problem of the configuration at once.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("coordinator config: %s: "+format, append([]any{field}, args...)...))
	}
	if len(c.Etcd) == 0 && c.DataDir == "" {
		bad("data-dir", "must be set when --etcd is not (the embedded etcd keeps its data there)")
	}
	for field, v := range map[string]string{"grpc-addr": c.GRPCAddr, "http-addr": c.HTTPAddr, "gossip-addr": c.GossipAddr} {
		if _, _, err := net.SplitHostPort(v); err != nil {
			bad(field, "must be host:port, got %q", v)
		}
	}
	for _, j := range c.Join {
		if _, _, err := net.SplitHostPort(j); err != nil {
			bad("join", "must be host:port, got %q", j)
		}
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		bad("tls-cert", "tls-cert and tls-key go together")
	}
	if c.TLSClientCA != "" && c.TLSCert == "" {
		bad("tls-client-ca", "needs tls-cert and tls-key")
	}
	if (c.EtcdCert == "") != (c.EtcdKey == "") {
		bad("etcd-cert", "etcd-cert and etcd-key go together")
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		bad("log-format", `must be "text" or "json", got %q`, c.LogFormat)
	}
	return errors.Join(errs...)
}
