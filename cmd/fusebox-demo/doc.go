// Command fusebox-demo runs a whole demo fleet in one process (make run):
// an embedded etcd, a coordinator, three agents, a demo dependency that
// cycles healthy → failing → slow → recovering, and traffic from three
// services; with --agent, only the services, on a running agent. The logic
// lives in package cmd/fusebox-demo/internal/demo; cmd/README.md, "The
// demo", is the guide.
//
//	make run                                   # or: go run ./cmd/fusebox-demo
//	fusebox-demo --duration 70s --headless --phase-duration 5s
//	fusebox-demo --agent unix:///run/fusebox/agent.sock   # only the services, on a running agent
package main
