// Package procs runs scenario (a) of agent/README.md's "Scale" section — a trip
// behind k clients, and how long until every agent holds it open — with N
// real fusebox-agent processes on loopback, to check the simulated network
// of package scale against real sockets (`make scale-procs N=40`).
//
// Run builds the fleet with package fleet in its process mode: an
// embedded etcd holding scale.Policy() as the fleet default, N
// fusebox-agent processes (gossip on 127.0.0.1 port 0, local API on unix
// sockets in a temp dir, --etcd pointing at the embedded etcd and --join at
// the first agent); it waits until every agent counts N agents and runs
// under the written policy (each agent's /metrics), and then: one observer Session per agent over
// its unix socket (the snapshot pushes clientlib decides from), k clients
// on agents spread over the fleet that Report healthy calls and then only
// failures, the time each agent's pushed snapshot first shows the breaker
// open, a Check on every agent afterwards (it must reject), and the
// proposers from every agent's fusebox_agent_breaker_transitions_total
// {origin="self"}. Every process is stopped before Run returns.
package procs
