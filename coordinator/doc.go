// Package coordinator is Fusebox's control plane (fusebox-coordinator).
//
// A Coordinator serves:
//
//   - the Admin gRPC API (protocol/fuseboxv1 Admin service) behind fuseboxctl:
//     policies get/list/put with an expected revision/delete/validate,
//     overrides force-open/force-closed/clear with a TTL and a reason, the
//     audit log, members, the fleet snapshot, and Watch: a stream of the
//     events /api/v1/events serves, from the same broker, resumable after
//     an event id;
//   - a fleet observer: a gossip member with role "observer" (never counted,
//     never a prober, decode-only) that keeps every node's latest window
//     rows, the merged breaker records and the membership, and one history
//     of the fleet's exact counts (from the rows' cumulative counts) and
//     breaker states, all in bounded memory;
//   - HTTP: /api/v1/fleet (the fleet snapshot as JSON), /api/v1/series (the
//     history), /api/v1/simulate (a what-if replay over it),
//     /api/v1/events (server-sent events of transitions, overrides and
//     policy changes), /api/v1/audit, /api/v1/overrides (GET; POST and
//     DELETE /api/v1/overrides/{dependency} to force and clear),
//     /api/v1/policies (the effective policies), /api/v1/whoami, /metrics
//     (its own registry, fusebox_coordinator_*), /healthz, and the fleet
//     dashboard at / (package internal/dashboard: embedded, works offline,
//     live through /api/v1/events). The JSON writes call the Admin API's
//     own handlers: same validation, store and audit as fuseboxctl.
//
// It is stateless: policies, overrides, the audit log and member
// registrations live in etcd (package sharedstate/store), so two
// coordinators side by side give the same answers. Without Config.Etcd it
// starts an embedded etcd in DataDir and logs the client URL for the agents.
//
// Access: with a tokens file ("ROLE TOKEN [NAME]" per line, ROLE viewer or
// admin) every Admin call and /api/v1/* request needs "Authorization:
// Bearer TOKEN"; writes need admin. A token is never taken from a URL: a
// request with ?access_token= is refused (the dashboard reads the event
// stream with fetch, which sends the header). Event streams are capped in
// all and per identity (Config.MaxEventStreams,
// MaxEventStreamsPerIdentity). Browser writes must be same-origin
// (http.CrossOriginProtection) and POST bodies JSON.
// Without a tokens file the coordinator refuses non-loopback listen
// addresses, every loopback caller is an admin (named "loopback" in the
// audit), and /api/v1/* answer only requests whose Host is a loopback name
// (no DNS rebinding from a web page). TLS and mTLS are optional. The audit
// actor of a write is the request's actor field plus the token's identity,
// e.g. "alice@laptop (ops-admin)".
//
// Errors become gRPC status codes in one place (toStatus): invalid policy →
// InvalidArgument with every violation as a BadRequest field violation (and
// one per line in the message); revision conflict → Aborted; not found →
// NotFound; missing/unknown token → Unauthenticated; viewer writing →
// PermissionDenied; invalid data already in etcd → FailedPrecondition;
// etcd unreachable → Unavailable; a Watch that fell behind →
// ResourceExhausted; a Watch after an event id no longer kept →
// OutOfRange.
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
package coordinator
