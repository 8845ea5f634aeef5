// Command fusebox-demo runs a whole demo fleet in one process: an embedded
// etcd, a coordinator, three agents, a demo dependency that cycles through
// healthy → failing → slow → recovering, and traffic from three services.
// `make run` builds it and fuseboxctl into bin/ and starts it; the banner's
// command lines run the fuseboxctl beside it (--fuseboxctl names another).
// The logic lives in package cmd/fusebox-demo/internal/demo.
//
// Usage:
//
//	make run                                   # or: go run ./cmd/fusebox-demo
//	fusebox-demo --duration 70s --headless --phase-duration 5s
//	fusebox-demo --agent unix:///run/fusebox/agent.sock   # only the services, on a running agent
package main
