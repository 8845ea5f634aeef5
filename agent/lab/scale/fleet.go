package scale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/lab/fleet"
	"github.com/fusebox-dev/fusebox/agent/lab/simnet"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// FleetConfig configures a Fleet.
type FleetConfig struct {
	// N is the number of agents (required, at least 1).
	N int
	// Dir holds the agents' data directories (required).
	Dir string
	// Net configures the simulated network (optional, default: no latency,
	// no loss, seed 0).
	Net simnet.Config
	// Policy is the fleet default policy every agent starts with, in place
	// of etcd (optional, default sharedstate.DefaultPolicy()).
	Policy *sharedstate.Policy
	// Tune changes an agent's configuration before it starts (optional):
	// the timings under test. The defaults are agent.DefaultConfig's.
	Tune func(cfg *agent.Config)
	// Seeds is how many agents (the first ones) every other agent joins
	// through (optional, default 3).
	Seeds int
	// Logger receives the agents' logs (optional, default: discarded).
	Logger *slog.Logger
	// Trace receives a line per step of a scenario (optional, default none).
	Trace func(format string, args ...any)
}

// Validate names every problem of the configuration.
func (c FleetConfig) Validate() error {
	var errs []error
	if c.N < 1 {
		errs = append(errs, fmt.Errorf("scale: N must be at least 1, got %d", c.N))
	}
	if c.Dir == "" {
		errs = append(errs, errors.New("scale: Dir is required"))
	}
	if c.Seeds < 0 {
		errs = append(errs, fmt.Errorf("scale: Seeds must be >= 0, got %d", c.Seeds))
	}
	if err := c.Net.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Policy != nil {
		if err := c.Policy.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("scale: Policy: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Fleet is a fleet (package fleet) of N real agents in one process on the
// simulated network, without etcd and without sockets, with what the
// scenarios read from it. Built inside a testing/synctest bubble it runs
// on the bubble's virtual time.
type Fleet struct {
	*fleet.Fleet
	cfg FleetConfig

	heapBase uint64 // live heap before the fleet started
}

// NewFleet starts the network and the agents (the seeds first), each
// joining through the seeds, and waits until every agent counts N agents
// in its membership, or ctx ends. On error it closes what it started.
func NewFleet(ctx context.Context, cfg FleetConfig) (*Fleet, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Seeds == 0 {
		cfg.Seeds = 3
	}
	if cfg.Policy == nil {
		p := sharedstate.DefaultPolicy()
		cfg.Policy = &p
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	f := &Fleet{cfg: cfg, heapBase: heap()}
	netCfg := cfg.Net
	ff, err := fleet.New(ctx, fleet.Config{N: cfg.N, Dir: cfg.Dir, Sim: &netCfg, Policy: cfg.Policy, Seeds: cfg.Seeds,
		Tune: func(_ int, c *agent.Config) {
			c.LogLevel = "error"
			if cfg.Tune != nil {
				cfg.Tune(c)
			}
		},
		Logger: func(int) *slog.Logger { return cfg.Logger },
		Poll:   10 * time.Millisecond})
	if err != nil {
		return nil, fmt.Errorf("scale: %w", err)
	}
	f.Fleet = ff
	return f, nil
}

// Name returns agent i's node name.
func Name(i int) string { return fleet.Name(i) }

// Rejects reports whether a client of agent i would be refused a first
// attempt to dep: the decision clientlib takes from the agent's snapshot.
func (f *Fleet) Rejects(i int, dep string) bool {
	a := f.Agent(i)
	if a == nil {
		return false
	}
	return a.Engine().Snapshot(dep).DecideFirst().Verdict == sharedstate.Reject
}

// FleetOpen reports whether agent i holds dep's fleet breaker open (or
// half-open): the fleet's decision, not this node's own breaker.
func (f *Fleet) FleetOpen(i int, dep string) bool {
	a := f.Agent(i)
	if a == nil {
		return false
	}
	s := a.Engine().Snapshot(dep)
	return s != nil && s.State != sharedstate.Closed
}

// Record returns agent i's fleet breaker record of dep.
func (f *Fleet) Record(i int, dep string) (sharedstate.BreakerRecord, bool) {
	a := f.Agent(i)
	if a == nil {
		return sharedstate.BreakerRecord{}, false
	}
	for _, r := range a.Engine().Records() {
		if r.Dependency == dep && r.Zone == "" {
			return r, true
		}
	}
	return sharedstate.BreakerRecord{}, false
}

// Proposed returns how many transitions of dep to state ("open", "closed")
// agent i proposed itself, from its metrics.
func (f *Fleet) Proposed(i int, dep, state string) int {
	m, err := f.Metrics(context.Background(), i) // in process: no I/O
	if err != nil {
		return 0
	}
	v, _ := m.Value("fusebox_agent_breaker_transitions_total", "dependency", dep, "to", state, "origin", "self")
	return int(v)
}
