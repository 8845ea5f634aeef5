package coordinator

import (
	"io"

	"github.com/spf13/pflag"

	"github.com/fusebox-dev/fusebox/sharedstate/daemonflag"
)

// about is the help's text on what fusebox-coordinator is.
const about = `Fusebox's control plane: the Admin API behind fuseboxctl, the fleet observer
(a gossip member with role "observer"), /api/v1/fleet, /api/v1/events (SSE),
/metrics and /healthz. Everything durable is in etcd, so several coordinators
can run side by side.

Without --etcd it starts an embedded etcd in --data-dir and logs the client
URL for the agents. Without --tokens-file it refuses non-loopback listen
addresses and every loopback caller is an admin.`

// NewFlagSet returns fusebox-coordinator's flags bound to cfg (each flag's
// default is cfg's current value), plus --config for the YAML file. Flag
// names are the field names Validate reports, the keys of the YAML file
// and, upper-cased behind FUSEBOX_, the environment variables
// (daemonflag.Load), as for the agent. The README's table of the
// coordinator's settings is checked against this set.
func NewFlagSet(cfg *Config) *pflag.FlagSet {
	fs := daemonflag.NewFlagSet("fusebox-coordinator", about)
	fs.StringVar(&cfg.Name, "name", cfg.Name, "the observer's gossip node name (default: coordinator-<hostname>)")
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "data directory of the embedded etcd (used when --etcd is empty)")
	fs.DurationVar(&cfg.AuditRetention, "audit-retention", cfg.AuditRetention, "delete audit entries older than this (0: no age limit); one coordinator trims, leaving a summary entry")
	fs.IntVar(&cfg.AuditMaxEntries, "audit-max-entries", cfg.AuditMaxEntries, "keep at most this many audit entries, the newest (0: no limit)")
	fs.StringVar(&cfg.EmbeddedEtcdURL, "embedded-etcd-url", cfg.EmbeddedEtcdURL, "client URL the embedded etcd listens on (agents use it as --etcd)")
	fs.StringVar(&cfg.EmbeddedEtcdCert, "embedded-etcd-cert", cfg.EmbeddedEtcdCert, "serve the embedded etcd over TLS with this certificate (also its client certificate towards it) (default: none: plain HTTP)")
	fs.StringVar(&cfg.EmbeddedEtcdKey, "embedded-etcd-key", cfg.EmbeddedEtcdKey, "key of --embedded-etcd-cert (mode 0600 or stricter) (default: none)")
	fs.StringVar(&cfg.EmbeddedEtcdClientCA, "embedded-etcd-client-ca", cfg.EmbeddedEtcdClientCA, "CA the embedded etcd's clients' certificates must be signed by, required with --embedded-etcd-cert (default: none)")
	fs.BoolVar(&cfg.InsecureEmbeddedEtcd, "insecure-embedded-etcd", cfg.InsecureEmbeddedEtcd, "allow a non-loopback --embedded-etcd-url without TLS (anyone reaching it can write policies and overrides)")
	fs.StringVar(&cfg.EmbeddedEtcdCompaction, "embedded-etcd-compaction", cfg.EmbeddedEtcdCompaction, "embedded etcd auto-compaction mode: periodic or revision")
	fs.StringVar(&cfg.EmbeddedEtcdCompactionRetention, "embedded-etcd-compaction-retention", cfg.EmbeddedEtcdCompactionRetention, "history the embedded etcd keeps: a duration (periodic) or a number of revisions (revision)")
	fs.Int64Var(&cfg.EmbeddedEtcdQuotaBytes, "embedded-etcd-quota-bytes", cfg.EmbeddedEtcdQuotaBytes, "backend size at which the embedded etcd refuses writes")
	fs.Var(daemonflag.List(&cfg.Etcd), "etcd", "comma-separated endpoints of an external etcd (default: none: start an embedded one)")
	cfg.EtcdAuth.RegisterFlags(fs)
	fs.StringVar(&cfg.EtcdPrefix, "etcd-prefix", cfg.EtcdPrefix, "key prefix of Fusebox's data in etcd")
	fs.StringVar(&cfg.GRPCAddr, "grpc-addr", cfg.GRPCAddr, "address of the Admin gRPC API")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", cfg.HTTPAddr, "address of /api/v1/*, /metrics and /healthz")
	fs.StringVar(&cfg.GossipAddr, "gossip-addr", cfg.GossipAddr, "memberlist bind address of the fleet observer, host:port")
	fs.StringVar(&cfg.GossipAdvertiseAddr, "gossip-advertise-addr", cfg.GossipAdvertiseAddr, "address agents reach the observer at (default: from --gossip-addr)")
	fs.Var(daemonflag.List(&cfg.Join), "join", "comma-separated gossip addresses of agents to join (default: the agents registered in etcd)")
	fs.DurationVar(&cfg.RejoinInterval, "rejoin-interval", cfg.RejoinInterval, "how often agents of --join and the etcd registry that gossip does not list as alive are joined again (partition heal)")
	fs.StringVar(&cfg.KeyringFile, "keyring-file", cfg.KeyringFile, "gossip keyring, the agents' format, which must match theirs (default: none: gossip is neither encrypted nor authenticated)")
	fs.BoolVar(&cfg.InsecureGossip, "insecure-gossip", cfg.InsecureGossip, "allow plaintext gossip on a non-loopback --gossip-addr (without it, such an observer needs --keyring-file)")
	fs.StringVar(&cfg.TokensFile, "tokens-file", cfg.TokensFile, `file of "ROLE TOKEN [NAME]" lines, ROLE viewer or admin (default: none: only loopback is served, every caller an admin)`)
	fs.StringVar(&cfg.TLSCert, "tls-cert", cfg.TLSCert, "TLS certificate of the Admin API and HTTP (default: none: plaintext)")
	fs.StringVar(&cfg.TLSKey, "tls-key", cfg.TLSKey, "TLS key of the Admin API and HTTP (default: none)")
	fs.StringVar(&cfg.TLSClientCA, "tls-client-ca", cfg.TLSClientCA, "require client certificates signed by this CA, mTLS (default: none: no client certificates)")
	fs.IntVar(&cfg.MaxDependencies, "max-dependencies", cfg.MaxDependencies, "most dependencies the fleet view tracks")
	fs.DurationVar(&cfg.HistoryFine, "history-fine", cfg.HistoryFine, "how long the history keeps counts at window/100 (at least 100ms)")
	fs.DurationVar(&cfg.HistoryCoarse, "history-coarse", cfg.HistoryCoarse, "how long the history keeps counts at 1s (at least --history-fine)")
	fs.IntVar(&cfg.MaxEventStreams, "max-event-streams", cfg.MaxEventStreams, "most event streams open at once (/api/v1/events and Admin Watch; each holds memory and a file descriptor); past it new ones are refused with 503")
	fs.IntVar(&cfg.MaxEventStreamsPerIdentity, "max-event-streams-per-identity", cfg.MaxEventStreamsPerIdentity, "most event streams one identity (token name; loopback without --tokens-file) may have open; past it new ones are refused with 429")
	fs.IntVar(&cfg.HistoryMaxDependencies, "history-max-dependencies", cfg.HistoryMaxDependencies, "most dependencies the history keeps (about 1 MiB each when busy); when full, a busier or pinned one takes the least-used one's place")
	daemonflag.LogFlags(fs, &cfg.LogFormat, &cfg.LogLevel)
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", cfg.ShutdownTimeout, "how long a graceful stop may take")
	return fs
}

// LoadConfig builds a Config the way the agent's LoadConfig does, from,
// lowest precedence first: DefaultConfig, the YAML file named by --config
// (or FUSEBOX_CONFIG), FUSEBOX_* environment variables (read through
// getenv, os.Getenv when nil), and the flags in args (daemonflag.Load). It
// validates the result. -h writes the help to usage and returns
// pflag.ErrHelp.
func LoadConfig(args []string, getenv func(string) string, usage io.Writer) (Config, error) {
	cfg := DefaultConfig()
	if err := daemonflag.Load(NewFlagSet(&cfg), args, getenv, usage); err != nil {
		return Config{}, err
	}
	return cfg, cfg.Validate()
}
