// Package clients holds the lab's tests of the callers with real agents
// (real gossip on loopback, real gRPC on unix sockets, an embedded etcd):
// clientlib clients on their agents' sockets and the agents' egress
// proxies, sharing fleet breakers and retry budgets, shaping traffic,
// probing, and riding through an agent's restart. Its non-test code is
// this comment.
//
//	go test -race -count=1 ./clients/
package clients
