package scale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/internal/agentopt"
	"github.com/fusebox-dev/fusebox/agent/lab/simnet"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
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
	// Dilate runs the fleet Dilate times slower than the protocol it
	// simulates (optional, default 1; at least 1): every agent timing
	// (DilateAgent), the links' latency and jitter (DilateLink), the
	// clients' report period and the scenarios' waits are multiplied by
	// it, and the engines run on a Clock that slow. The scenarios report
	// protocol time: measured times divided by Dilate, rates multiplied.
	// Net.Link and Tune are given in protocol time.
	Dilate float64
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
	if c.Dilate != 0 && !(c.Dilate >= 1 && c.Dilate <= 1000) {
		errs = append(errs, fmt.Errorf("scale: Dilate must be in [1, 1000], got %v", c.Dilate))
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

// Fleet is N real agents (gossip, engine, state and local API code as in
// production) in one process on a simulated network, without etcd and
// without sockets: clients report through each agent's in-process API.
type Fleet struct {
	cfg FleetConfig
	Net *simnet.Network

	heapBase uint64 // live heap before the fleet started
	k        float64
	clock    *Clock

	mu     sync.Mutex
	agents []*agent.Agent
	inside []agentopt.Inside // each agent's in-process handles
	addrs  []string
}

// StartParallel is how many agents NewFleet starts at once.
const StartParallel = 8

// NewFleet starts the network and the agents (the seeds first), each
// joining through the seeds, and waits until every agent counts N agents
// in its membership, or ctx ends. On error it closes what it started.
func NewFleet(ctx context.Context, cfg FleetConfig) (_ *Fleet, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Seeds == 0 {
		cfg.Seeds = 3
	}
	if cfg.Dilate == 0 {
		cfg.Dilate = 1
	}
	cfg.Net.Link = DilateLink(cfg.Net.Link, cfg.Dilate)
	if cfg.Policy == nil {
		p := sharedstate.DefaultPolicy()
		cfg.Policy = &p
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	base := heap()
	n, err := simnet.New(cfg.Net)
	if err != nil {
		return nil, err
	}
	f := &Fleet{cfg: cfg, Net: n, heapBase: base, k: cfg.Dilate, clock: NewClock(cfg.Dilate),
		agents: make([]*agent.Agent, cfg.N), inside: make([]agentopt.Inside, cfg.N), addrs: make([]string, cfg.N)}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	trs := make([]*simnet.Transport, cfg.N)
	for i := range cfg.N {
		if trs[i], err = n.NewTransport(""); err != nil {
			for _, tr := range trs[:i] {
				tr.Shutdown()
			}
			return nil, err
		}
		f.addrs[i] = trs[i].Addr()
	}
	// The seeds one after the other (each joins the ones before), then the
	// others StartParallel at a time.
	seeds := min(cfg.Seeds, cfg.N)
	for i := range seeds {
		if err := f.startAt(ctx, i, trs[i]); err != nil {
			for _, tr := range trs[i+1:] {
				tr.Shutdown()
			}
			return nil, err
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, cfg.N)
	sem := make(chan struct{}, StartParallel)
	for i := seeds; i < cfg.N; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = f.startAt(ctx, i, trs[i])
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := f.WaitMembership(ctx, cfg.N); err != nil {
		return nil, err
	}
	return f, nil
}

// registry lists the running agents' addresses, as the etcd member
// registry lists the agents that started: agents join and reconcile
// membership through it as a production fleet does.
func (f *Fleet) registry() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for i, a := range f.agents {
		if a != nil {
			out = append(out, f.addrs[i])
		}
	}
	return out
}

// Name returns agent i's node name.
func Name(i int) string { return fmt.Sprintf("agent-%03d", i) }

func (f *Fleet) start(ctx context.Context, i int, tr *simnet.Transport) (*agent.Agent, agentopt.Inside, error) {
	cfg := agent.DefaultConfig()
	cfg.Name = Name(i)
	cfg.Zone = "z1"
	cfg.DataDir = filepath.Join(f.cfg.Dir, cfg.Name)
	cfg.GossipAddr = tr.Addr()
	cfg.Socket, cfg.GRPCAddr, cfg.HTTPAddr = "", "", ""
	cfg.LogLevel = "error"
	// Simulated addresses are not loopback; the simulated network is the
	// process itself, so plaintext is what a keyring would cost nothing to
	// avoid here (and would add CPU the runs lack).
	cfg.InsecureGossip = true
	for s := range min(f.cfg.Seeds, f.cfg.N) {
		if s != i && f.addrs[s] != "" { // agent 0 starts alone; a restarted seed joins the others
			cfg.Join = append(cfg.Join, f.addrs[s])
		}
	}
	if f.cfg.Tune != nil {
		f.cfg.Tune(&cfg)
	}
	DilateAgent(&cfg, f.k)
	var in agentopt.Inside
	a, err := agent.New(cfg, agentopt.WithSim(agentopt.Sim{Transport: tr, InProcessAPI: true, Peers: f.registry, Attach: func(x agentopt.Inside) { in = x }}),
		agent.WithDefaultPolicy(*f.cfg.Policy), agent.WithLogger(f.cfg.Logger), agent.WithClock(f.clock))
	if err != nil {
		tr.Shutdown()
		return nil, in, fmt.Errorf("scale: agent %d: %w", i, err)
	}
	if err := a.Start(ctx); err != nil {
		a.Close()
		return nil, in, fmt.Errorf("scale: agent %d: %w", i, err)
	}
	return a, in, nil
}

// Size returns N.
func (f *Fleet) Size() int { return f.cfg.N }

// Dilation returns the fleet's dilation factor K (FleetConfig.Dilate).
func (f *Fleet) Dilation() float64 { return f.k }

// Real returns how long protocol time d lasts on this fleet: d × K.
func (f *Fleet) Real(d time.Duration) time.Duration { return dilate(d, f.k) }

// Protocol returns the protocol time a real duration d stands for: d / K.
func (f *Fleet) Protocol(d time.Duration) time.Duration {
	return time.Duration(float64(d) / f.k)
}

// Agent returns agent i (the current one, after restarts).
func (f *Fleet) Agent(i int) *agent.Agent {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.agents[i]
}

// Addr returns agent i's gossip address on the simulated network.
func (f *Fleet) Addr(i int) string { return f.addrs[i] }

// Close closes every agent (leaving the gossip, all at once) and then the
// network. Idempotent.
func (f *Fleet) Close() {
	f.mu.Lock()
	agents := append([]*agent.Agent(nil), f.agents...)
	for i := range f.agents {
		f.agents[i] = nil
	}
	f.mu.Unlock()
	// All at once: each waits up to its (dilated) leave timeout.
	var wg sync.WaitGroup
	for _, a := range agents {
		if a != nil {
			wg.Go(func() { a.Close() })
		}
	}
	wg.Wait()
	f.Net.Close()
}

// Restart closes agent i (it leaves the gossip, as on SIGTERM) and starts
// a new one with the same name, address and data directory, which joins
// through the seeds. It returns when the new agent has started; Ready
// tells when it has joined.
func (f *Fleet) Restart(ctx context.Context, i int) error {
	f.mu.Lock()
	old := f.agents[i]
	f.agents[i] = nil
	f.mu.Unlock()
	if old != nil {
		old.Close()
	}
	tr, err := f.Net.NewTransport(f.addrs[i])
	if err != nil {
		return err
	}
	return f.startAt(ctx, i, tr)
}

// startAt starts agent i on tr and puts it in the fleet.
func (f *Fleet) startAt(ctx context.Context, i int, tr *simnet.Transport) error {
	a, in, err := f.start(ctx, i, tr)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.agents[i], f.inside[i] = a, in
	f.mu.Unlock()
	return nil
}

// WaitMembership waits until every agent counts want agents (itself
// included) among its alive members, or ctx ends.
func (f *Fleet) WaitMembership(ctx context.Context, want int) error {
	return f.waitAll(ctx, func(i int, a *agent.Agent) bool { return a.Gossip().NumAgents() == want },
		func(i int, a *agent.Agent) string {
			return fmt.Sprintf("%s counts %d agents, want %d", Name(i), a.Gossip().NumAgents(), want)
		})
}

// waitAll polls ok for every agent every 10 ms of protocol time until it
// holds for all of them or ctx ends; the error names the first agent for
// which it did not.
func (f *Fleet) waitAll(ctx context.Context, ok func(int, *agent.Agent) bool, why func(int, *agent.Agent) string) error {
	t := time.NewTicker(f.Real(10 * time.Millisecond))
	defer t.Stop()
	for {
		bad := -1
		for i := range f.cfg.N {
			a := f.Agent(i)
			if a == nil || !ok(i, a) {
				bad = i
				break
			}
		}
		if bad < 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			msg := Name(bad) + " is not running"
			if a := f.Agent(bad); a != nil {
				msg = why(bad, a)
			}
			return fmt.Errorf("scale: %w: %s", ctx.Err(), msg)
		case <-t.C:
		}
	}
}

// Report has a client of agent i report first attempts to each of deps
// (successes and failures each) in one request through the agent's local
// API, as clientlib's flush does.
func (f *Fleet) Report(ctx context.Context, i int, deps []string, successes, failures uint32) error {
	f.mu.Lock()
	a, api := f.agents[i], f.inside[i].API
	f.mu.Unlock()
	if a == nil {
		return fmt.Errorf("scale: %s is not running", Name(i))
	}
	resp, err := api.Report(ctx, FirstAttempts(deps, successes, failures))
	if err != nil {
		return err
	}
	if len(resp.GetErrors()) > 0 {
		return fmt.Errorf("scale: %s refused: %s", Name(i), resp.GetErrors()[0].GetMessage())
	}
	return nil
}

// FirstAttempts is the Report request of a client that made successes
// and failures first attempts to each of deps (no rows for zero counts).
func FirstAttempts(deps []string, successes, failures uint32) *fuseboxv1.ReportRequest {
	req := &fuseboxv1.ReportRequest{}
	for _, dep := range deps {
		if successes > 0 {
			req.Outcomes = append(req.Outcomes, &fuseboxv1.OutcomeReport{Dependency: dep,
				Kind: fuseboxv1.AttemptKind_ATTEMPT_KIND_FIRST, Outcome: fuseboxv1.Outcome_OUTCOME_SUCCESS, Count: successes})
		}
		if failures > 0 {
			req.Outcomes = append(req.Outcomes, &fuseboxv1.OutcomeReport{Dependency: dep,
				Kind: fuseboxv1.AttemptKind_ATTEMPT_KIND_FIRST, Outcome: fuseboxv1.Outcome_OUTCOME_FAILURE, Count: failures})
		}
	}
	return req
}

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
	a := f.Agent(i)
	if a == nil {
		return 0
	}
	mfs, err := a.Registry().Gather()
	if err != nil {
		return 0
	}
	for _, mf := range mfs {
		if mf.GetName() != "fusebox_agent_breaker_transitions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["dependency"] == dep && l["to"] == state && l["origin"] == "self" {
				return int(m.GetCounter().GetValue())
			}
		}
	}
	return 0
}

// PushPullState returns the state agent i sends in a push-pull right now.
func (f *Fleet) PushPullState(i int) *fuseboxv1.PushPullState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inside[i].PushPullState()
}
