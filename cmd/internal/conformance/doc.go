// Package conformance holds the conformance suite of Fusebox's callers:
// one set of scenarios, written once, that the Go clientlib, HTTP through
// an agent's egress proxy and the Python client each pass against real
// agents (in-process agents with real memberlist gossip on loopback and
// real gRPC over unix sockets, an embedded etcd, a coordinator and the
// real fuseboxctl binary). The scenarios are the client contract of the
// README ("The client contract") as behaviour:
//
//   - a dependency that dies: each caller stops calling once the fleet's
//     breaker is open (no call reaches the upstream after that);
//   - the retry budget is the fleet's: the retries of the three callers
//     together, counted at the upstream, stay within the budget computed
//     from their first attempts;
//   - half-open probes are fleet-wide: the upstream sees at most
//     halfOpenProbes probes at once, whichever callers send them;
//   - `fuseboxctl force-open` is obeyed by every caller;
//   - a POST without an Idempotency-Key is never retried, one with a key
//     is;
//   - a mixed fleet trips as one: each caller alone sends fewer failures
//     than minimumRequests, together they trip the breaker, and every
//     caller is refused;
//   - the agents stopped: the Go and Python clients keep working on their
//     local fallback and keep a force-open; the proxy goes with its agent
//     (connection refused).
//
// The package has no code outside its tests: `go test ./cmd/internal/conformance`
// (part of `make test`) runs it. Its TestMain builds fuseboxctl with the
// go command, in the module that holds cmd/fuseboxctl.
package conformance
