// Command fusebox-coordinator is Fusebox's control plane. It parses its flags
// into a coordinator.Config and calls coordinator.Run.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/fusebox-dev/fusebox/coordinator"
)

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		if err == flag.ErrHelp {
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

func parseFlags(args []string) (coordinator.Config, error) {
	cfg := coordinator.DefaultConfig()
	fs := flag.NewFlagSet("fusebox-coordinator", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: fusebox-coordinator [flags]

Fusebox's control plane: the Admin API behind fuseboxctl, the fleet observer,
the dashboard, the JSON/SSE API and /metrics. Without --etcd it starts an
embedded etcd in --data-dir.

Status: this build parses and validates its configuration only; the servers
arrive with the control-plane issue.

Flags:
`)
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "data directory of the embedded etcd (used when --etcd is empty)")
	etcd := fs.String("etcd", "", "comma-separated endpoints of an external etcd (default: start an embedded one)")
	fs.StringVar(&cfg.EtcdCA, "etcd-ca", "", "CA bundle to verify etcd's TLS certificate")
	fs.StringVar(&cfg.EtcdCert, "etcd-cert", "", "client certificate for etcd TLS")
	fs.StringVar(&cfg.EtcdKey, "etcd-key", "", "client key for etcd TLS")
	fs.StringVar(&cfg.EtcdUsername, "etcd-user", "", "etcd user name")
	fs.StringVar(&cfg.EtcdPassword, "etcd-password", "", "etcd password")
	fs.StringVar(&cfg.EtcdPrefix, "etcd-prefix", cfg.EtcdPrefix, "key prefix of Fusebox's data in etcd")
	fs.StringVar(&cfg.GRPCAddr, "grpc-addr", cfg.GRPCAddr, "address of the Admin gRPC API")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", cfg.HTTPAddr, "address of the dashboard, /api/v1/*, /metrics and /healthz")
	fs.StringVar(&cfg.GossipAddr, "gossip-addr", cfg.GossipAddr, "memberlist bind address of the fleet observer, host:port")
	join := fs.String("join", "", "comma-separated gossip addresses of agents to join")
	fs.StringVar(&cfg.TokensFile, "tokens-file", "", `file of "ROLE TOKEN" lines (ROLE viewer or admin); without it only loopback is served`)
	fs.StringVar(&cfg.TLSCert, "tls-cert", "", "TLS certificate of the Admin API and HTTP")
	fs.StringVar(&cfg.TLSKey, "tls-key", "", "TLS key of the Admin API and HTTP")
	fs.StringVar(&cfg.TLSClientCA, "tls-client-ca", "", "require client certificates signed by this CA (mTLS)")
	fs.StringVar(&cfg.LogFormat, "log-format", cfg.LogFormat, "log format: text or json")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	cfg.Etcd = splitList(*etcd)
	cfg.Join = splitList(*join)
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
