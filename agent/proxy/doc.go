// Package proxy is the agent's HTTP egress proxy: services in any
// language send their HTTP calls to it (HTTP_PROXY=http://127.0.0.1:7952,
// or the reverse form with Fusebox-Upstream) and get what clientlib gives
// Go services, because the proxy makes each call with clientlib: it builds
// the request the upstream gets and sends it through clientlib's
// RoundTripper on the dependency's handle, whose attempt loop applies the
// fleet's breaker, throttling and concurrency limit, retries idempotent
// requests (and those with an Idempotency-Key) from the fleet's retry
// budget, bounds every attempt and wait, honours Retry-After and the one
// retrying layer (Fusebox-Retry-Owner, the calling service named as the
// owner), and counts every outcome where the agent gossips it. The proxy
// keeps what is a proxy's own: the forward, reverse and CONNECT forms, the
// naming of a dependency, its table of dependencies (past its cap a
// request goes through untracked, said in Fusebox-Untracked), streaming
// the answer, its limits, metrics and answer headers (from
// clientlib.CallInfo), and the guard of the agent's own listeners. A
// refusal is answered at once: 503 with Retry-After and Fusebox-Rejected
// naming the reason.
//
// Its clientlib client decides through Engine, the agent's engine in
// process (clientlib.Engine, plus the policy a Retry-After is computed
// from), which the agent implements; LocalEngine adapts a bare
// sharedstate.Engine:
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
//	fmt.Println("HTTP_PROXY=http://" + p.Addr())
//
// It is no open relay: it listens on loopback unless told otherwise
// (Config.AllowNonLoopback), forwards only to Config.AllowHosts when set,
// and never connects to the agent's own listeners (Config.Own), whatever
// a name resolves to. Nor does a local caller make it hold what the
// caller chooses: a request counts under its upstream's name or route
// (Config.AllowAnyDependency lifts that), a body's buffer grows with the
// bytes that arrive within a budget of all of them, a body must arrive
// within Config.BodyTimeout, and one client address holds at most
// Config.MaxConnsPerClient connections. It can serve a listening socket
// it was handed (Config.Listener) and drains onto whoever else holds it,
// so that a restart refuses no caller. agent/README.md's "The egress
// proxy" section is the user's guide.
package proxy
