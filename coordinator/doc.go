// Package coordinator is Fusebox's control plane (fusebox-coordinator): the
// Admin gRPC API behind fuseboxctl (policies, overrides, audit, members,
// fleet snapshot), a fleet observer that joins the gossip with role
// "observer", and the HTTP side: /api/v1/fleet (JSON), /api/v1/events (SSE),
// /metrics, /healthz and the dashboard at /. It is stateless: everything
// durable is in etcd, so several coordinators can run side by side.
//
// Usage:
//
//	cfg := coordinator.DefaultConfig()
//	cfg.DataDir = "/var/lib/fusebox/coordinator" // embedded etcd when cfg.Etcd is empty
//	if err := cfg.Validate(); err != nil {
//		log.Fatal(err)
//	}
//	err := coordinator.Run(ctx, cfg)
//
// Status: this build has the configuration; the servers arrive with the
// control-plane issue, and Run says so.
package coordinator
