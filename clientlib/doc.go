// Package clientlib is what services link to call a dependency through
// Fusebox: one call that checks the fleet breaker (decided in process from
// snapshots the local agent pushes), retries the right way (full-jitter
// backoff, per-attempt timeouts under one deadline, idempotency keys, a fleet
// retry budget, a single retrying layer) and reports every outcome back.
//
// It imports grpc, protobuf and package sharedstate only — never etcd or
// memberlist (`make verify` checks it).
//
// Intended usage (the API arrives with the clientlib issue):
//
//	c, err := clientlib.New(clientlib.Config{}) // FUSEBOX_AGENT or the default socket
//	defer c.Close()
//	shipping := c.Dependency("shipping-api")
//	err = shipping.Do(ctx, clientlib.Idempotent, func(ctx context.Context, a clientlib.Attempt) error {
//		return callShipping(ctx)
//	})
package clientlib
