// Package coordinator is Fusebox's control plane (fusebox-coordinator): the
// Admin gRPC API behind fuseboxctl (policies with compare-and-swap,
// overrides, audit, members, the fleet, Watch, what-if simulations), the
// HTTP JSON/SSE API and dashboard, /metrics, and a fleet observer that
// joins the gossip (never counted, never a prober) and keeps one history
// of the fleet. It holds nothing durable: everything is in etcd (package
// sharedstate/store), so several may run side by side; without Config.Etcd
// it starts an embedded etcd in DataDir.
//
// Usage, in a program or a test (every address may use port 0):
//
//	cfg := coordinator.DefaultConfig()
//	cfg.DataDir = dir // embedded etcd in dir/etcd
//	cfg.GRPCAddr, cfg.HTTPAddr, cfg.GossipAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
//	cfg.EmbeddedEtcdURL = "http://127.0.0.1:0"
//	c, err := coordinator.New(cfg)
//	if err != nil { … }
//	if err := c.Start(ctx); err != nil { … }
//	defer c.Close()
//	fmt.Println(c.GRPCAddr(), c.HTTPAddr(), c.GossipAddr(), c.EtcdEndpoints())
//
// or simply coordinator.Run(ctx, cfg), which returns when ctx is done.
// coordinator/README.md is the operator's guide: settings, fuseboxctl,
// the HTTP API, roles and tokens, what-if, audit, limits and metrics.
package coordinator
