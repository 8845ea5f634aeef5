package agent

import (
	"io"

	"github.com/spf13/pflag"

	"github.com/fusebox-dev/fusebox/sharedstate/daemonflag"
)

// about is the help's text on what fusebox-agent is.
const about = `The per-host Fusebox daemon: local services report outcomes to it over a unix
socket, it gossips per-dependency counts with the other agents, follows
policies and overrides from etcd, and holds one fleet-wide breaker and retry
budget per dependency.`

// NewFlagSet returns the agent's flags bound to cfg (each flag's default is
// cfg's current value), plus --config for the YAML file. Flag names are the
// field names Validate reports, the keys of the YAML file and, upper-cased
// behind FUSEBOX_, the environment variables (daemonflag.Load). A flag whose
// empty default means something says what in its usage, "(default: off)";
// the README's table of the agent's settings is checked against this set.
func NewFlagSet(cfg *Config) *pflag.FlagSet {
	fs := daemonflag.NewFlagSet("fusebox-agent", about)
	fs.StringVar(&cfg.Name, "name", cfg.Name, "node name in the gossip cluster, unique in the fleet (default: the host name)")
	fs.StringVar(&cfg.Zone, "zone", cfg.Zone, "failure zone of this host (for scope: zone policies)")
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory for the last good policies and overrides")
	fs.StringVar(&cfg.GossipAddr, "gossip-addr", cfg.GossipAddr, "memberlist bind address, host:port (port 0: any free port)")
	fs.StringVar(&cfg.AdvertiseAddr, "advertise-addr", cfg.AdvertiseAddr, "address other agents reach this one at, host:port (default: from --gossip-addr)")
	fs.Var(daemonflag.List(&cfg.Join), "join", "comma-separated gossip addresses of agents to join, host:port,… (default: none; with --etcd, the agents registered there)")
	fs.Var(daemonflag.List(&cfg.Etcd), "etcd", "comma-separated etcd client endpoints, also used to find agents to join (default: none: the agent runs on its cached policies and --join alone)")
	cfg.EtcdAuth.RegisterFlags(fs)
	fs.StringVar(&cfg.EtcdPrefix, "etcd-prefix", cfg.EtcdPrefix, "key prefix of Fusebox's data in etcd")
	fs.StringVar(&cfg.Socket, "socket", cfg.Socket, "unix socket of the local API (directory created, mode 0660); empty: no socket, with --grpc-addr only")
	fs.StringVar(&cfg.GRPCAddr, "grpc-addr", cfg.GRPCAddr, "also serve the local API on this loopback TCP address, e.g. 127.0.0.1:7950 (default: off)")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", cfg.HTTPAddr, "address of /metrics, /healthz and /readyz; --http-addr= (empty) turns HTTP off")
	fs.StringVar(&cfg.KeyringFile, "keyring-file", cfg.KeyringFile, "file of base64 gossip keys, one per line, the first primary (default: none: gossip is neither encrypted nor authenticated)")
	fs.BoolVar(&cfg.InsecureGossip, "insecure-gossip", cfg.InsecureGossip, "allow plaintext gossip on a non-loopback --gossip-addr (without it, such an agent needs --keyring-file)")
	fs.IntVar(&cfg.MaxDependencies, "max-dependencies", cfg.MaxDependencies, "most dependencies this agent tracks; more are refused")
	fs.IntVar(&cfg.MaxRowsPerNode, "max-rows-per-node", cfg.MaxRowsPerNode, "most rows (dependencies) kept from any one other agent; more are dropped")
	fs.IntVar(&cfg.MaxZones, "max-zones", cfg.MaxZones, "most zone records per dependency (scope: zone); more are dropped")
	fs.IntVar(&cfg.Proposers, "proposers", cfg.Proposers, "how many agents, by rendezvous rank, propose a breaker trip (the others adopt it)")
	fs.DurationVar(&cfg.RejoinInterval, "rejoin-interval", cfg.RejoinInterval, "how often agents of --join and the etcd registry that gossip does not list as alive are joined again (partition heal)")
	fs.DurationVar(&cfg.HealRejoinInterval, "heal-rejoin-interval", cfg.HealRejoinInterval, "how soon the next rejoin round comes after one that reached an agent gossip did not list as alive (a heal), while rounds keep doing so")
	fs.DurationVar(&cfg.JoinRetryMin, "join-retry-min", cfg.JoinRetryMin, "first wait between join attempts of an agent without company (doubling)")
	fs.DurationVar(&cfg.JoinRetryMax, "join-retry-max", cfg.JoinRetryMax, "longest wait between join attempts of an agent without company")
	fs.DurationVar(&cfg.ProposerDelay, "proposer-delay", cfg.ProposerDelay, "how long each further rank group waits for a trip record before proposing it")
	fs.IntVar(&cfg.MaxSessions, "max-sessions", cfg.MaxSessions, "most client sessions open at once; more are refused (ResourceExhausted)")
	fs.IntVar(&cfg.MaxSessionBytes, "max-session-bytes", cfg.MaxSessionBytes, "most bytes of dependency state one client session holds (a followed dependency: its name + 256); more dependencies are refused")
	fs.IntVar(&cfg.MaxSessionsBytes, "max-sessions-bytes", cfg.MaxSessionsBytes, "most bytes of dependency state all client sessions hold together")
	fs.DurationVar(&cfg.IdleRetention, "idle-retention", cfg.IdleRetention, "how long a dependency whose breaker ever moved is kept without traffic anywhere before every agent forgets it")
	fs.IntVar(&cfg.MaxReportRate, "max-report-rate", cfg.MaxReportRate, "most outcomes a second one client session (and all Report calls together) may report for one dependency; a delta past it is refused")
	daemonflag.LogFlags(fs, &cfg.LogFormat, &cfg.LogLevel)
	fs.DurationVar(&cfg.GossipInterval, "gossip-interval", cfg.GossipInterval, "memberlist gossip interval")
	fs.DurationVar(&cfg.PushPullInterval, "push-pull-interval", cfg.PushPullInterval, "memberlist full-state exchange interval")
	fs.DurationVar(&cfg.ProbeInterval, "probe-interval", cfg.ProbeInterval, "memberlist failure-detection probe interval")
	fs.DurationVar(&cfg.ProbeTimeout, "probe-timeout", cfg.ProbeTimeout, "how long a memberlist probe waits for an ack (at most half of --probe-interval is used)")
	fs.DurationVar(&cfg.GossipTCPTimeout, "gossip-tcp-timeout", cfg.GossipTCPTimeout, "bound on memberlist's stream dials, reads and writes (joins, push-pull)")
	fs.DurationVar(&cfg.DeadNodeReclaimTime, "dead-node-reclaim-time", cfg.DeadNodeReclaimTime, "how long after its death an agent's name may be taken by one at another address")
	fs.IntVar(&cfg.RetransmitMult, "retransmit-mult", cfg.RetransmitMult, "memberlist broadcast retransmit multiplier (at least 4 recommended)")
	fs.IntVar(&cfg.GossipNodes, "gossip-nodes", cfg.GossipNodes, "members memberlist gossips membership changes (alive, suspect, dead) to every --gossip-interval")
	fs.IntVar(&cfg.RowFanout, "row-fanout", cfg.RowFanout, "members each broadcast round sends a packet of records and rows to, every --gossip-interval (0: in memberlist's gossip packets)")
	fs.DurationVar(&cfg.TickInterval, "tick-interval", cfg.TickInterval, "how often changed rows are gossiped and breakers re-evaluated")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", cfg.ShutdownTimeout, "bound on a graceful shutdown")
	fs.DurationVar(&cfg.LeaveTimeout, "leave-timeout", cfg.LeaveTimeout, "how long a shutdown waits for the gossip leave to spread (at most half of what --shutdown-timeout leaves)")
	fs.DurationVar(&cfg.MemberTTL, "member-ttl", cfg.MemberTTL, "TTL of the agent's etcd registration lease")
	fs.DurationVar(&cfg.KeyringReloadInterval, "keyring-reload-interval", cfg.KeyringReloadInterval, "how often --keyring-file is re-read (rotation without restart)")
	fs.StringVar(&cfg.Proxy.Addr, "proxy-addr", cfg.Proxy.Addr, "serve the HTTP egress proxy for services in any language on this address, e.g. "+DefaultProxyAddr+"; services set http_proxy=http://ADDR (agent/README.md says what each client needs) (default: off)")
	fs.BoolVar(&cfg.Proxy.Insecure, "insecure-proxy", cfg.Proxy.Insecure, "allow a non-loopback --proxy-addr (the proxy has no authentication: limit who reaches it, and its upstreams with --proxy-allow-hosts)")
	fs.Var(daemonflag.List(&cfg.Proxy.AllowHosts), "proxy-allow-hosts", "comma-separated upstream hosts the proxy may call: names, *.domain, IPs, CIDR prefixes (default: any host but the agent's own listeners)")
	fs.Var(daemonflag.List(&cfg.Proxy.Routes), "proxy-routes", "comma-separated [SCHEME://]HOST[:PORT]=DEPENDENCY: the dependency requests to HOST count under; scheme https: the proxy speaks TLS to it, h2c: HTTP/2 without TLS (default: none: a request counts under its host's name)")
	fs.BoolVar(&cfg.Proxy.AllowAnyDependency, "proxy-allow-any-dependency", cfg.Proxy.AllowAnyDependency, "let a Fusebox-Dependency header name any dependency, not only the upstream's host[:port] or its --proxy-routes name (then any local process can speak for any dependency)")
	fs.IntVar(&cfg.Proxy.MaxConns, "proxy-max-conns", cfg.Proxy.MaxConns, "most client connections the proxy keeps open; one more is answered 503")
	fs.IntVar(&cfg.Proxy.MaxConnsPerClient, "proxy-max-conns-per-client", cfg.Proxy.MaxConnsPerClient, "most client connections the proxy keeps open from one address; one more is answered 503")
	fs.IntVar(&cfg.Proxy.MaxHeaderBytes, "proxy-max-header-bytes", cfg.Proxy.MaxHeaderBytes, "largest request line and headers the proxy accepts; larger is answered 431")
	fs.IntVar(&cfg.Proxy.MaxBodyBuffer, "proxy-max-body-buffer", cfg.Proxy.MaxBodyBuffer, "largest request body (bytes) the proxy keeps for retries; a larger one gets a single attempt")
	fs.IntVar(&cfg.Proxy.BodyBufferBudget, "proxy-body-buffer-budget", cfg.Proxy.BodyBufferBudget, "most bytes the request bodies the proxy keeps for retries hold together; a body that finds them held gets a single attempt")
	fs.DurationVar(&cfg.Proxy.BodyTimeout, "proxy-body-timeout", cfg.Proxy.BodyTimeout, "bound on the arrival of a request's whole body; a client that has not sent it by then is cut off")
	fs.StringVar(&cfg.Proxy.CAFile, "proxy-ca-file", cfg.Proxy.CAFile, "PEM bundle of the CAs of upstreams the proxy speaks TLS to (default: the system's)")
	return fs
}

// LoadConfig builds a Config from, lowest precedence first: DefaultConfig,
// the YAML file named by --config (or FUSEBOX_CONFIG), FUSEBOX_* environment
// variables (read through getenv, os.Getenv when nil), and the flags in
// args (daemonflag.Load). It validates the result. -h writes the help to
// usage and returns pflag.ErrHelp.
func LoadConfig(args []string, getenv func(string) string, usage io.Writer) (Config, error) {
	cfg := DefaultConfig()
	if err := daemonflag.Load(NewFlagSet(&cfg), args, getenv, usage); err != nil {
		return Config{}, err
	}
	return cfg, cfg.Validate()
}
