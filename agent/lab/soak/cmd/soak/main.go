// Command soak runs Fusebox for a long time under random faults and
// checks its promises continuously (package soak): real fusebox-agent
// processes in network namespaces, a 3-member etcd cluster, a
// fusebox-coordinator, traffic through clientlib, and agent kills, etcd
// member kills, coordinator restarts, partitions and packet-loss bursts
// drawn from a seed. It prints the seed, every violation as it happens
// and a summary, and exits 1 on any violation, 3 when the soak itself
// failed, 2 on bad flags or a machine that cannot run it (not root, no
// nft), 130 when interrupted. Ctrl-C and SIGTERM stop the run in order
// and delete its namespaces. `make soak DURATION=30m` builds the binaries
// and runs it.
//
//	cd agent/lab && go run ./soak/cmd/soak -duration 30m -bin ../../bin [-seed N] [-v]
//
// The modes `inner` (the run inside its namespace) and `etcd-member` (one
// etcd member) are how the command runs itself; they are not for people.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/fusebox-dev/fusebox/agent/lab/soak"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(args) > 0 {
		switch args[0] {
		case "inner":
			if len(args) != 2 {
				fmt.Fprintln(os.Stderr, "soak: inner CONFIG")
				return 2
			}
			return soak.RunInner(ctx, args[1])
		case "etcd-member":
			return etcdMember(ctx, args[1:])
		}
	}
	var cfg soak.Config
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Minute, "length of the run, from the moment the fleet is up")
	fs.Int64Var(&cfg.Seed, "seed", 0, "seed of the fault schedule (0: draw one; the run prints it)")
	fs.IntVar(&cfg.Agents, "agents", 8, "agents, one per namespace (at least 4)")
	fs.IntVar(&cfg.Sentinels, "sentinels", 2, "agents never killed (their resource series span the run)")
	fs.Float64Var(&cfg.Rate, "rate", 2, "calls per second of each agent's client to each dependency")
	fs.StringVar(&cfg.Bin, "bin", "bin", "directory of fusebox-agent, fusebox-coordinator and fuseboxctl")
	fs.StringVar(&cfg.Dir, "dir", "", "where the run's directory (data, sockets, logs) is made (default $TMPDIR)")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the run's directory after a clean run (it is kept after a failed one)")
	fs.BoolVar(&cfg.Verbose, "v", false, "print the schedule and each fault and write as it happens")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "soak: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if err := soak.Requirements(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	res, err := soak.Run(ctx, cfg)
	if res.Dir != "" {
		fmt.Printf("soak: logs and data kept in %s\n", res.Dir)
	}
	switch {
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		return 3
	case res.Violations > 0:
		fmt.Printf("soak: FAILED: invariants were violated (seed %d)\n", res.Seed)
		return 1
	case res.Troubles > 0:
		fmt.Printf("soak: the soak itself failed (seed %d): see SOAK ERROR lines\n", res.Seed)
		return 3
	case res.Interrupted:
		return 130
	}
	fmt.Printf("soak: ok: no violation (seed %d)\n", res.Seed)
	return 0
}

// etcdMember runs one member of the soak's etcd cluster.
func etcdMember(ctx context.Context, args []string) int {
	var m soak.EtcdMember
	fs := flag.NewFlagSet("soak etcd-member", flag.ContinueOnError)
	fs.StringVar(&m.Name, "name", "", "member name")
	fs.StringVar(&m.Dir, "dir", "", "data directory")
	fs.StringVar(&m.ClientURL, "client-url", "", "client URL, http://host:port")
	fs.StringVar(&m.PeerURL, "peer-url", "", "peer URL, http://host:port")
	fs.StringVar(&m.InitialCluster, "initial-cluster", "", "name=peerURL,… of every member")
	fs.StringVar(&m.Token, "token", "", "cluster token")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := soak.RunEtcdMember(ctx, m); err != nil {
		fmt.Fprintln(os.Stderr, strings.TrimSpace(err.Error()))
		return 1
	}
	return 0
}
