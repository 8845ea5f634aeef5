// Command fuseboxctl is the Fusebox admin CLI, a client of a coordinator's
// Admin gRPC API (--coordinator host:port or $FUSEBOX_COORDINATOR, default
// 127.0.0.1:7960; a bearer token from --token-file or $FUSEBOX_TOKEN).
//
//	fuseboxctl status                        the fleet at a glance
//	fuseboxctl dep show NAME                 one dependency, fleet + per-zone + per-node
//	fuseboxctl policy set NAME -f FILE       shows the changes and a replay, asks, then writes
//	fuseboxctl force-open NAME --ttl 10m --reason TEXT
//	fuseboxctl watch                         every transition, as it happens
//
// fuseboxctl -h lists every command. coordinator/README.md, "fuseboxctl",
// says what each shows and the exit codes scripts may rely on.
package main
