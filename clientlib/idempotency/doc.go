// Package idempotency is the server half of safe retries: it runs each
// request carrying an Idempotency-Key once, stores its outcome, and replays
// it to the retries that follow, even when they land on another instance.
//
// clientlib sends the same key on every attempt of an IdempotentWithKey
// call; a timeout does not prove the first attempt did nothing, so the
// server must deduplicate:
//
//	store, _ := idempotency.NewMemoryStore(idempotency.MemoryConfig{}) // one instance
//	// or, shared by every instance: redisstore.New(redis.NewClient(…))
//	dd, err := idempotency.New(store)
//	…
//	http.Handle("/charges", fb.Middleware(dd.Middleware(charges)))
//	grpc.NewServer(grpc.ChainUnaryInterceptor(fb.UnaryServerInterceptor(), dd.UnaryServerInterceptor()))
//
// Semantics (Middleware and UnaryServerInterceptor document the codes;
// clientlib's README, "Safe retries end to end", the whole contract):
//
//   - requests without a key pass through untouched;
//   - keys are scoped per retry owner (Fusebox-Retry-Owner by default,
//     HTTPScope/GRPCScope to choose), so two services cannot collide;
//   - the first request with a key reserves it in the Store (atomically:
//     of concurrent requests exactly one runs) for ReservationTTL, runs,
//     and stores its answer for ResultTTL: status, selected headers and
//     body (up to MaxResponseBytes);
//   - once the handler has started, its answer is stored whatever it is,
//     5xx and gRPC Unavailable included, and a panic as 500 / Internal:
//     the Deduper cannot know what a failed handler did, and retriers
//     repeat 502, 503, 504 (Stripe's idempotency keys work the same way);
//   - a handler that had no effect calls NothingRan(ctx): its key is then
//     released, and a retry runs again;
//   - a duplicate that arrives while the first runs waits for it (at most
//     MaxWait, and never past its own deadline), then is replayed, or gets
//     409 Conflict / Aborted with Retry-After;
//   - a replayed answer says so (Idempotent-Replayed: true);
//   - a key reused with a different request (method, path and query, body;
//     for gRPC method and message) gets 422 / InvalidArgument;
//   - when the store fails, FailClosed (the default) answers 503 /
//     Unavailable without running the handler, which a retrier may repeat;
//     FailOpen runs it unrecorded.
//
// The Deduper's own answers (400, 409, 413, 422, 503 store-unavailable)
// are never stored: the handler did not start.
//
// Stores: MemoryStore (bounded in keys and bytes, for a single instance)
// and clientlib/idempotency/redisstore (for a fleet), which lives in its own
// package so that only services that use it link the Redis client.
//
// Metrics (WithRegisterer, MemoryConfig.Registerer):
// fusebox_idempotency_requests_total{outcome},
// fusebox_idempotency_waiting_requests,
// fusebox_idempotency_store_errors_total,
// fusebox_idempotency_reservations_lost_total, and for the memory store
// fusebox_idempotency_memory_entries, fusebox_idempotency_memory_bytes,
// fusebox_idempotency_memory_evicted_total,
// fusebox_idempotency_memory_refused_total.
package idempotency
