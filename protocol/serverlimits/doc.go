// Package serverlimits holds the transport limits both daemons' servers
// apply, so the agent's and the coordinator's are set alike: the timeouts
// of an HTTP server's connections (HTTPTimeouts) and a gRPC server's stream
// cap and keepalive (GRPCServerOptions). Each daemon keeps its own values
// (agent.DefaultHTTPTimeouts, coordinator.MaxConcurrentStreams, …).
//
//	srv := grpc.NewServer(serverlimits.GRPCServerOptions(256)...)
//	hs := serverlimits.HTTPTimeouts{ReadHeader: 5 * time.Second, Read: 10 * time.Second,
//		Write: 30 * time.Second, Idle: 2 * time.Minute}.Server(handler)
package serverlimits
