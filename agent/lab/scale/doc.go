// Package scale runs fleets of real agents in one process on the lab's
// simulated network (package simnet), in virtual time, and measures the
// scenarios of the "Scale" section of agent/README.md: (a) trip
// propagation, (b) steady state with 100 active dependencies, (c) 1,000
// dependencies, (d) (a) with 5% loss and 20–50 ms latency, (e) a
// partition into halves and its heal, (f) churn during a trip.
//
// The agents are the production ones (agent.New: gossip, engine, state and
// local API code unchanged), built by the lab's fleet builder (package
// fleet) on the simulated network: a simnet transport instead of UDP/TCP
// sockets, the local API in process (no unix socket) and the scenarios'
// policy as the default (no etcd), through the agent's simulation hooks
// (agent/internal/agentopt).
//
// A fleet built inside a testing/synctest bubble runs on the bubble's
// virtual time: memberlist's timers, the agents' ticks, the links' delays
// and the simulated clients all fire on schedule however slow the
// machine, and idle protocol time costs no wall time. Hosts are then
// infinitely fast unless simnet's ServiceTime charges each received
// packet. RunPart runs one fleet's scenarios and must be called inside a
// bubble; the bubble's host is a test (synctest.Test needs a *testing.T):
// TestScale, which the scale command (cmd/scale, `make scale`) runs once
// per fleet in a process of its own and reads the Row back from.
//
//	synctest.Test(t, func(t *testing.T) {
//		row, err := scale.RunPart(t.Context(), scale.RunConfig{N: 50}, scale.Clean, t.TempDir(), os.Stderr)
//		...
//		time.Sleep(scale.SettleTime) // memberlist's last probes
//		synctest.Wait()
//	})
//
// Tests in this package run every scenario at N = 50 in virtual time and
// assert counts and orderings, never wall-clock timings.
package scale
