// Package proxy is the agent's HTTP egress proxy: services in any language
// send their HTTP calls through it (as their HTTP client's proxy, or in
// reverse form with Fusebox-Upstream) and get what clientlib gives Go
// services, because the proxy makes each call with clientlib's
// RoundTripper: the fleet's breaker, throttling and concurrency limit,
// retries from the fleet's retry budget, bounded attempts, the one
// retrying layer, every outcome counted where the agent gossips it. What is
// a proxy's own stays here: the forward, reverse and CONNECT forms, naming
// the dependency, its table of dependencies, streaming, its limits, answer
// headers and metrics, and the guard of the agent's own listeners.
//
// Its client decides through Engine, the agent's engine in process;
// LocalEngine adapts a bare sharedstate.Engine:
//
//	engine, err := proxy.NewLocalEngine(sharedstate.EngineConfig{Node: "host-1"})
//	if err != nil {
//		return err
//	}
//	cfg := proxy.DefaultConfig()
//	cfg.Addr = "127.0.0.1:0"
//	cfg.Engine = engine
//	p, err := proxy.New(cfg) // binds
//	if err != nil {
//		return err
//	}
//	go p.Serve()
//	defer p.Close()
//	fmt.Println("http_proxy=http://" + p.Addr())
//
// agent/README.md, "The egress proxy", is the guide: what each HTTP client
// needs to use it, what it applies and refuses, HTTPS, its limits.
package proxy
