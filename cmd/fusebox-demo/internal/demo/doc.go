// Package demo runs a whole Fusebox fleet in one process, for newcomers
// (make run) and for end-to-end tests: an embedded etcd holding a demo
// policy (DemoPolicy), a coordinator, three agents gossiping over loopback
// in three zones, two HTTP dependencies and three services calling them,
// two through clientlib and one through its agent's egress proxy. With
// Config.Agent it runs only the dependencies and the services, all through
// clientlib, on that external agent. cmd/README.md, "The demo", is the
// guide.
//
//	cfg := demo.DefaultConfig()
//	cfg.HTTPAddr, cfg.GRPCAddr = "127.0.0.1:0", "127.0.0.1:0"
//	cfg.PhaseDuration, cfg.Duration = 3*time.Second, 12*time.Second
//	d, err := demo.Start(ctx, cfg)
//	if err != nil { … }
//	defer d.Close()
//	<-d.Done() // Duration passed: traffic stopped
//	for _, tr := range d.Summary().Transitions { … }
//
// or demo.Run(ctx, cfg), which prints the banner and the summary.
package demo
