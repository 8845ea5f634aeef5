// Package clientlib is what services link to call their dependencies
// through Fusebox: one call that checks the fleet-wide breaker, retries the
// right way (classified errors, per-attempt timeouts under one deadline,
// jittered backoff, idempotency keys, a fleet retry budget, a single
// retrying layer across services) and reports every outcome to the local
// agent, which pools them with the rest of the fleet.
//
// Adoption is one line per dependency:
//
//	c, err := clientlib.New(clientlib.Config{}) // agent at $FUSEBOX_AGENT or unix:///run/fusebox/agent.sock
//	defer c.Close()
//	shipping := c.Dependency("shipping-api")
//	err = shipping.Do(ctx, clientlib.Idempotent, func(ctx context.Context, a clientlib.Attempt) error {
//		return callShipping(ctx)
//	})
//
// or, for HTTP, http.Client{Transport: c.RoundTripper(nil)}; for gRPC,
// grpc.WithUnaryInterceptor(c.UnaryClientInterceptor(...)); and on the
// serving side c.Middleware(handler) or c.UnaryServerInterceptor().
//
// # Calls
//
// Dependency.Do(ctx, class, fn, opts...) and Call[T] run fn once per
// attempt. The class is the call site's promise: NonRetryable (the zero
// value: one attempt), Idempotent, or IdempotentWithKey (one key per logical
// call, the same on every attempt, in Attempt.IdempotencyKey). For code that
// cannot wrap its call in a closure (streams, callbacks), Dependency.Allow
// decides one attempt and returns a done function to report its Outcome.
//
// Each attempt:
//
//   - a first attempt is decided in process from the snapshot the agent
//     pushed: one atomic pointer load per dependency, no RPC, no lock shared
//     across dependencies or goroutines (counters are striped across CPUs);
//   - a retry first takes one retry from the fleet retry budget
//     (AcquireRetry); a half-open breaker's probe takes a permit
//     (AcquireProbe); StrictConsult() asks the agent (Check) before a first
//     attempt too. None of these waits longer than Config.AgentWait (50ms):
//     past it, or without an agent, the local breaker and budget decide;
//   - the attempt runs under the policy's perAttemptTimeout, derived from the
//     caller's context. A retry is started only when its full timeout, plus
//     the backoff, fits before the caller's deadline; otherwise the call ends
//     with errors.Join(context.DeadlineExceeded, lastErr);
//   - between attempts the call sleeps the policy's backoff — full jitter by
//     default, U[0, min(max, base·2^n)); equal, decorrelated and none are
//     selectable in the policy — and at least a server's Retry-After or
//     grpc-retry-pushback-ms, when that fits the deadline (a negative
//     pushback ends the retries; without a deadline, so does one longer
//     than the policy's backoff.max: no wait is unbounded). Sleeps end
//     early when ctx is done; the error is then errors.Join(ctx.Err(),
//     lastErr).
//
// Errors match, with errors.Is: ErrOpen (breaker open or half-open without
// a permit; fn was not called), ErrForcedOpen (an operator forced it open;
// also matches ErrOpen), ErrThrottled (adaptive throttling, or the ramp
// after a close, refused a first attempt: RejectedError.Reason "throttled"
// or "ramp"; also matches ErrOpen, so code that handles a refusing breaker
// handles it unchanged), ErrConcurrencyLimit (this process has its share of
// the fleet's in-flight limit; it does not match ErrOpen: the dependency is
// not judged unhealthy), ErrBudgetExhausted (joined with the last attempt's
// error), ErrNotRetryable (wrap it into an attempt's error to stop retries),
// ErrInvalidDependency, ErrInvalidOption. WithCallInfo tells a caller how
// many attempts a call made, whether the first was a probe and why it
// stopped (CallInfo). Refusals
// are *RejectedError values naming the dependency and reason, prebuilt per
// dependency: refusing allocates nothing.
//
// # Classification (DefaultClassifier)
//
// Retryable, counted as failures: network errors, the attempt's own timeout
// (never the caller's: a caller that gave up ends the call), HTTP 408, 429,
// 502, 503, 504, gRPC Unavailable, ResourceExhausted, Aborted and
// DeadlineExceeded. Failures, not retried: other 5xx, gRPC Internal, Unknown,
// DataLoss, unrecognised errors. Neither (the dependency answered): other
// 4xx and gRPC codes. A caller's cancellation counts as nothing; a caller's
// deadline passing during an attempt counts as a failure (the dependency did
// not answer in time). WithClassifier replaces it per call.
//
// # Options of a call (all optional)
//
//   - WithFallback(fb) / WithFallbackValue(fb): called with the final
//     error instead of returning it (default: none).
//   - WithClassifier(c): default DefaultClassifier.
//   - WithMaxAttempts(n): default the policy's maxAttempts (3 by default).
//   - WithAttemptTimeout(d): default the policy's perAttemptTimeout (500ms by
//     default); 0 means no per-attempt timeout.
//   - WithIdempotencyKey(k): default a random 128-bit key per call.
//   - StrictConsult(): default off (decide from the pushed snapshot).
//   - NestedRetries(true): default false (see "One retrying layer").
//   - WaitForSlot(d): default 0, no wait (see "Throttling and concurrency").
//   - WithRetryOwner(service): default Client.Service (the retry owner named
//     upstream; see "One retrying layer").
//   - WithCallInfo(&info): default none (see CallInfo).
//
// Dependency.With(opts...) makes them the defaults of a handle. Options are
// plain values: passing them allocates nothing.
//
// # Throttling, concurrency limits and hedging: when to use which
//
// Four policies, computed by the agents from the fleet's pooled counts and
// applied in process from the pushed snapshot:
//
//   - the breaker (always on) is for a dependency that is down or broken:
//     it stops the fleet's calls, probes, and closes again;
//   - the throttle (policy "throttle", off by default) is for one that is
//     overloaded but serving: while the breaker is closed, a first attempt
//     is refused (ErrThrottled) with the probability the agent computed from
//     the fleet's window, max(0, (requests − k·accepts)/(requests + 1)),
//     so the fleet sends about k times what the dependency answers. Accepts
//     are successes, and errors the classifier does not count as failures
//     (the dependency answered) are successes; requests include the
//     attempts Fusebox refused. One random draw (Config.Random) per first
//     attempt, no allocation. In shadow mode nothing is refused, and the
//     first attempts it would refuse are counted
//     (fusebox_client_shadow_throttled_total). An override lifts it;
//   - the concurrency limit (policy "concurrency.maxInFlight", off by
//     default) is for one with a known capacity in calls (a pool, worker
//     threads): one limit for the fleet, shared out to the nodes by traffic
//     and by each agent to the processes that follow the dependency. Every
//     attempt Allow admits, and every Do call (for all its sequential
//     attempts), holds a slot of this process's share; without one it fails
//     at once with ErrConcurrencyLimit, or waits up to WaitForSlot(d).
//     The share is exact, and its slots are striped like the counters: a
//     call is refused only when its stripe, the shared pool and every other
//     stripe had no free slot. A smaller share revokes no held slot: new
//     calls wait until fewer than it are held. Without a limit calls hold
//     no slot. Dependency.InFlight and Dependency.ConcurrencyLimit show
//     both sides;
//   - hedging (policy "retry.hedge", off by default) is for tail latency of
//     a healthy dependency with a few slow answers: an Idempotent or
//     IdempotentWithKey call made with Do or Call whose attempt has not
//     answered after the hedge delay starts another one next to it (same
//     idempotency key), up to maxHedges and never more than maxAttempts in
//     all; the first success wins and the others' contexts are cancelled
//     (Do returns once they returned: attempt functions must honour their
//     context). Every hedge takes a retry from the fleet budget (no token,
//     no hedge) and a concurrency slot when there is a limit (no slot, no
//     hedge), so hedges never add more load than the retry budget allows.
//     When the hedged round fails with a retryable error, the remaining
//     attempts are ordinary retries. The HTTP RoundTripper and the gRPC
//     interceptor do not hedge (an attempt's request body and response
//     belong to one attempt at a time). Pick a delay near the p95 of the
//     dependency's latency: hedging a slow dependency only doubles its load.
//
// While the agent is away, the local fallback computes neither the throttle
// nor the concurrency limit (they are fleet decisions): it keeps the last
// share and, for one breaker window, the last throttle probability the agent
// pushed (see "When the agent is away"), besides its own breaker and budget.
//
// # HTTP and gRPC
//
// Client.RoundTripper(next, opts...) retries GET, HEAD, OPTIONS, TRACE, PUT
// and DELETE; POST and PATCH only with an Idempotency-Key header (or under
// ContextWithClass(ctx, IdempotentWithKey), which generates the header once
// for all attempts; RequestClass says which). Bodies are replayed with
// GetBody (no GetBody: one attempt). The body of a failed attempt a retry
// may follow is read (up to 64 KiB) under the attempt's timeout and closed,
// to be the caller's answer should the retry not be made; the answer no
// attempt follows is returned as it comes. The per-attempt timeout covers
// an HTTP attempt until its response headers; a good body is read under the
// request's context. Dependency.RoundTripper(next) sends every request
// through one handle. Options:
// HTTPDependency(name) (default: the URL's host, with its port when the URL
// names one: two ports of one host are two dependencies),
// HTTPDependencyFunc, HTTPCallOptions.
//
// Client.UnaryClientInterceptor(opts...) does the same for unary gRPC calls.
// gRPC says nothing about idempotency, so every method is NonRetryable
// unless GRPCMethods(class, methods...) or GRPCMethodClass(f) say otherwise
// (or ContextWithClass per call). Options: GRPCDependency(name) (default:
// the connection's target), GRPCDependencyFunc, GRPCCallOptions. Keep
// gRPC's own retry policy off on that connection.
//
// # One retrying layer
//
// Every outgoing attempt carries Fusebox-Retry-Owner: <service> (HTTP
// header; gRPC metadata fusebox-retry-owner). Client.Middleware (HTTP) and
// Client.UnaryServerInterceptor / StreamServerInterceptor (gRPC) mark the
// context of a request that carries it: clientlib calls made under that
// context make a single attempt and fail fast upward, and pass the original
// owner on, so a request crossing three services is retried by the first
// only (3 attempts at the bottom, not 27). Policies have no opt-out field
// yet: NestedRetries(true), per call or per handle, is the opt-out.
// ContextWithRetryOwner marks contexts of other transports. HTTP attempts
// also carry Fusebox-Timeout-Ms, their remaining time; Middleware applies it
// as the request context's deadline (gRPC propagates deadlines itself).
//
// # When the agent is away
//
// Calls never wait for the agent: New returns at once, and until the agent's
// snapshots arrive (or whenever the session is down — agent missing, killed,
// restarting, refusing a dependency name, or so slow that a send blocks for
// 20 flush intervals) every dependency is decided by a local breaker and a
// local retry budget: the sharedstate engine with this process as the only
// node, fed with the same counts, using the last policy the agent pushed
// (every breaker threshold and retry setting of the dependency's effective
// policy; the fleet default's, from the agent's Welcome, for dependencies
// it never pushed; the built-in defaults before any agent was seen).
//
// What the fleet decided is kept too, so that an agent restarting during an
// incident does not reopen the flood: the last operator override the agent
// pushed (forced open or forced closed) holds until its expiry, or until
// the agent is back and says otherwise; the process's concurrency share
// holds until the agent is back; the throttle probability holds for one
// breaker window after the agent went away (it describes that window's
// traffic), then the local breaker alone decides. The local breaker starts
// from the fleet's breaker as the agent last gave it: while the agent
// decides, it follows the pushed snapshots (state, generation, since, open
// count) and does not trip on the counts it is fed, so a breaker the fleet
// closed is closed, and one it holds open stays open for the time it had
// left.
//
// Retries and probes asked of an unreachable or slow agent are decided
// locally after at most AgentWait. The client reconnects with jittered
// exponential backoff (ReconnectMin to ReconnectMax) and says so: one
// warning through Config.Logger when it falls back, one info line when the
// agent is back, fusebox_client_agent_connected, the OnAgentChange
// callback, Client.AgentConnected, Status.FromAgent. Counts made while the
// agent is away stay local (they would distort the agent's current
// window); pushed snapshots of the previous session stop deciding at
// disconnection.
//
// # Counting
//
// Every attempt's outcome — success, failure, slow (at least the policy's
// slowCallDuration), the attempt's own timeout (a slow failure), rejection —
// is counted on striped per-dependency counters and sent to the agent as
// aggregated deltas on the Session stream every FlushInterval (50ms) while
// there is traffic, by a background goroutine: the caller never waits, and
// memory is bounded by the number of dependencies (MaxDependencies, default
// 1000). Past it a new name is never refused: its calls go through
// untracked (Dependency.Untracked: one attempt, no breaker, nothing
// reported), counted in fusebox_client_untracked_calls_total; Client.Forget
// drops a name. Retries, probes and refusals decided by
// AcquireRetry/AcquireProbe are counted by the agent itself and not sent
// again.
//
// NewInProcess is the agent's: its egress proxy makes its calls through
// this same loop, deciding through the agent's engine in process (Engine)
// instead of a session.
//
// # Configuration (Config; every field optional)
//
//   - AgentAddress: default $FUSEBOX_AGENT, else unix:///run/fusebox/agent.sock;
//     "unix:///path", "/path" or a loopback host:port. NoAgent: default false.
//   - Service: default $FUSEBOX_SERVICE, else the executable's name.
//     Instance: default "<hostname>-<pid>".
//   - Dependencies: names announced at connection; default none.
//   - Registerer: default none (no metrics registered). OnStateChange,
//     OnAgentChange: default none; called in order from one goroutine.
//     Logger: default slog.Default(); one line per change of mode.
//   - Random: default math/rand/v2.Uint64.
//   - FlushInterval: default 50ms (at most 50ms). AgentWait: default 50ms.
//     ReconnectMin/ReconnectMax: default 100ms/5s. MaxDependencies: default
//     1000. DialOptions: default none.
//
// # Metrics (with Config.Registerer)
//
//   - fusebox_client_attempts_total{dependency,kind="first|retry"}
//   - fusebox_client_outcomes_total{dependency,outcome="success|failure"}
//   - fusebox_client_slow_calls_total{dependency}
//   - fusebox_client_rejected_total{dependency}
//   - fusebox_client_breaker_state{dependency,state="closed|open|half_open|forced_open|forced_closed"}
//   - fusebox_client_dependencies, fusebox_client_untracked_calls_total
//   - fusebox_client_agent_connected, fusebox_client_agent_sessions_total,
//     fusebox_client_agent_session_failures_total
//   - fusebox_client_agent_fallbacks_total{call="acquire_retry|acquire_probe|check"}
//   - fusebox_client_agent_refused_dependencies_total
//   - fusebox_client_events_dropped_total
//   - fusebox_client_shadow_throttled_total{dependency}: first attempts
//     throttling would have refused, let through in shadow mode
//   - fusebox_client_in_flight{dependency}, fusebox_client_concurrency_limit{dependency}:
//     calls holding a slot, and this process's share of the limit
//
// They are read from the client's own counters at scrape time (nothing on
// the call path); two clients never share a series.
//
// # Testing against clientlib
//
// Config.AgentAddress points a client at any agent (a real one in a
// t.TempDir() socket); Client.AgentConnected, Dependency.Status and the two
// callbacks tell a test what the client sees. clientlib reads the time
// package's clock (attempt deadlines, backoff sleeps, slow-call measurement,
// the local breaker): a test that moves time runs a NoAgent client in a
// testing/synctest bubble, where time passes only when every goroutine of
// the bubble waits (a connection to a real agent would keep it still).
//
// clientlib imports grpc, protobuf, client_golang and package sharedstate
// only — never etcd or memberlist (`make verify` checks it).
package clientlib
