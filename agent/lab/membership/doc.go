// Package membership holds the lab's tests of real agents gossiping on
// loopback, and in network namespaces: a trip reaching every agent,
// members crashing and joining late, the gossip keyring and its rotation,
// an observer, urgent rows, forgetting, a session's pushes and end,
// /metrics, a partition healing, and a rolling upgrade from the last
// release; and BenchmarkGossipBytes, the gossip's cost per agent. Its
// non-test code is this comment.
//
//	go test -race -count=1 ./membership/
//	go test -run '^$' -bench '^BenchmarkGossipBytes$' -benchtime 3x -count 3 ./membership/
package membership
