// Package soak runs Fusebox for a long time under random faults and checks
// its promises continuously (`make soak DURATION=30m`, root only).
//
// A run builds a small network of Linux network namespaces — one per
// agent, one per etcd member, one for the coordinator and one for the
// soak's own callers and checks, each with a veth to a bridge in a switch
// namespace — and starts real processes in them: fusebox-agent per agent
// namespace, a 3-member etcd cluster (this command's etcd-member mode: the
// embedded etcd server, one process per member) and fusebox-coordinator.
// Callers in the soak's namespace call three dependencies (small HTTP
// servers) through clientlib, one client per agent over its unix socket:
// "healthy" always answers, "dead" answers for the warm-up, then fails
// with 503 and later refuses connections, and "ops" answers while the
// operator writes its policy and overrides with the real fuseboxctl. An
// observer session per agent follows the snapshots each agent pushes.
//
// The faults come from a Schedule drawn from a seed (NewSchedule): agent
// SIGKILL and restart, etcd member kill and restart (one at a time), a
// coordinator restart, partitions between groups of namespaces and
// packet-loss bursts (nftables rules inside the namespaces). The checkers
// (HealthyChecker, DeadChecker, WriteChecker, WritePathChecker,
// MembershipChecker, DeadlineChecker, ProcessChecker, TrendChecker) are
// pure: they are fed the samples and events, and say what broke.
//
//	s, err := soak.NewSchedule(soak.Plan{Seed: 1, Agents: 8, Sentinels: 2, EtcdMembers: 3,
//		Start: time.Minute, End: 28 * time.Minute})
//	fmt.Print(s.Table())
//
// Nothing leaves the machine and nothing outside the namespaces the run
// made is touched; they are deleted on exit, on Ctrl-C and on SIGTERM.
package soak
