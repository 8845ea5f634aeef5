// Package policies holds the lab's tests of real agents following etcd:
// policies and overrides reaching every agent, an etcd outage with the
// agents' disk caches, and an etcd wiped or restored from a snapshot under
// them; and BenchmarkOverridePropagation, the time from an override's
// write to the last agent enforcing it. Its non-test code is this comment.
//
//	go test -race -count=1 ./policies/
//	go test -run '^$' -bench '^BenchmarkOverridePropagation$' -count 4 ./policies/
package policies
