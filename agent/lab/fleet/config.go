package fleet

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/lab/simnet"
	"github.com/fusebox-dev/fusebox/coordinator"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// Config configures a Fleet.
type Config struct {
	// N is how many agents New starts (required, at least 1; 0 is allowed
	// with Etcd: the fleet starts with its etcd and coordinator only, and
	// Add brings agents).
	N int
	// Dir holds the agents' data directories, the etcd's data and the
	// processes' logs (required). Unix sockets go to a short directory of
	// their own (socket paths are limited to 104 bytes).
	Dir string
	// Sim runs the agents in process on a simulated network with this
	// configuration, without sockets: clients call each agent's local API
	// in process (optional; not with Etcd or Binary). Nil: real memberlist
	// on 127.0.0.1 port 0 and a unix socket per agent.
	Sim *simnet.Config
	// Etcd starts an embedded etcd (optional): the agents register in it,
	// find each other there and follow policies and overrides from it.
	Etcd bool
	// EtcdEndpoints are the client URLs of an etcd the caller runs (a
	// multi-member cluster of embeddedtest.StartCluster, etcd in network
	// namespaces), used as Etcd uses its own (optional; not with Etcd or
	// Sim).
	EtcdEndpoints []string
	// Coordinator starts a coordinator on the etcd, in process, with short
	// gossip and tick intervals (optional; needs Etcd or EtcdEndpoints).
	Coordinator bool
	// CoordinatorTune changes the coordinator's configuration before it
	// starts (optional): its base is coordinator.DefaultConfig() named
	// "coordinator", every listener on 127.0.0.1 port 0, no data directory.
	CoordinatorTune func(cfg *coordinator.Config)
	// CoordinatorOptions are added to the coordinator's own options
	// (optional).
	CoordinatorOptions []coordinator.Option
	// Policy is the fleet default policy (optional). With etcd (Etcd or
	// EtcdEndpoints) it is written there (policies/_default) before any
	// agent starts; without, every agent starts with it in place of etcd
	// (default sharedstate.DefaultPolicy()). An agent.WithDefaultPolicy in
	// Options sets the agents' own default instead, which etcd's overrides.
	Policy *sharedstate.Policy
	// Binary runs every agent as a process of this fusebox-agent binary,
	// its flags rendered from the agent.Config the fleet would start in
	// process (Args), its log in Dir/NAME.log (optional; not with Sim).
	Binary string
	// BinaryOf names the fusebox-agent binary agent i runs, when not Binary
	// (optional; needs Binary; "" means Binary): another build beside this
	// one, e.g. the last release in a rolling upgrade. Its flags are
	// Args(cfg) too, so only flags that build knows may differ from
	// agent.DefaultConfig()'s.
	BinaryOf func(i int) string
	// Seeds is how many agents (the first ones) every other agent joins
	// through (optional, default 3). The seeds start one after the other,
	// each joining those before it; the others start StartParallel at a
	// time.
	Seeds int
	// Tune changes agent i's configuration before it starts (optional).
	// The fleet's base is agent.DefaultConfig() with its name (Name(i)),
	// zone z1, data directory, gossip address, seeds to join, etcd
	// endpoints and local API (a socket, or none on the simulated network;
	// HTTP for processes only).
	Tune func(i int, cfg *agent.Config)
	// Options returns more options for in-process agent i, applied after
	// the fleet's own (logger, clock, default policy) so that they win
	// (optional; not with Binary: a process takes flags only).
	Options func(i int) []agent.Option
	// Namespaces runs each agent process in a network namespace the caller
	// built (soak.Lab builds them): agent i in NS(i), its gossip on
	// Addr(i):7946 and its HTTP on Addr(i):7951 (optional; needs Binary,
	// root and iproute2; not with Etcd or Coordinator, which listen on the
	// host's loopback). The agents' sockets are files, reached from here;
	// their /metrics is read from inside their namespace.
	Namespaces Namespaces
	// Clock is the engines' clock of in-process agents (optional, default
	// the system clock).
	Clock sharedstate.Clock
	// Logger returns agent i's logger (in-process agents; optional,
	// default: discarded). Processes log to Dir/NAME.log.
	Logger func(i int) *slog.Logger
	// Poll is how often a wait checks its condition (optional, default
	// 10 ms in process, 250 ms for processes, which are scraped).
	Poll time.Duration
}

