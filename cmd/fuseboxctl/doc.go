// Command fuseboxctl is the Fusebox admin CLI. It talks to a coordinator's
// Admin gRPC API (--coordinator host:port, or $FUSEBOX_COORDINATOR; default
// 127.0.0.1:7960) with a bearer token (--token-file FILE, or the token itself
// in $FUSEBOX_TOKEN; none for a coordinator without a tokens file, which
// serves loopback callers only).
//
//	fuseboxctl status                               the fleet at a glance
//	fuseboxctl deps                                 every dependency: state, rates, budget
//	fuseboxctl dep show NAME                        one dependency, fleet + per-zone + per-node
//	fuseboxctl policy get [NAME] [--stored]         the effective policy and each value's source
//	                                                (--stored: the stored document; no NAME: the list)
//	fuseboxctl policy set [NAME] -f FILE [--yes] [--expected-revision N]
//	                                                shows the changes and a replay, asks, then writes (CAS)
//	fuseboxctl policy simulate -f FILE [--dependency NAME] [--since 1h]
//	                                                replay the history under the current and a proposed policy
//	fuseboxctl policy edit NAME [--yes]             $EDITOR, shows the changes, asks, then compare-and-swap
//	                                                on the revision read
//	fuseboxctl policy lint FILE [--deadline 2s]     offline check, no coordinator needed
//	fuseboxctl policy rm NAME [--yes] [--expected-revision N]
//	                                                shows what the deletion changes, asks, then deletes (CAS)
//	fuseboxctl force-open NAME [--ttl 10m] [--reason TEXT]
//	fuseboxctl force-closed NAME [--ttl 10m] [--reason TEXT]
//	fuseboxctl clear NAME
//	fuseboxctl members
//	fuseboxctl audit [--dependency NAME] [--limit N]
//	fuseboxctl watch [--dependency NAME] [--count N]
//	fuseboxctl completion bash|zsh|fish|powershell
//
// Every command takes -o table|json|yaml. JSON and YAML carry the same
// fields (camelCase); states are "closed", "open", "half-open", overrides
// "forced-open", "forced-closed". watch streams the coordinator's events
// (the Admin API's Watch) and -o json prints one object per line, with the
// fields of /api/v1/events; after a dropped stream it resumes after the
// last event it printed, so it neither misses nor repeats one.
//
// Writes record --actor (default $USER@hostname) in the audit, beside the
// identity of the token.
//
// Exit codes (stable; scripts may rely on them):
//
//	0  success
//	1  any other error, usage errors included (bad flag, wrong arguments)
//	2  invalid policy (or dependency name): every violation on stderr, one per line
//	3  revision conflict: --expected-revision (or policy edit's read) no longer matches
//	4  coordinator unreachable: the message names the address
//	5  credentials refused: missing or unknown token (unauthenticated), or a
//	   viewer token asking for a write (permission denied)
//	6  not written: policy set, edit or rm was declined at its prompt, or had
//	   no terminal to ask on (stdin not a terminal, or -f -) and no --yes
//
// Every string the coordinator sends (an override's actor and reason, a
// member's name, an error message) is printed with its control characters
// escaped (\x1b, \u009b), in tables, text, JSON and YAML alike.
//
// Errors go to stderr prefixed "fuseboxctl: ". A failure of the
// coordinator's etcd is exit 1, not 4: the coordinator answered.
package main
