package agent

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fusebox-dev/fusebox/protocol/gossip"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// Name returns the node name.
func (a *Agent) Name() string { return a.cfg.Name }

// Config returns the configuration the agent runs with.
func (a *Agent) Config() Config { return a.cfg }

// GossipAddr returns the gossip address peers reach this agent at, host:port.
func (a *Agent) GossipAddr() string { return a.gossip.Addr() }

// SocketPath returns the unix socket path, or "" when off.
func (a *Agent) SocketPath() string {
	if a.sockLn == nil {
		return ""
	}
	return a.cfg.Socket
}

// GRPCAddr returns the loopback TCP address of the local API, or "" when off.
func (a *Agent) GRPCAddr() string {
	if a.tcpLn == nil {
		return ""
	}
	return a.tcpLn.Addr().String()
}

// HTTPAddr returns the address of /metrics, /healthz and /readyz, or "".
func (a *Agent) HTTPAddr() string {
	if a.httpLn == nil {
		return ""
	}
	return a.httpLn.Addr().String()
}

// Engine returns the agent's engine (read it; the agent feeds it).
func (a *Agent) Engine() *sharedstate.Engine { return a.eng }

// Gossip returns the agent's gossip layer.
func (a *Agent) Gossip() *gossip.Gossip { return a.gossip }

// Registry returns the agent's metrics registry (what /metrics serves).
func (a *Agent) Registry() *prometheus.Registry { return a.reg }

// Ready reports whether the agent is ready: started, not closing, gossip
// joined (or configured alone: no --join, and no peer in the etcd registry
// that it failed to reach), policies loaded from etcd or the cache (or no
// etcd configured).
func (a *Agent) Ready() bool {
	ok, _ := a.readiness()
	return ok
}

func (a *Agent) readiness() (bool, []string) {
	var why []string
	if !a.started.Load() {
		why = append(why, "not started")
	}
	if a.closing.Load() {
		why = append(why, "shutting down")
	}
	if !a.joined.Load() && (len(a.cfg.Join) > 0 || a.joinFailing.Load()) {
		why = append(why, "gossip not joined yet")
	}
	if !a.policiesLoaded.Load() {
		why = append(why, "policies not loaded from etcd or cache yet")
	}
	return len(why) == 0, why
}
