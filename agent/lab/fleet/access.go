package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/internal/agentopt"
	"github.com/fusebox-dev/fusebox/agent/lab/simnet"
	"github.com/fusebox-dev/fusebox/coordinator"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded"
)

// Size returns how many agents the fleet has (running or being restarted).
func (f *Fleet) Size() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.members)
}

func (f *Fleet) member(i int) *member {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.members[i]
}

// Agent returns agent i when it runs in process (nil for a process, or
// while it is being restarted).
func (f *Fleet) Agent(i int) *agent.Agent {
	if m := f.member(i); m != nil {
		return m.agent
	}
	return nil
}

// Agents returns the in-process agents, in order (nil for one being
// restarted).
func (f *Fleet) Agents() []*agent.Agent {
	out := make([]*agent.Agent, f.Size())
	for i := range out {
		out[i] = f.Agent(i)
	}
	return out
}

// Process returns agent i when it runs as a process (nil in process).
func (f *Fleet) Process(i int) *AgentProcess {
	if m := f.member(i); m != nil {
		return m.proc
	}
	return nil
}

// Client returns a client of agent i's local API (nil while it is being
// restarted): gRPC over its unix socket, or on the simulated network its
// handlers called in process (no Session there).
func (f *Fleet) Client(i int) fuseboxv1.AgentClient {
	if m := f.member(i); m != nil {
		return m.client
	}
	return nil
}

// Config returns the configuration agent i runs with (the zero Config
// while it is being restarted).
func (f *Fleet) Config(i int) agent.Config {
	if m := f.member(i); m != nil {
		return m.cfg
	}
	return agent.Config{}
}

// Addr returns agent i's gossip address (the last one while it is being
// restarted; on the simulated network it keeps it).
func (f *Fleet) Addr(i int) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.addrs[i]
}

// Inside returns what in-process agent i hands the lab beyond its API
// (agentopt.Inside: its push-pull state, a crash, its keys); the zero
// Inside for a process, or while it is stopped.
func (f *Fleet) Inside(i int) agentopt.Inside {
	if m := f.member(i); m != nil {
		return m.inside
	}
	return agentopt.Inside{}
}

// PushPullState returns the state in-process agent i sends in a push-pull
// right now (nil for a process, or while it is being restarted).
func (f *Fleet) PushPullState(i int) *fuseboxv1.PushPullState {
	if m := f.member(i); m != nil && m.inside.PushPullState != nil {
		return m.inside.PushPullState()
	}
	return nil
}

// Net returns the simulated network (nil on loopback).
func (f *Fleet) Net() *simnet.Network { return f.net }

// Coordinator returns the coordinator (nil without Config.Coordinator).
func (f *Fleet) Coordinator() *coordinator.Coordinator { return f.coord }

// Etcd returns the etcd's client endpoints: the embedded one's, or
// Config.EtcdEndpoints (nil without etcd).
func (f *Fleet) Etcd() []string {
	if f.etcd == nil {
		return f.cfg.EtcdEndpoints
	}
	return f.etcd.Endpoints()
}

// EtcdServer returns the embedded etcd (nil without Config.Etcd), to stop,
// restart, wipe or restore it under the agents (embeddedtest's Wipe,
// Snapshot and Restore).
func (f *Fleet) EtcdServer() *embedded.Server { return f.etcd }

// Started returns when the first agent started.
func (f *Fleet) Started() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.started
}

// Metrics reads agent i's metrics: its registry in process, its /metrics
// for a process.
func (f *Fleet) Metrics(ctx context.Context, i int) (Metrics, error) {
	m := f.member(i)
	switch {
	case m == nil:
		return nil, fmt.Errorf("fleet: %s is not running", Name(i))
	case m.agent != nil:
		mfs, err := m.agent.Registry().Gather()
		if err != nil {
			return nil, fmt.Errorf("fleet: %s: %w", Name(i), err)
		}
		return MetricsOf(mfs), nil
	case m.proc.HTTPAddr() == "":
		return nil, fmt.Errorf("fleet: %s serves no /metrics (its HTTP is off)", Name(i))
	}
	mt, err := Scrape(ctx, f.httpClient(i), "http://"+m.proc.HTTPAddr()+"/metrics")
	if err != nil {
		return nil, fmt.Errorf("fleet: %s: %w", Name(i), err)
	}
	return mt, nil
}

