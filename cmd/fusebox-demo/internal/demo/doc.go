// Package demo runs a whole Fusebox fleet in one process, for newcomers
// (`make run`) and for end-to-end tests: an embedded etcd holding a demo
// policy, a coordinator (dashboard, JSON API, Admin API, metrics), three
// agents gossiping over loopback in three zones, two HTTP dependencies on
// 127.0.0.1 and three services calling them, each on a different agent: a
// mixed fleet, where checkout and orders link clientlib (the agent's unix
// socket) and returns, as a service in another language would, sends its
// requests through its agent's egress proxy (HTTP_PROXY), which applies
// the same breaker, budget and retries.
//
// shipping-api cycles through four phases of Config.PhaseDuration each:
// healthy → failing (every request 503) → slow (300ms answers, slower than
// the policy's 200ms slowCallDuration) → recovering (60ms answers), then
// again. catalog-api stays healthy: it is the one to force open. The
// policy (DemoPolicy) makes breakers react within a phase; every change of
// a breaker, as each agent decides with it, is logged as a Transition.
//
// Usage in a program (cmd/fusebox-demo):
//
//	cfg := demo.DefaultConfig()
//	cfg.Out = os.Stdout
//	err := demo.Run(ctx, cfg) // until ctx is done; prints the summary
//
// and in a test:
//
//	cfg := demo.DefaultConfig()
//	cfg.HTTPAddr, cfg.GRPCAddr = "127.0.0.1:0", "127.0.0.1:0"
//	cfg.PhaseDuration, cfg.Duration = 3*time.Second, 12*time.Second
//	d, err := demo.Start(ctx, cfg)
//	if err != nil { … }
//	defer d.Close()
//	sum, err := d.Wait(ctx) // Duration passed: traffic stopped
//	failing := d.Phase(0, demo.Failing)
//	for _, tr := range sum.TransitionsOf(demo.ShippingAPI) { … }
//
// With Config.Agent set, the demo runs only the two dependencies and the
// three services, all through clientlib, whose clients talk to that
// external agent (an agent on
// the node, as an application pod would): no etcd, coordinator or agents
// of its own; the agent's policies apply; Config.HTTPAddr serves /healthz
// and /readyz; the transitions are those the clients see.
//
// Everything listens on loopback, on port 0 except the coordinator's HTTP
// and Admin API (Config.HTTPAddr, Config.GRPCAddr); data and sockets live
// in temporary directories that Close removes. The coordinator requires
// the admin token (Demo.AdminToken) for its API and dashboard writes.
package demo
