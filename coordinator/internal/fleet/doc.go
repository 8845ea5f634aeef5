// Package fleet is the coordinator's in-memory view of the fleet, fed by a
// gossip member in role "observer": the latest NodeWindow row of every
// (dependency, node), the merged breaker record of every dependency, the
// gossip membership. (The history of the counts is package history's.)
//
// A View is decode-only: it implements gossip.Handler (recording what
// it hears, relaying nothing, sending no state of its own) and
// gossip.MemberEvents. Everything it holds is bounded: at most
// MaxDependencies dependencies, MaxRows rows and MaxDeparted departed
// members. Rows expire
// 2×window after receipt and with their member's departure, as on agents.
//
// Snapshot combines the view with the policies and overrides of a Source
// (the coordinator's etcd cache) into the Admin API's FleetSnapshot.
//
// Usage:
//
//	v := fleet.New(fleet.Config{OnTransition: publish})
//	gc := gossip.DefaultConfig() // a decode-only observer
//	gc.Name, gc.BindAddr = "coordinator-1", "0.0.0.0:7947"
//	gc.Meta = gossip.NodeMeta{Role: gossip.RoleObserver}
//	gc.Handler, gc.Events = v, v
//	g, err := gossip.New(gc)
//	… every second: v.Tick(clock.Now(), source)
//	snap := v.Snapshot(clock.Now(), source, "") // every dependency
package fleet
