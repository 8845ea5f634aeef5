// Package conformance holds the conformance suite of Fusebox's callers:
// one set of scenarios, written once, that the Go clientlib, HTTP through
// an agent's egress proxy and the Python client each pass against real
// agents (in-process agents with real memberlist gossip on loopback and
// real gRPC over unix sockets, or a fusebox-agent process where one is
// killed; an embedded etcd, a coordinator and the real fuseboxctl). The
// scenarios are the client contract of protocol/README.md ("The client
// contract") as behaviour, checked by counts and orderings at an HTTP
// upstream, never by timings:
//
//   - a dependency that dies: each caller stops calling once the fleet's
//     breaker is open (nothing reaches the upstream after the first
//     refusal);
//   - a POST without an Idempotency-Key is never retried, one with a key
//     is, with the key on every attempt;
//   - the retry budget is the fleet's: the retries of the three callers
//     together, counted at the upstream, stay within one budget;
//   - half-open probes are fleet-wide: the upstream never has more than
//     halfOpenProbes requests in progress, whichever callers send them;
//   - `fuseboxctl force-open` is obeyed by every caller, `clear` too;
//   - a mixed fleet trips as one: each caller alone sends fewer failures
//     than the trip rule wants, together they trip the breaker, and every
//     caller is refused;
//   - the agent killed after an incident ended: the Go and Python
//     clients' local fallback starts from the fleet's closed breaker and
//     refuses nothing;
//   - the agent killed: the Go and Python clients keep working on their
//     local fallback and keep a force-open; the proxy goes with its agent
//     (connection refused).
//
// The package has no code outside its tests: `go test ./conformance` in
// the lab module, agent/lab (part of `make test`), runs it. Its world is
// built by the lab's fleet builder (package fleet); its TestMain builds
// fuseboxctl and fusebox-agent with the go command; the Python caller
// needs Debian's /usr/bin/python3 with python3-grpcio, python3-protobuf
// and python3-requests (`make test-deps`), and its scenarios skip, saying
// so, without them (they fail instead under FUSEBOX_REQUIRE_PYTHON=1, as
// CI sets).
package conformance
