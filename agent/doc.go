// Package agent is the per-host Fusebox daemon (fusebox-agent). It sums the
// outcomes that local services report over the local gRPC API (package
// protocol's Agent service on a unix socket), gossips per-dependency counts
// and breaker records with the other agents through hashicorp/memberlist,
// follows policies and operator overrides from etcd, and so holds one
// fleet-wide breaker and one fleet-wide retry budget per dependency, decided
// by package sharedstate.
//
// Usage:
//
//	cfg := agent.DefaultConfig()
//	cfg.Etcd = []string{"http://127.0.0.1:2379"}
//	cfg.Socket = "/run/fusebox/agent.sock"
//	if err := cfg.Validate(); err != nil {
//		log.Fatal(err)
//	}
//	err := agent.Run(ctx, cfg) // returns when ctx is done
//
// Status: this build has the configuration; the daemon itself (gossip, local
// API, etcd watch, metrics) arrives with the agent issue, and Run says so.
package agent
