// Command fusebox-agent is the per-host Fusebox daemon. It builds an
// agent.Config from its flags, FUSEBOX_* environment variables and an
// optional YAML file (agent.LoadConfig), and calls agent.Run until SIGTERM or
// SIGINT, on which the agent leaves the gossip cluster, ends client sessions
// with codes.Unavailable and exits within its shutdown timeout (5 s).
//
// Usage:
//
//	fusebox-agent --name host-1 --zone eu-1 --etcd http://etcd:2379 \
//		--socket /run/fusebox/agent.sock --http-addr 127.0.0.1:7951
//	FUSEBOX_ETCD=http://etcd:2379 fusebox-agent --config /etc/fusebox/agent.yaml
package main
