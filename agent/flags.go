package agent

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/fusebox-dev/fusebox/sharedstate/cliflag"
)

// EnvPrefix prefixes the environment variable of every flag: --gossip-addr
// is FUSEBOX_GOSSIP_ADDR.
const EnvPrefix = "FUSEBOX_"

// EnvName returns the environment variable that sets the flag name.
func EnvName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// listValue is a comma-separated list flag.
type listValue struct{ p *[]string }

func (l listValue) String() string {
	if l.p == nil {
		return ""
	}
	return strings.Join(*l.p, ",")
}

func (l listValue) Set(s string) error {
	*l.p = cliflag.SplitList(s)
	return nil
}

// NewFlagSet returns the agent's flags bound to cfg (each flag's default is
// cfg's current value), plus --config for the YAML file. Flag names are the
// field names Validate reports, the keys of the YAML file and, upper-cased
// behind FUSEBOX_, the environment variables.
func NewFlagSet(cfg *Config) *flag.FlagSet {
	fs := flag.NewFlagSet("fusebox-agent", flag.ContinueOnError)
	fs.String("config", "", "YAML file of settings, keys named like the flags (flags and environment win)")
	fs.StringVar(&cfg.Name, "name", cfg.Name, "node name in the gossip cluster, unique in the fleet")
	fs.StringVar(&cfg.Zone, "zone", cfg.Zone, "failure zone of this host (for scope: zone policies)")
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory for the last good policies and overrides")
	fs.StringVar(&cfg.GossipAddr, "gossip-addr", cfg.GossipAddr, "memberlist bind address, host:port (port 0: any free port)")
	fs.StringVar(&cfg.AdvertiseAddr, "advertise-addr", cfg.AdvertiseAddr, "address other agents reach this one at, host:port (default: from --gossip-addr)")
	fs.Var(listValue{&cfg.Join}, "join", "comma-separated gossip addresses of agents to join, host:port,…")
	fs.Var(listValue{&cfg.Etcd}, "etcd", "comma-separated etcd client endpoints (also used to find agents to join)")
	fs.StringVar(&cfg.EtcdCA, "etcd-ca", cfg.EtcdCA, "CA bundle to verify etcd's TLS certificate")
	fs.StringVar(&cfg.EtcdCert, "etcd-cert", cfg.EtcdCert, "client certificate for etcd TLS")
	fs.StringVar(&cfg.EtcdKey, "etcd-key", cfg.EtcdKey, "client key for etcd TLS")
	fs.StringVar(&cfg.EtcdUsername, "etcd-user", cfg.EtcdUsername, "etcd user name")
	fs.StringVar(&cfg.EtcdPassword, "etcd-password", cfg.EtcdPassword, "etcd password (prefer FUSEBOX_ETCD_PASSWORD)")
	fs.StringVar(&cfg.EtcdPasswordFile, "etcd-password-file", cfg.EtcdPasswordFile, "file holding the etcd password (mode 0600 or stricter; keeps it out of the command line)")
	fs.StringVar(&cfg.EtcdPrefix, "etcd-prefix", cfg.EtcdPrefix, "key prefix of Fusebox's data in etcd")
	fs.StringVar(&cfg.Socket, "socket", cfg.Socket, "unix socket of the local API (directory created, mode 0660)")
	fs.StringVar(&cfg.GRPCAddr, "grpc-addr", cfg.GRPCAddr, "also serve the local API on this loopback TCP address, e.g. 127.0.0.1:7950")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", cfg.HTTPAddr, "address of /metrics, /healthz and /readyz (empty: off)")
	fs.StringVar(&cfg.KeyringFile, "keyring-file", cfg.KeyringFile, "file of base64 gossip keys, one per line, the first primary")
	fs.BoolVar(&cfg.InsecureGossip, "insecure-gossip", cfg.InsecureGossip, "allow plaintext gossip on a non-loopback --gossip-addr (without it, such an agent needs --keyring-file)")
	fs.IntVar(&cfg.MaxDependencies, "max-dependencies", cfg.MaxDependencies, "most dependencies this agent tracks; more are refused")
	fs.IntVar(&cfg.MaxRowsPerNode, "max-rows-per-node", cfg.MaxRowsPerNode, "most rows (dependencies) kept from any one other agent; more are dropped")
	fs.IntVar(&cfg.MaxZones, "max-zones", cfg.MaxZones, "most zone records per dependency (scope: zone); more are dropped")
	fs.IntVar(&cfg.Proposers, "proposers", cfg.Proposers, "how many agents, by rendezvous rank, propose a breaker trip (the others adopt it)")
	fs.DurationVar(&cfg.RejoinInterval, "rejoin-interval", cfg.RejoinInterval, "how often agents of --join and the etcd registry that gossip does not list as alive are joined again (partition heal)")
	fs.DurationVar(&cfg.ProposerDelay, "proposer-delay", cfg.ProposerDelay, "how long each further rank group waits for a trip record before proposing it")
	fs.IntVar(&cfg.MaxSessions, "max-sessions", cfg.MaxSessions, "most client sessions open at once; more are refused (ResourceExhausted)")
	fs.IntVar(&cfg.MaxSessionBytes, "max-session-bytes", cfg.MaxSessionBytes, "most bytes of dependency state one client session holds (a followed dependency: its name + 256); more dependencies are refused")
	fs.IntVar(&cfg.MaxSessionsBytes, "max-sessions-bytes", cfg.MaxSessionsBytes, "most bytes of dependency state all client sessions hold together")
	fs.DurationVar(&cfg.IdleRetention, "idle-retention", cfg.IdleRetention, "how long a dependency whose breaker ever moved is kept without traffic anywhere before every agent forgets it")
	fs.IntVar(&cfg.MaxReportRate, "max-report-rate", cfg.MaxReportRate, "most outcomes a second one client session (and all Report calls together) may report for one dependency; a delta past it is refused")
	fs.StringVar(&cfg.LogFormat, "log-format", cfg.LogFormat, "log format: text or json")
	fs.StringVar(&cfg.LogLevel, "log-level", cfg.LogLevel, "log level: debug, info, warn or error")
	fs.DurationVar(&cfg.GossipInterval, "gossip-interval", cfg.GossipInterval, "memberlist gossip interval")
	fs.DurationVar(&cfg.PushPullInterval, "push-pull-interval", cfg.PushPullInterval, "memberlist full-state exchange interval")
	fs.DurationVar(&cfg.ProbeInterval, "probe-interval", cfg.ProbeInterval, "memberlist failure-detection probe interval")
	fs.IntVar(&cfg.RetransmitMult, "retransmit-mult", cfg.RetransmitMult, "memberlist broadcast retransmit multiplier (at least 4 recommended)")
	fs.DurationVar(&cfg.TickInterval, "tick-interval", cfg.TickInterval, "how often changed rows are gossiped and breakers re-evaluated")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", cfg.ShutdownTimeout, "bound on a graceful shutdown")
	fs.DurationVar(&cfg.MemberTTL, "member-ttl", cfg.MemberTTL, "TTL of the agent's etcd registration lease")
	fs.DurationVar(&cfg.KeyringReloadInterval, "keyring-reload-interval", cfg.KeyringReloadInterval, "how often --keyring-file is re-read (rotation without restart)")
	fs.StringVar(&cfg.Proxy.Addr, "proxy-addr", cfg.Proxy.Addr, "serve the HTTP egress proxy for services in any language on this address, e.g. "+DefaultProxyAddr+" (HTTP_PROXY=http://ADDR; empty: off)")
	fs.BoolVar(&cfg.Proxy.Insecure, "insecure-proxy", cfg.Proxy.Insecure, "allow a non-loopback --proxy-addr (the proxy has no authentication: limit who reaches it, and its upstreams with --proxy-allow-hosts)")
	fs.Var(listValue{&cfg.Proxy.AllowHosts}, "proxy-allow-hosts", "comma-separated upstream hosts the proxy may call: names, *.domain, IPs, CIDR prefixes (default: any host but the agent's own listeners)")
	fs.Var(listValue{&cfg.Proxy.Routes}, "proxy-routes", "comma-separated [SCHEME://]HOST[:PORT]=DEPENDENCY: the dependency requests to HOST count under; scheme https: the proxy speaks TLS to it, h2c: HTTP/2 without TLS")
	fs.IntVar(&cfg.Proxy.MaxConns, "proxy-max-conns", cfg.Proxy.MaxConns, "most client connections the proxy keeps open; one more is answered 503")
	fs.IntVar(&cfg.Proxy.MaxHeaderBytes, "proxy-max-header-bytes", cfg.Proxy.MaxHeaderBytes, "largest request line and headers the proxy accepts; larger is answered 431")
	fs.IntVar(&cfg.Proxy.MaxBodyBuffer, "proxy-max-body-buffer", cfg.Proxy.MaxBodyBuffer, "largest request body (bytes) the proxy keeps for retries; a larger one gets a single attempt")
	fs.StringVar(&cfg.Proxy.CAFile, "proxy-ca-file", cfg.Proxy.CAFile, "PEM bundle of the CAs of upstreams the proxy speaks TLS to (default: the system's)")
	return fs
}

