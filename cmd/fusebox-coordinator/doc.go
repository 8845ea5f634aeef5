// Command fusebox-coordinator is Fusebox's control plane. It builds a
// coordinator.Config from its flags, FUSEBOX_* environment variables and an
// optional YAML file (coordinator.LoadConfig, the agent's rules) and calls
// coordinator.Run.
//
// Without --etcd it starts an embedded etcd in --data-dir and logs the client
// URL to give the agents (--etcd on each agent). Without --tokens-file it
// serves loopback addresses only, and every loopback caller is an admin.
//
// Usage:
//
//	fusebox-coordinator --data-dir /var/lib/fusebox/coordinator   # embedded etcd, loopback only
//	fusebox-coordinator --etcd https://etcd:2379 --tokens-file /etc/fusebox/tokens \
//		--grpc-addr 0.0.0.0:7960 --http-addr 0.0.0.0:7070 --join agent-1:7946
//	FUSEBOX_ETCD=https://etcd:2379 fusebox-coordinator --config /etc/fusebox/coordinator.yaml
package main
