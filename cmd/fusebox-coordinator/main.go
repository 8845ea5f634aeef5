package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/fusebox-dev/fusebox/coordinator"
	"github.com/fusebox-dev/fusebox/sharedstate/cliflag"
)

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "fusebox-coordinator:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := coordinator.Run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "fusebox-coordinator:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string, usage io.Writer) (coordinator.Config, error) {
	cfg := coordinator.DefaultConfig()
	fs := flag.NewFlagSet("fusebox-coordinator", flag.ContinueOnError)
	fs.SetOutput(usage)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: fusebox-coordinator [flags]

Fusebox's control plane: the Admin API behind fuseboxctl, the fleet observer
(a gossip member with role "observer"), /api/v1/fleet, /api/v1/events (SSE),
/metrics and /healthz. Everything durable is in etcd, so several coordinators
can run side by side.

Without --etcd it starts an embedded etcd in --data-dir and logs the client
URL for the agents. Without --tokens-file it refuses non-loopback listen
addresses and every loopback caller is an admin.

Flags:
`)
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.Name, "name", cfg.Name, `the observer's gossip node name (default "coordinator-<hostname>")`)
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "data directory of the embedded etcd (used when --etcd is empty)")
	fs.DurationVar(&cfg.AuditRetention, "audit-retention", cfg.AuditRetention, "delete audit entries older than this (0: no age limit); one coordinator trims, leaving a summary entry")
	fs.IntVar(&cfg.AuditMaxEntries, "audit-max-entries", cfg.AuditMaxEntries, "keep at most this many audit entries, the newest (0: no limit)")
	fs.StringVar(&cfg.EmbeddedEtcdURL, "embedded-etcd-url", cfg.EmbeddedEtcdURL, "client URL the embedded etcd listens on (agents use it as --etcd)")
	fs.StringVar(&cfg.EmbeddedEtcdCert, "embedded-etcd-cert", "", "serve the embedded etcd over TLS with this certificate (also its client certificate towards it)")
	fs.StringVar(&cfg.EmbeddedEtcdKey, "embedded-etcd-key", "", "key of --embedded-etcd-cert (mode 0600 or stricter)")
	fs.StringVar(&cfg.EmbeddedEtcdClientCA, "embedded-etcd-client-ca", "", "CA the embedded etcd's clients' certificates must be signed by (required with TLS)")
	fs.BoolVar(&cfg.InsecureEmbeddedEtcd, "insecure-embedded-etcd", false, "allow a non-loopback --embedded-etcd-url without TLS (anyone reaching it can write policies and overrides)")
	fs.StringVar(&cfg.EmbeddedEtcdCompaction, "embedded-etcd-compaction", "periodic", "embedded etcd auto-compaction mode: periodic or revision")
	fs.StringVar(&cfg.EmbeddedEtcdCompactionRetention, "embedded-etcd-compaction-retention", "1h", "history the embedded etcd keeps: a duration (periodic) or a number of revisions (revision)")
	fs.Int64Var(&cfg.EmbeddedEtcdQuotaBytes, "embedded-etcd-quota-bytes", 1<<30, "backend size at which the embedded etcd refuses writes")
	etcd := fs.String("etcd", "", "comma-separated endpoints of an external etcd (default: start an embedded one)")
	fs.StringVar(&cfg.EtcdCA, "etcd-ca", "", "CA bundle to verify etcd's TLS certificate")
	fs.StringVar(&cfg.EtcdCert, "etcd-cert", "", "client certificate for etcd TLS")
	fs.StringVar(&cfg.EtcdKey, "etcd-key", "", "client key for etcd TLS")
	fs.StringVar(&cfg.EtcdUsername, "etcd-user", "", "etcd user name")
	fs.StringVar(&cfg.EtcdPassword, "etcd-password", "", "etcd password")
	fs.StringVar(&cfg.EtcdPasswordFile, "etcd-password-file", "", "file holding the etcd password (mode 0600 or stricter; keeps it out of the command line)")
	fs.StringVar(&cfg.EtcdPrefix, "etcd-prefix", cfg.EtcdPrefix, "key prefix of Fusebox's data in etcd")
	fs.StringVar(&cfg.GRPCAddr, "grpc-addr", cfg.GRPCAddr, "address of the Admin gRPC API")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", cfg.HTTPAddr, "address of /api/v1/*, /metrics and /healthz")
	fs.StringVar(&cfg.GossipAddr, "gossip-addr", cfg.GossipAddr, "memberlist bind address of the fleet observer, host:port")
	fs.StringVar(&cfg.GossipAdvertiseAddr, "gossip-advertise-addr", "", "address agents reach the observer at (default: from --gossip-addr)")
	join := fs.String("join", "", "comma-separated gossip addresses of agents to join (default: the agents registered in etcd)")
	fs.DurationVar(&cfg.RejoinInterval, "rejoin-interval", cfg.RejoinInterval, "how often agents of --join and the etcd registry that gossip does not list as alive are joined again (partition heal)")
	fs.StringVar(&cfg.KeyringFile, "keyring-file", "", "gossip keyring, the agents' format (must match theirs)")
	fs.BoolVar(&cfg.InsecureGossip, "insecure-gossip", false, "allow plaintext gossip on a non-loopback --gossip-addr (without it, such an observer needs --keyring-file)")
	fs.StringVar(&cfg.TokensFile, "tokens-file", "", `file of "ROLE TOKEN [NAME]" lines (ROLE viewer or admin); without it only loopback is served`)
	fs.StringVar(&cfg.TLSCert, "tls-cert", "", "TLS certificate of the Admin API and HTTP")
	fs.StringVar(&cfg.TLSKey, "tls-key", "", "TLS key of the Admin API and HTTP")
	fs.StringVar(&cfg.TLSClientCA, "tls-client-ca", "", "require client certificates signed by this CA (mTLS)")
	fs.IntVar(&cfg.MaxDependencies, "max-dependencies", cfg.MaxDependencies, "most dependencies the fleet view tracks")
	fs.DurationVar(&cfg.HistoryFine, "history-fine", cfg.HistoryFine, "how long the what-if history keeps counts at window/100 (at least 100ms)")
	fs.DurationVar(&cfg.HistoryCoarse, "history-coarse", cfg.HistoryCoarse, "how long the what-if history keeps counts at 1s (at least --history-fine)")
	fs.IntVar(&cfg.HistoryMaxDependencies, "history-max-dependencies", cfg.HistoryMaxDependencies, "most dependencies the what-if history keeps (about 1 MiB each when busy)")
	fs.StringVar(&cfg.LogFormat, "log-format", cfg.LogFormat, "log format: text or json")
	fs.StringVar(&cfg.LogLevel, "log-level", cfg.LogLevel, "log level: debug, info, warn or error")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", cfg.ShutdownTimeout, "how long a graceful stop may take")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	cfg.Etcd = cliflag.SplitList(*etcd)
	cfg.Join = cliflag.SplitList(*join)
	return cfg, cfg.Validate()
}
