package demo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/clientlib"
	"github.com/fusebox-dev/fusebox/coordinator"
	"github.com/fusebox-dev/fusebox/protocol/gossip"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded"
)

// startFleet starts the in-process fleet: the embedded etcd, the
// coordinator and the agents.
func (d *Demo) startFleet(ctx context.Context) error {
	if err := d.makeDirs(); err != nil {
		return err
	}
	if err := d.startEtcd(ctx); err != nil {
		return err
	}
	if err := d.startCoordinator(ctx); err != nil {
		return err
	}
	return d.startAgents(ctx)
}

func (d *Demo) makeDirs() error {
	d.dataDir = d.cfg.DataDir
	if d.dataDir == "" {
		dir, err := os.MkdirTemp("", "fusebox-demo-")
		if err != nil {
			return fmt.Errorf("demo: data dir: %w", err)
		}
		d.tempDir, d.dataDir = dir, dir
	} else if err := os.MkdirAll(d.dataDir, 0o750); err != nil {
		return fmt.Errorf("demo: data dir: %w", err)
	}
	// Unix socket paths are limited to about 104 bytes: keep them short.
	dir, err := os.MkdirTemp("", "fbdemo")
	if err != nil {
		return fmt.Errorf("demo: socket dir: %w", err)
	}
	d.sockDir = dir
	return nil
}

// startEtcd starts the embedded etcd and writes the demo policy as the
// fleet default, before any agent starts: agents begin with it.
func (d *Demo) startEtcd(ctx context.Context) error {
	ec := embedded.DefaultConfig()
	ec.Dir = filepath.Join(d.dataDir, "etcd")
	ec.TickMs, ec.ElectionMs = 10, 100 // a single member: elect at once
	ec.LogLevel = "fatal"              // etcd logs stack traces at error level on a normal Close
	ec.UnsafeNoFsync = d.tempDir != ""
	srv, err := embedded.Start(ctx, ec)
	if err != nil {
		return fmt.Errorf("demo: embedded etcd: %w", err)
	}
	d.etcd = srv
	cli, err := srv.NewClient()
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer cli.Close()
	st, err := store.New(store.Config{Client: cli})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if _, err := st.PutPolicyOf(ctx, sharedstate.DefaultPolicyName, d.policy,
		store.WriteOptions{Actor: "fusebox-demo"}); err != nil {
		return fmt.Errorf("demo: write the demo policy: %w", err)
	}
	return nil
}

func (d *Demo) startCoordinator(ctx context.Context) error {
	tokens := filepath.Join(d.dataDir, "tokens")
	if err := os.WriteFile(tokens, []byte("admin "+d.token+" "+AdminIdentity+"\n"), 0o600); err != nil {
		return fmt.Errorf("demo: tokens file: %w", err)
	}
	cc := coordinator.DefaultConfig()
	cc.Name = "coordinator"
	cc.Etcd = d.etcd.Endpoints()
	cc.GRPCAddr = d.cfg.GRPCAddr
	cc.HTTPAddr = d.cfg.HTTPAddr
	cc.GossipAddr = "127.0.0.1:0"
	cc.TokensFile = tokens
	cc.ShutdownTimeout = 3 * time.Second
	c, err := coordinator.New(cc,
		coordinator.WithLogger(d.cfg.Logger.With("component", "coordinator")),
		coordinator.WithGossip(func(g *gossip.Config) {
			g.GossipInterval = 100 * time.Millisecond
			g.ProbeInterval = 500 * time.Millisecond
			g.PushPullInterval = 5 * time.Second
		}),
		// Derive half-open states and keep history often enough for a
		// dashboard watching breakers that change within seconds.
		coordinator.WithTickInterval(250*time.Millisecond),
	)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	d.coord = c
	if err := c.Start(ctx); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	return nil
}

