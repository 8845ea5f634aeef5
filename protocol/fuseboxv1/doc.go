// Package fuseboxv1 is the Go code generated from
// protocol/fusebox/v1/fusebox.proto (proto package fusebox.v1): the Agent
// service that clientlib calls on the local agent, the coordinator's Admin
// service, and the gossip messages framed by package protocol. Do not edit
// the *.pb.go files: change the .proto and run `make proto`.
//
// Usage:
//
//	conn, err := grpc.NewClient("unix:///run/fusebox/agent.sock",
//		grpc.WithTransportCredentials(insecure.NewCredentials()))
//	…
//	d, err := fuseboxv1.NewAgentClient(conn).Check(ctx, &fuseboxv1.CheckRequest{
//		Dependency: "shipping-api", Kind: fuseboxv1.AttemptKind_ATTEMPT_KIND_FIRST})
package fuseboxv1