// StartParallel is how many agents New starts at once after the seeds.
const StartParallel = 8

// Name returns agent i's node name.
func Name(i int) string { return fmt.Sprintf("agent-%03d", i) }

// Validate names every problem of the configuration.
func (c Config) Validate() error {
	var errs []error
	etcd := c.Etcd || len(c.EtcdEndpoints) > 0
	if c.N < 0 || (c.N == 0 && !etcd) {
		errs = append(errs, fmt.Errorf("fleet: N must be at least 1 (0 only with Etcd), got %d", c.N))
	}
	if c.Dir == "" {
		errs = append(errs, errors.New("fleet: Dir is required"))
	}
	if c.Seeds < 0 {
		errs = append(errs, fmt.Errorf("fleet: Seeds must be >= 0, got %d", c.Seeds))
	}
	if c.Poll < 0 {
		errs = append(errs, fmt.Errorf("fleet: Poll must be >= 0, got %v", c.Poll))
	}
	if c.Sim != nil {
		if err := c.Sim.Validate(); err != nil {
			errs = append(errs, err)
		}
		if etcd {
			errs = append(errs, errors.New("fleet: Sim and Etcd: the simulated network has no etcd"))
		}
		if c.Binary != "" {
			errs = append(errs, errors.New("fleet: Sim and Binary: processes cannot join the simulated network"))
		}
	}
	if c.Etcd && len(c.EtcdEndpoints) > 0 {
		errs = append(errs, errors.New("fleet: Etcd and EtcdEndpoints: one etcd, started here or run by the caller"))
	}
	if c.Coordinator && !etcd {
		errs = append(errs, errors.New("fleet: Coordinator needs Etcd"))
	}
	if c.BinaryOf != nil && c.Binary == "" {
		errs = append(errs, errors.New("fleet: BinaryOf needs Binary"))
	}
	if c.Options != nil && c.Binary != "" {
		errs = append(errs, errors.New("fleet: Options with Binary: a process takes flags only"))
	}
	if c.Namespaces != nil {
		if c.Binary == "" {
			errs = append(errs, errors.New("fleet: Namespaces needs Binary: only processes run in a namespace"))
		}
		if c.Etcd || c.Coordinator {
			errs = append(errs, errors.New("fleet: Namespaces with Etcd or Coordinator: they listen on the host's loopback, which no namespace reaches"))
		}
	}
	if c.Binary != "" {
		if st, err := os.Stat(c.Binary); err != nil {
			errs = append(errs, fmt.Errorf("fleet: Binary: %w", err))
		} else if st.IsDir() || st.Mode()&0o111 == 0 {
			errs = append(errs, fmt.Errorf("fleet: Binary: %s is not an executable file", c.Binary))
		}
		if c.Policy != nil && !etcd {
			errs = append(errs, errors.New("fleet: Policy with Binary needs Etcd: a process takes its policy from etcd"))
		}
	}
	if c.Policy != nil {
		if err := c.Policy.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("fleet: Policy: %w", err))
		}
	}
	return errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	if c.Seeds == 0 {
		c.Seeds = 3
	}
	if c.Poll == 0 {
		c.Poll = 10 * time.Millisecond
		if c.Binary != "" {
			c.Poll = 250 * time.Millisecond
		}
	}
	return c
}

// Quick shortens cfg's gossip, probe, tick, shutdown and registration
// timings for tests on loopback: membership in a fraction of a second, a
// departure noticed within seconds.
func Quick(cfg *agent.Config) {
	cfg.GossipInterval = 50 * time.Millisecond
	cfg.PushPullInterval = time.Second
	cfg.ProbeInterval = 200 * time.Millisecond
	cfg.TickInterval = 50 * time.Millisecond
	cfg.ShutdownTimeout = 3 * time.Second
	cfg.MemberTTL = 2 * time.Second
}