func (d *Demo) startAgents(ctx context.Context) error {
	join := []string{d.coord.GossipAddr()}
	for i, name := range agentNames {
		ac := agent.DefaultConfig()
		ac.Name = name
		ac.Zone = agentZones[i]
		ac.DataDir = filepath.Join(d.dataDir, "agents", name)
		ac.GossipAddr = "127.0.0.1:0"
		ac.Socket = filepath.Join(d.sockDir, name+".sock")
		ac.HTTPAddr = "127.0.0.1:0"
		ac.Etcd = d.etcd.Endpoints()
		ac.Join = append([]string(nil), join...)
		ac.GossipInterval = 100 * time.Millisecond
		ac.ProbeInterval = 500 * time.Millisecond
		ac.PushPullInterval = 5 * time.Second
		ac.ShutdownTimeout = 3 * time.Second
		ac.MemberTTL = 5 * time.Second
		ac.Proxy.Addr = "127.0.0.1:0"      // the egress proxy, for proxiedService
		ac.Proxy.AllowAnyDependency = true // its calls name their dependencies (Fusebox-Dependency)
		a, err := agent.New(ac,
			agent.WithLogger(d.cfg.Logger.With("component", "agent")),
			agent.WithDefaultPolicy(d.policy))
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		d.agents = append(d.agents, a)
		if err := a.Start(ctx); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		join = append(join, a.GossipAddr())
	}
	return waitFor(ctx, "the agents to see each other and load the policies", func() bool {
		for _, a := range d.agents {
			if !a.Ready() || a.Gossip().NumAgents() != len(d.agents) {
				return false
			}
		}
		return true
	})
}

// startServices starts the services, one on each in-process agent (the
// proxied one through its agent's egress proxy), or all three on the
// agent at Config.Agent, and waits until each decides with its agent's
// snapshots.
func (d *Demo) startServices(ctx context.Context) error {
	what := "the services to get their agents' snapshots"
	if d.cfg.Agent != "" {
		what = "the services to get the snapshots of the agent at " + d.cfg.Agent
	}
	for i, name := range serviceNames {
		if d.cfg.Agent == "" && name == proxiedService { // a mixed fleet: one service in "another language"
			d.services = append(d.services, newProxiedService(name, d.agents[i].ProxyAddr()))
			continue
		}
		addr := d.cfg.Agent
		var onChange func(clientlib.StateChange)
		var onAgent func(clientlib.AgentEvent)
		if addr == "" {
			addr = "unix://" + d.agents[i].SocketPath()
		} else if i == 0 {
			// The three clients see the same agent's snapshots: the first
			// one's changes are the transitions.
			onChange, onAgent = d.clientChanged, d.agentChanged
		}
		s, err := newService(name, addr, onChange, onAgent)
		if err != nil {
			return err
		}
		d.services = append(d.services, s)
	}
	if err := waitFor(ctx, what, d.servicesReady); err != nil {
		return err
	}
	if d.cfg.Agent != "" {
		// The agent's node name (its Welcome) comes by the first client's
		// event, which may follow the client's readiness: the banner names
		// the agent by it when it comes within welcomeWait, else by its
		// address.
		wctx, cancel := context.WithTimeout(ctx, welcomeWait)
		_ = waitFor(wctx, "the agent's node name", func() bool { return d.agentNode.Load() != nil })
		cancel()
	}
	return ctx.Err()
}

// welcomeWait bounds how long startServices waits for the external
// agent's node name once the services are ready.
const welcomeWait = 2 * time.Second

// startDependencies fixes the start of the first phase and starts the two
// dependencies on 127.0.0.1.
func (d *Demo) startDependencies() error {
	d.sched = schedule{start: time.Now(), length: d.cfg.PhaseDuration}
	for _, name := range []string{ShippingAPI, CatalogAPI} {
		dep, err := startDependency(name, d.sched, name == ShippingAPI)
		if err != nil {
			return err
		}
		d.deps = append(d.deps, dep)
		d.ctrs = append(d.ctrs, &counters{})
	}
	return nil
}

// waitFor polls cond every 20ms until it holds or ctx ends.
func waitFor(ctx context.Context, what string, cond func() bool) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("demo: waiting for %s: %w", what, ctx.Err())
		case <-t.C:
		}
	}
	return nil
}
