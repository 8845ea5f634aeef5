// Command scaleprocs runs scenario (a) of agent/README.md's "Scale" section with
// N real fusebox-agent processes on loopback (an embedded etcd, unix
// sockets in a temp dir) and prints the first columns of `make scale`'s
// table, to check the simulated network against real sockets. It exits 1
// when the trip did not reach every agent (each must hold the breaker open
// and reject), 2 on bad flags. Every agent process is stopped on exit and
// on Ctrl-C. `make scale-procs N=40` builds the agent and runs it.
//
//	cd agent/lab && go run ./scale/cmd/scaleprocs -n 40 -agent ../../bin/fusebox-agent -v
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/fusebox-dev/fusebox/agent/lab/fleet"
	"github.com/fusebox-dev/fusebox/agent/lab/scale"
	"github.com/fusebox-dev/fusebox/agent/lab/scale/procs"
)

func main() {
	os.Exit(run())
}

func run() int {
	var cfg procs.Config
	var verbose bool
	flag.IntVar(&cfg.N, "n", 40, "number of agent processes (at least 2)")
	flag.StringVar(&cfg.Agent, "agent", "", "the fusebox-agent binary (default: go build ./cmd/fusebox-agent into a temp dir)")
	flag.IntVar(&cfg.Clients, "clients", 5, "agents whose clients report the failures (k)")
	flag.DurationVar(&cfg.StartTimeout, "start-timeout", 5*time.Minute, "bound on starting the agents and reaching full membership")
	flag.DurationVar(&cfg.TripTimeout, "trip-timeout", 60*time.Second, "bound on the trip reaching every agent")
	flag.BoolVar(&cfg.Keep, "keep", false, "keep the temp dir (agent logs) when the run fails")
	flag.BoolVar(&verbose, "v", false, "print each step to stderr")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "scale-procs: unexpected arguments %q\n", flag.Args())
		return 2
	}
	if verbose {
		cfg.Log = os.Stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if cfg.Agent == "" {
		dir, err := os.MkdirTemp("", "fbprocs-bin")
		if err != nil {
			fmt.Fprintln(os.Stderr, "scale-procs:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		bins, err := fleet.Build(ctx, dir, false, "fusebox-agent")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		cfg.Agent = bins[0]
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}

	fmt.Printf("Machine: %s; Go %s; load average at start %s.\n", scale.Machine(), runtime.Version(), scale.LoadAvg())
	fmt.Printf("%d fusebox-agent processes on loopback, %d clients, policy scale.Policy() from an embedded etcd.\n\n", cfg.N, cfg.Clients)
	r, err := procs.Run(ctx, cfg)
	if r.Open > 0 {
		fmt.Println(procs.Header)
		fmt.Println(r.Markdown())
		fmt.Printf("\nA trip was open on %d of %d agents %.0f ms after the first (the last one); %d of them rejected a first attempt; %d agents proposed it.\n",
			r.Open, r.N, float64(r.Max)/float64(time.Millisecond), r.Rejecting, r.Proposers)
	}
	fmt.Printf("Load average at the end: %s.\n", scale.LoadAvg())
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "scale-procs: interrupted; every agent process was stopped")
		return 1
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