// LoadConfig builds a Config from, lowest precedence first: DefaultConfig,
// the YAML file named by --config (or FUSEBOX_CONFIG), FUSEBOX_* environment
// variables (read through getenv, os.Getenv when nil), and the flags in
// args. It validates the result. A flag.ErrHelp from -h is returned as is.
func LoadConfig(args []string, getenv func(string) string, usage io.Writer) (Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	// Pass 1: find --config without applying anything.
	var scratch Config
	pre := NewFlagSet(&scratch)
	pre.SetOutput(io.Discard)
	if err := pre.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			NewFlagSetWithUsage(&scratch, usage).Usage()
		}
		return Config{}, err
	}
	path := pre.Lookup("config").Value.String()
	if path == "" {
		path = getenv(EnvName("config"))
	}

	cfg := DefaultConfig()
	fs := NewFlagSetWithUsage(&cfg, usage)
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return Config{}, fmt.Errorf("agent config: config: %w", err)
		}
		if err := applyYAML(fs, data); err != nil {
			return Config{}, fmt.Errorf("agent config: %s: %w", path, err)
		}
	}
	var envErrs []error
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "config" {
			return
		}
		if v, ok := lookup(getenv, EnvName(f.Name)); ok {
			if err := fs.Set(f.Name, v); err != nil {
				envErrs = append(envErrs, fmt.Errorf("agent config: %s: %s=%q: %v", f.Name, EnvName(f.Name), v, err))
			}
		}
	})
	if len(envErrs) > 0 {
		return Config{}, errors.Join(envErrs...)
	}
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("agent config: unexpected arguments %q", fs.Args())
	}
	return cfg, cfg.Validate()
}

