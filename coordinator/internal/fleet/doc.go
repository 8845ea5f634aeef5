// Package fleet is the coordinator's in-memory view of the fleet, fed by a
// gossip member in role "observer": the latest NodeWindow row of every
// (dependency, node), the merged breaker record of every dependency, the
// gossip membership, and five minutes of history per dependency.
//
// A View is decode-only: it implements agent.GossipHandler (recording what
// it hears, relaying nothing, sending no state of its own) and
// agent.MemberEvents. Everything it holds is bounded: at most
// MaxDependencies dependencies, MaxRows rows, MaxDeparted departed members
// and History/HistoryInterval samples per dependency. Rows expire
// 2×window after receipt and with their member's departure, as on agents.
//
// Snapshot combines the view with the policies and overrides of a Source
// (the coordinator's etcd cache) into the Admin API's FleetSnapshot.
//
// Usage:
//
//	v := fleet.New(fleet.Config{OnTransition: publish})
//	g, err := agent.NewGossip(agent.GossipConfig{ // decode-only observer
//		Name: "coordinator-1", BindAddr: "0.0.0.0:7947",
//		Meta:    agent.NodeMeta{Role: agent.RoleObserver},
//		Handler: v, Events: v,
//	})
//	… every second: v.Tick(clock.Now(), source)
//	snap := v.Snapshot(clock.Now(), source, "") // every dependency
package fleet
