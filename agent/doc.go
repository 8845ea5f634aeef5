// Package agent is the per-host Fusebox daemon (fusebox-agent). It serves
// the local clients on a unix socket (package protocol's Agent gRPC
// service, with grpc.health.v1 and reflection), sums the outcomes they
// report, gossips per-dependency counts and breaker records with the other
// agents (package protocol/gossip), follows policies and overrides from
// etcd (package sharedstate/store, with a disk cache of the last good
// ones), decides with package sharedstate's Engine, and optionally serves
// the HTTP egress proxy (package agent/proxy).
//
// As a program: fusebox-agent --etcd http://etcd:2379 (LoadConfig reads
// flags, FUSEBOX_* variables and a YAML file). As a library (tests, the
// demo):
//
//	cfg := agent.DefaultConfig()
//	cfg.Name = "host-1"
//	cfg.Etcd = []string{"http://127.0.0.1:2379"}
//	cfg.GossipAddr = "127.0.0.1:0" // port 0: any free port
//	cfg.Socket = "/run/fusebox/agent.sock"
//	a, err := agent.New(cfg, agent.WithLogger(logger))
//	if err != nil {
//		return err
//	}
//	if err := a.Start(ctx); err != nil {
//		a.Close()
//		return err
//	}
//	defer a.Close()
//	fmt.Println(a.GossipAddr(), a.SocketPath(), a.HTTPAddr(), a.Ready())
//
// or simply agent.Run(ctx, cfg), which returns when ctx is done.
// agent/README.md is the operator's guide: settings, gossip, the threat
// model, limits, the egress proxy, performance and metrics.
package agent
