// Package idempotency is the server half of safe retries: it runs each
// request carrying an Idempotency-Key once, stores its answer whatever it
// is (5xx included: once a handler started, a retry must not run it again),
// and replays it to the retries that follow, even when they land on
// another instance.
//
//	store, _ := idempotency.NewMemoryStore(idempotency.MemoryConfig{}) // one instance
//	// or, shared by every instance: redisstore.New(redis.NewClient(…))
//	dd, err := idempotency.New(store)
//	…
//	http.Handle("/charges", fb.Middleware(dd.Middleware(charges)))
//	grpc.NewServer(grpc.ChainUnaryInterceptor(fb.UnaryServerInterceptor(), dd.UnaryServerInterceptor()))
//
// Stores: MemoryStore (bounded in keys and bytes, for a single instance)
// and clientlib/idempotency/redisstore (for a fleet), a module of its own
// so that only services that use it link the Redis client. The contract —
// what is stored, replayed, refused, and for how long — is in
// clientlib/README.md, "Safe retries end to end".
package idempotency
