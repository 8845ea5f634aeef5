// Command fusebox-agent is the per-host Fusebox daemon. It parses its flags
// into an agent.Config and calls agent.Run.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/fusebox-dev/fusebox/agent"
)

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		if err == flag.ErrHelp {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "fusebox-agent:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := agent.Run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "fusebox-agent:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (agent.Config, error) {
	cfg := agent.DefaultConfig()
	fs := flag.NewFlagSet("fusebox-agent", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: fusebox-agent [flags]

The per-host Fusebox daemon: local services report outcomes to it, it gossips
per-dependency counts with the other agents and holds one fleet-wide breaker
and retry budget per dependency.

Status: this build parses and validates its configuration only; the daemon
(gossip, local API, etcd watch, metrics) arrives with the agent issue.

Flags:
`)
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.Name, "name", cfg.Name, "node name in the gossip cluster")
	fs.StringVar(&cfg.Zone, "zone", cfg.Zone, "failure zone of this host (for scope: zone policies)")
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory for the last good policies and overrides")
	fs.StringVar(&cfg.GossipAddr, "gossip-addr", cfg.GossipAddr, "memberlist bind address, host:port")
	fs.StringVar(&cfg.AdvertiseAddr, "advertise-addr", cfg.AdvertiseAddr, "address other agents reach this one at, host:port (default: from --gossip-addr)")
	join := fs.String("join", "", "comma-separated gossip addresses of agents to join, host:port,…")
	etcd := fs.String("etcd", "", "comma-separated etcd client endpoints")
	fs.StringVar(&cfg.EtcdCA, "etcd-ca", "", "CA bundle to verify etcd's TLS certificate")
	fs.StringVar(&cfg.EtcdCert, "etcd-cert", "", "client certificate for etcd TLS")
	fs.StringVar(&cfg.EtcdKey, "etcd-key", "", "client key for etcd TLS")
	fs.StringVar(&cfg.EtcdUsername, "etcd-user", "", "etcd user name")
	fs.StringVar(&cfg.EtcdPassword, "etcd-password", "", "etcd password")
	fs.StringVar(&cfg.EtcdPrefix, "etcd-prefix", cfg.EtcdPrefix, "key prefix of Fusebox's data in etcd")
	fs.StringVar(&cfg.Socket, "socket", cfg.Socket, "unix socket of the local API (directory created, mode 0660)")
	fs.StringVar(&cfg.GRPCAddr, "grpc-addr", cfg.GRPCAddr, "also serve the local API on this loopback TCP address, e.g. 127.0.0.1:7950")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", cfg.HTTPAddr, "address of /metrics, /healthz and /readyz")
	fs.StringVar(&cfg.KeyringFile, "keyring-file", "", "file of base64 gossip keys, one per line, the first primary")
	fs.IntVar(&cfg.MaxDependencies, "max-dependencies", cfg.MaxDependencies, "most dependencies this agent tracks; more are refused")
	fs.StringVar(&cfg.LogFormat, "log-format", cfg.LogFormat, "log format: text or json")
	fs.StringVar(&cfg.LogLevel, "log-level", cfg.LogLevel, "log level: debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	cfg.Join = splitList(*join)
	cfg.Etcd = splitList(*etcd)
	return cfg, cfg.Validate()
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
