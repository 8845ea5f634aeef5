// Package scale runs fleets of real agents in one process on the lab's
// simulated network (package simnet) and measures the scenarios of the
// "Scale" section of agent/README.md: (a) trip propagation, (b) steady
// state with 100 active dependencies, (c) 1,000 dependencies, (d) (a) with
// 5% loss and 20–50 ms latency, (e) a partition into halves and its heal,
// (f) churn during a trip.
//
// The agents are the production ones (agent.New: gossip, engine, state and
// local API code unchanged), built by the lab's fleet builder (package
// fleet) on the simulated network: a simnet transport instead of UDP/TCP
// sockets, the local API in process (no unix socket) and the scenarios'
// policy as the default (no etcd), through the agent's simulation hooks
// (agent/internal/agentopt).
//
//	f, err := scale.NewFleet(ctx, scale.FleetConfig{N: 50, Dir: dir})
//	defer f.Close()
//	r, err := scale.Trip(ctx, f, "dep-a", 5, time.Second)
//
// Tests in this package run the scenarios at N ≤ 20 and assert counts and
// orderings; `make scale` runs ./scale/cmd/scale (in agent/lab) for N up to
// 500 and prints the table. memberlist has no injectable clock, so a fleet
// runs on real timers; to afford hundreds of agents on a few cores it runs
// dilated (FleetConfig.Dilate, dilate.go): every timer K times longer, the
// engines on a clock K times slower, and every figure reported in protocol
// time. The table reports the CPU the run used and how late its timers
// fired, which say whether K was large enough.
package scale
