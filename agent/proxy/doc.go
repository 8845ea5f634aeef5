// Package proxy is the agent's HTTP egress proxy: services in any
// language send their HTTP calls to it (HTTP_PROXY=http://127.0.0.1:7952,
// or the reverse form with Fusebox-Upstream) and get what clientlib gives
// Go services: the fleet's breaker, throttling and concurrency limit
// before the first attempt, retries of idempotent requests (and of
// requests with an Idempotency-Key) with full-jitter backoff from the
// fleet's retry budget, per-attempt timeouts under the caller's deadline
// (Fusebox-Timeout-Ms), Retry-After, one retrying layer
// (Fusebox-Retry-Owner), and every outcome counted where the agent
// gossips it. A refusal is answered at once: 503 with Retry-After and
// Fusebox-Rejected naming the reason.
//
// The proxy decides through Engine, which the agent implements on its own
// engine (in process, no RPC); LocalEngine adapts a bare
// sharedstate.Engine:
//
//	cfg := proxy.DefaultConfig()
//	cfg.Addr = "127.0.0.1:0"
//	cfg.Engine = proxy.LocalEngine{E: engine}
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