// Report has a client of agent i report successes and failures first
// attempts to each of deps in one request, as clientlib's flush does.
func (f *Fleet) Report(ctx context.Context, i int, deps []string, successes, failures uint32) error {
	c := f.Client(i)
	if c == nil {
		return fmt.Errorf("fleet: %s is not running", Name(i))
	}
	resp, err := c.Report(ctx, FirstAttempts(deps, successes, failures))
	if err != nil {
		return fmt.Errorf("fleet: %s: report: %w", Name(i), err)
	}
	if len(resp.GetErrors()) > 0 {
		return fmt.Errorf("fleet: %s refused: %s", Name(i), resp.GetErrors()[0].GetMessage())
	}
	return nil
}

// WaitAll checks ok for every agent every Config.Poll until it holds for
// all of them (nil) or ctx ends; the error names what (the condition) and
// the first agent's error. Processes are checked 8 at a time, and a
// process that exited ends the wait at once.
func (f *Fleet) WaitAll(ctx context.Context, what string, ok func(i int) error) error {
	t := time.NewTicker(f.cfg.Poll)
	defer t.Stop()
	for {
		errs := f.check(ctx, ok)
		bad := errors.Join(errs...)
		if bad == nil {
			return nil
		}
		for i := range errs {
			if p := f.Process(i); p != nil {
				select {
				case <-p.Done():
					return fmt.Errorf("fleet: %s: %s exited (%v): %s", what, p.Name(), p.Err(), p.Tail(5))
				default:
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("fleet: %s: %w: %d agents short, e.g. %v", what, ctx.Err(), count(errs), first(errs))
		case <-t.C:
		}
	}
}

// check runs ok for every agent (an agent being restarted fails it).
func (f *Fleet) check(ctx context.Context, ok func(int) error) []error {
	n := f.Size()
	errs := make([]error, n)
	one := func(i int) {
		if f.member(i) == nil {
			errs[i] = fmt.Errorf("%s is not running", Name(i))
			return
		}
		errs[i] = ok(i)
	}
	if f.cfg.Binary == "" {
		for i := range n {
			one(i)
		}
		return errs
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			one(i)
		}()
	}
	wg.Wait()
	return errs
}

func count(errs []error) int {
	n := 0
	for _, e := range errs {
		if e != nil {
			n++
		}
	}
	return n
}

func first(errs []error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// WaitMembership waits until every agent counts every agent of the fleet
// (itself included) alive and is ready (joined, policies loaded).
func (f *Fleet) WaitMembership(ctx context.Context) error {
	n := f.Size()
	return f.WaitAll(ctx, fmt.Sprintf("every agent counts %d agents and is ready", n), func(i int) error {
		if a := f.Agent(i); a != nil {
			if got := a.Gossip().NumAgents(); got != n {
				return fmt.Errorf("%s counts %d agents", Name(i), got)
			}
			if !a.Ready() {
				return fmt.Errorf("%s is not ready", Name(i))
			}
			return nil
		}
		m, err := f.Metrics(ctx, i)
		if err != nil {
			return err
		}
		if got, _ := m.Value("fusebox_agent_members", "role", "agent", "state", "alive"); got != float64(n) {
			return fmt.Errorf("%s counts %.0f agents", Name(i), got)
		}
		if r, _ := m.Value("fusebox_agent_ready"); r != 1 {
			return fmt.Errorf("%s is not ready", Name(i))
		}
		return nil
	})
}
