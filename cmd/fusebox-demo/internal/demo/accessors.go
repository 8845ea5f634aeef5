package demo

import (
	"time"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/coordinator"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

// HTTPAddr returns the coordinator's HTTP address (dashboard, /api/v1,
// /metrics), host:port; with Config.Agent, the address of the demo's
// /healthz and /readyz.
func (d *Demo) HTTPAddr() string {
	if d.coord == nil {
		return d.httpLn.Addr().String()
	}
	return d.coord.HTTPAddr()
}

// DashboardURL returns the dashboard's URL ("" with Config.Agent: no
// coordinator).
func (d *Demo) DashboardURL() string {
	if d.coord == nil {
		return ""
	}
	return "http://" + d.coord.HTTPAddr() + "/"
}

// GRPCAddr returns the coordinator's Admin API address, host:port: what
// fuseboxctl's --coordinator takes ("" with Config.Agent).
func (d *Demo) GRPCAddr() string {
	if d.coord == nil {
		return ""
	}
	return d.coord.GRPCAddr()
}

// AdminToken returns the bearer token of the demo's admin identity ("" with
// Config.Agent).
func (d *Demo) AdminToken() string { return d.token }

// Coordinator returns the demo's coordinator (nil with Config.Agent).
func (d *Demo) Coordinator() *coordinator.Coordinator { return d.coord }

// Agents returns the demo's agents: agent-a, agent-b, agent-c, in zones
// zone-a, zone-b, zone-c, serving services checkout, orders and returns
// (none with Config.Agent).
func (d *Demo) Agents() []*agent.Agent { return append([]*agent.Agent(nil), d.agents...) }

// EtcdEndpoints returns the embedded etcd's client URLs (none with
// Config.Agent).
func (d *Demo) EtcdEndpoints() []string {
	if d.etcd == nil {
		return nil
	}
	return d.etcd.Endpoints()
}

// Store returns a store on the demo's etcd (nil with Config.Agent).
func (d *Demo) Store() *store.Store { return d.store }

// Policy returns the fleet default policy the demo wrote (with
// Config.Agent, the one it would have written: the agent's apply).
func (d *Demo) Policy() sharedstate.Policy { return d.policy }

// Phase returns the window of one phase of one cycle (cycle 0 is the
// first).
func (d *Demo) Phase(cycle int, p Phase) PhaseWindow { return d.sched.window(cycle, p) }

// PhaseAt returns the phase running at t.
func (d *Demo) PhaseAt(t time.Time) Phase { return d.sched.at(t) }

// CountsBetween returns what the services did with dep in (from, to], to
// the resolution of the counters' samples (100ms, kept for 5 to 10
// minutes).
func (d *Demo) CountsBetween(dep string, from, to time.Time) Counts {
	c, _ := d.series.between(dep, from, to)
	return c
}

// Probes returns the half-open probes dep served, overall.
func (d *Demo) Probes(dep string) ProbeStats {
	for _, x := range d.deps {
		if x.name == dep {
			return x.probeStats()
		}
	}
	return ProbeStats{}
}

// ProbesIn returns the half-open probes dep served during one phase.
func (d *Demo) ProbesIn(dep string, cycle int, p Phase) ProbeStats {
	for _, x := range d.deps {
		if x.name == dep {
			return x.probeStatsIn(cycle*int(numPhases) + int(p))
		}
	}
	return ProbeStats{}
}

// AgentFallbacks returns how many times the services' clients decided
// locally because their agent did not answer a synchronous question
// (retry, probe, check) within the client's AgentWait.
func (d *Demo) AgentFallbacks() map[string]uint64 {
	out := map[string]uint64{}
	for _, s := range d.services {
		for call, n := range s.fallbacks() {
			out[call] += n
		}
	}
	return out
}
