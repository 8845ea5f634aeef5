// Package clientlib is Fusebox's Go client: services call their
// dependencies through it, and every instance of every service then shares
// one circuit breaker and one retry budget per dependency with the rest of
// the fleet. First attempts are decided in process from the snapshots the
// local agent pushes (no RPC on the hot path); retries, per-attempt
// timeouts under the caller's deadline, backoff, idempotency keys and a
// single retrying layer across services are applied here, and every
// outcome is counted and sent to the agent. Without an agent a local
// breaker and budget decide, and calls go on.
//
//	fb, err := clientlib.New(clientlib.Config{}) // the agent at $FUSEBOX_AGENT or unix:///run/fusebox/agent.sock
//	if err != nil {
//		return err
//	}
//	defer fb.Close()
//	httpClient := &http.Client{Transport: fb.RoundTripper(nil)}
//	err = fb.Dependency("shipping-api").Do(ctx, clientlib.Idempotent,
//		func(ctx context.Context, a clientlib.Attempt) error { return callShipping(ctx) })
//
// The examples show each form: HTTP, gRPC, serving, fallbacks. The guide is
// clientlib/README.md: a call attempt by attempt and its errors, the
// options and Config with their defaults, the agent away, safe retries,
// throttling, concurrency limits, hedging and the metrics.
package clientlib
