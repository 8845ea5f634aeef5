// Package agent is the per-host Fusebox daemon (fusebox-agent). It sums the
// outcomes that local services report over the local gRPC API (package
// protocol's Agent service on a unix socket, optionally loopback TCP),
// gossips per-dependency counts and breaker records with the other agents
// through hashicorp/memberlist, follows policies and operator overrides from
// etcd, and so holds one fleet-wide breaker and one fleet-wide retry budget
// per dependency, decided by package sharedstate's Engine.
//
// # Running
//
// As a program: fusebox-agent --etcd http://etcd:2379 (see --help). Every
// flag also reads FUSEBOX_<FLAG> from the environment and the key <flag> from
// the YAML file named by --config; flags win over the environment, which wins
// over the file (LoadConfig).
//
// As a library (tests, the demo):
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
//
// # Gossip
//
// A gossip.Gossip owns the memberlist and its delegate. Every member publishes a
// NodeMeta (JSON, at most 512 bytes: role, zone, version, API addresses);
// only members with role "agent" count in fleet totals and may probe. Each
// tick (default 100 ms) the agent broadcasts the NodeWindow rows that
// changed, plus a heartbeat row every window/2 for idle-but-active
// dependencies, and the breaker records it proposed. Each row and record is
// its own frame ([version][type][protobuf], package protocol) in a
// TransmitLimitedQueue, named (kind, dependency, node), so a newer update
// invalidates a queued older one. Receivers apply what they get to their
// engine and re-broadcast what was new to them. A proposer also sends each
// transition straight to every member (SendBestEffort). Push-pull carries
// the node's own rows and every breaker record, and repairs anything lost.
// Members that memberlist reports dead or gone stop counting at once; rows
// of a silent member go stale after 2×window. RetransmitMult defaults to 4.
//
// Gossip is encrypted when Config.KeyringFile names a file of base64 keys:
// the first key encrypts, all decrypt. Rotate by adding the new key second
// on every agent, then moving it first on every agent, then removing the
// old one. An agent with no key in common with the cluster cannot join and
// logs "no installed keys could decrypt the message" with a keyring hint.
//
// Joining: --join host:port,… and/or the etcd members/ registry, where each
// agent registers itself (gossip address, zone, version) on a
// concurrency.Session lease; a new agent needs only the etcd address. The
// agent retries joining, with backoff, whenever it sees no other agent.
//
// # The gossip member
//
// The member itself (memberlist setup, delegates, broadcast queue, node
// metadata, keyring files) is package protocol/gossip, which the
// coordinator's fleet observer runs too, in role observer. The agent gives
// it a handler that feeds its engine and relays what was new.
//
// # Local API
//
// Session streams get a Welcome (with the fleet default's retry and breaker
// settings), then the snapshots of the dependencies they named or reported,
// each with the breaker settings of its effective policy, pushed again
// whenever the engine publishes a new snapshot for one of them (the
// engine's OnChange hook wakes the session at once) or a policy from etcd
// changes its thresholds, so a client's local fallback breaker uses the
// policy in force. AcquireRetry and AcquireProbe are decided by the engine here, not
// in the client. Check decides a first attempt without counting it, and a
// retry or probe by taking budget or the probe slot; Report counts outcomes
// by Engine.Record's counting rule. Names refused (invalid, or past
// maxDependencies) come back as DependencyError messages, never as
// unbounded memory. The server also serves grpc.health.v1 and reflection.
//
// # Egress proxy
//
// With Config.Proxy.Addr (--proxy-addr, off by default, loopback unless
// --insecure-proxy) the agent also serves package agent/proxy: services
// in any language send their HTTP calls to it (HTTP_PROXY), and the proxy
// makes them through clientlib's attempt loop (clientlib.NewInProcess),
// deciding and counting on the agent's engine in process (egressEngine:
// the proxy counts as one more client of the dependencies it calls, its
// snapshots pushed by the hub as the sessions' are). ProxyAddr returns its
// address.
//
// # Policies and the cache
//
// Policies and overrides come from etcd through sharedstate/store's
// watcher: list, then watch from the next revision, re-list on compaction,
// retry forever with backoff. Every applied change is written to
// <data-dir>/policies.json (atomically); at start the agent applies that
// cache before anything else, so it enforces the last good policies even
// when etcd is unreachable. An invalid value in etcd is ignored: the last
// good value stays, the error is logged with the key, and
// fusebox_agent_etcd_invalid_values_total goes up.
//
// # Shutdown
//
// Close (and SIGTERM in fusebox-agent) turns health to NOT_SERVING, ends
// every Session with codes.Unavailable and ShutdownMessage (clientlib then
// falls back to its local breaker and reconnects with backoff), stops the
// gRPC servers, stops the egress proxy, leaves the gossip cluster, stops the etcd watch and revokes
// the registration, stops HTTP and removes the socket, all within
// Config.ShutdownTimeout (default 5 s).
//
// # Observability
//
// /metrics serves the agent's own Prometheus registry (names
// fusebox_agent_*, listed by MetricDocs); /healthz answers while the process
// runs and is not shutting down; /readyz answers 200 once the agent is
// Ready: started, joined (when --join is given), policies loaded from etcd
// or the cache (when etcd is configured).
package agent
