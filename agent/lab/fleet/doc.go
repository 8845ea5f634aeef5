// Package fleet is the lab's one fleet builder: N real agents (package
// agent, unchanged), an embedded etcd and a coordinator when asked, in one
// of three modes that share one configuration:
//
//   - in process on a simulated network (Config.Sim, package simnet): no
//     sockets, no etcd; clients call each agent's local API in process.
//     The scale runs use it for hundreds of agents in one process.
//   - in process on real memberlist over loopback, each agent's local API
//     on a unix socket: the conformance suite's callers use it.
//   - as fusebox-agent processes (Config.Binary), their flags rendered from
//     the same agent.Config (Args): `make scale-procs`, and the conformance
//     test that kills an agent.
//
// The etcd is an embedded one (Config.Etcd) or one the caller runs
// (Config.EtcdEndpoints: a multi-member cluster of embeddedtest). Processes
// run in network namespaces a caller built when Config.Namespaces places
// them (soak.Lab builds namespaces); the fleet reads their /metrics from
// inside. Stop, Crash and Start take one agent down (leaving the gossip,
// or as kill -9 would) and bring it back under its name.
//
// The soak (package soak) builds its own topology of network namespaces,
// but runs its processes with this package's Process, renders its agents'
// flags with Args and reads their /metrics with Scrape. Tests start their
// fleets through package fleettest, which closes them at the test's end
// and keeps each agent's log.
//
//	f, err := fleet.New(ctx, fleet.Config{N: 3, Dir: t.TempDir(), Etcd: true, Coordinator: true,
//		Tune: func(i int, c *agent.Config) { fleet.Quick(c) }})
//	if err != nil {
//		return err
//	}
//	defer f.Close()
//	a := f.Agent(0)                            // *agent.Agent (in process)
//	resp, err := f.Client(1).Report(ctx, req)  // any mode
//	fuseboxctl := f.Coordinator().GRPCAddr()
//
// New returns once every agent counts every other one alive and is ready.
//
// # Virtual time
//
// A fleet on the simulated network runs inside a testing/synctest bubble
// (virtual time) when New is called inside it: New starts every goroutine
// the fleet owns (the network's, the agents') from the caller's goroutine,
// every context it makes derives from the one it is given (pass
// t.Context() from inside the bubble), and its waits are timers and
// tickers, which the bubble's clock drives. Nothing in the fleet reads the
// wall clock but through package time, which the bubble replaces. An
// embedded etcd, a coordinator, sockets and processes do real I/O, which a
// bubble cannot wait for: those modes stay outside.
package fleet