// lookup reads an environment variable; an empty value counts as unset
// (getenv cannot tell them apart).
func lookup(getenv func(string) string, name string) (string, bool) {
	v := getenv(name)
	return v, v != ""
}

// NewFlagSetWithUsage is NewFlagSet with the command's help text, written to
// w (os.Stderr when nil).
func NewFlagSetWithUsage(cfg *Config, w io.Writer) *flag.FlagSet {
	fs := NewFlagSet(cfg)
	if w == nil {
		w = os.Stderr
	}
	fs.SetOutput(w)
	fs.Usage = func() {
		fmt.Fprint(w, `Usage: fusebox-agent [flags]

The per-host Fusebox daemon: local services report outcomes to it over a unix
socket, it gossips per-dependency counts with the other agents, follows
policies and overrides from etcd, and holds one fleet-wide breaker and retry
budget per dependency.

Every flag can also be set by the environment variable FUSEBOX_<NAME>
(--gossip-addr: FUSEBOX_GOSSIP_ADDR) and by the key <name> in the YAML file
given with --config. Flags win over the environment, which wins over the file.

Flags:
`)
		fs.PrintDefaults()
	}
	return fs
}

// applyYAML sets the flags named by the keys of a YAML mapping. Unknown keys
// are refused; lists may be YAML sequences or comma-separated strings;
// durations are strings like "200ms".
func applyYAML(fs *flag.FlagSet, data []byte) error {
	var m map[string]any
	if err := yaml.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("not a YAML mapping: %w", err)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var errs []error
	for _, k := range keys {
		if k == "config" || fs.Lookup(k) == nil {
			errs = append(errs, fmt.Errorf("unknown key %q", k))
			continue
		}
		s, err := yamlScalar(m[k])
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", k, err))
			continue
		}
		if err := fs.Set(k, s); err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", k, err))
		}
	}
	return errors.Join(errs...)
}

func yamlScalar(v any) (string, error) {
	switch x := v.(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	case bool:
		return strconv.FormatBool(x), nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case []any:
		parts := make([]string, 0, len(x))
		for _, e := range x {
			s, err := yamlScalar(e)
			if err != nil {
				return "", err
			}
			parts = append(parts, s)
		}
		return strings.Join(parts, ","), nil
	case time.Duration:
		return x.String(), nil
	default:
		return "", fmt.Errorf("unsupported value %v (%T)", v, v)
	}
}
