// Command scale runs the fleet scenarios of agent/lab/scale for each
// size given and prints agent/README.md's "Scale" table (markdown) with the
// machine it ran on. `make scale` runs it for N = 10, 50, 200 and 500.
//
//	cd agent/lab && go run ./scale/cmd/scale -sizes 10,50 -split 30s
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/lab/scale"
)

func main() {
	var cfg scale.RunConfig
	var sizes string
	flag.StringVar(&sizes, "sizes", "10,50,200,500", "fleet sizes, comma-separated")
	flag.DurationVar(&cfg.Split, "split", 30*time.Second, "how long scenario (e) keeps the fleet split")
	flag.DurationVar(&cfg.Measure, "measure", 10*time.Second, "how long scenarios (b) and (c) measure the steady state")
	flag.BoolVar(&cfg.Verbose, "v", false, "print each step to stderr")
	flag.StringVar(&cfg.Scenarios, "scenarios", "abcdef", "which scenarios to run, by letter (the others' columns print as –)")
	dilations := flag.String("dilate", "1", "time dilation: comma-separated K (every size at each) or N:K (size N at K); each (N, K) is a row")
	// Tuning experiments: the agent's gossip timings (0 keeps the default).
	var gossipInterval, probeInterval, pushPullInterval time.Duration
	var retransmitMult int
	rowFanout := flag.Int("row-fanout", -1, "the agents' --row-fanout (-1: the default)")
	var rejoinInterval, healRejoinInterval time.Duration
	flag.DurationVar(&rejoinInterval, "rejoin-interval", 0, "the agents' --rejoin-interval (0: the default)")
	flag.DurationVar(&healRejoinInterval, "heal-rejoin-interval", 0, "the agents' --heal-rejoin-interval (0: the default)")
	flag.DurationVar(&gossipInterval, "gossip-interval", 0, "the agents' --gossip-interval (0: the default)")
	flag.DurationVar(&probeInterval, "probe-interval", 0, "the agents' --probe-interval (0: the default)")
	flag.DurationVar(&pushPullInterval, "push-pull-interval", 0, "the agents' --push-pull-interval (0: the default)")
	flag.IntVar(&retransmitMult, "retransmit-mult", 0, "the agents' --retransmit-mult (0: the default)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "scale: -cpuprofile: %v\n", err)
			os.Exit(2)
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	if strings.Trim(cfg.Scenarios, "abcdef") != "" || cfg.Scenarios == "" {
		fmt.Fprintf(os.Stderr, "scale: -scenarios: %q: want letters of abcdef\n", cfg.Scenarios)
		os.Exit(2)
	}
	cfg.Tune = func(c *agent.Config) {
		if gossipInterval > 0 {
			c.GossipInterval = gossipInterval
		}
		if probeInterval > 0 {
			c.ProbeInterval = probeInterval
		}
		if pushPullInterval > 0 {
			c.PushPullInterval = pushPullInterval
		}
		if retransmitMult > 0 {
			c.RetransmitMult = retransmitMult
		}
		if *rowFanout >= 0 {
			c.RowFanout = *rowFanout
		}
		if rejoinInterval > 0 {
			c.RejoinInterval = rejoinInterval
		}
		if healRejoinInterval > 0 {
			c.HealRejoinInterval = healRejoinInterval
		}
	}
	var err error
	if cfg.Dilate, err = scale.ParseDilations(*dilations); err != nil {
		fmt.Fprintf(os.Stderr, "scale: -dilate: %v\n", err)
		os.Exit(2)
	}
	for _, s := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 2 {
			fmt.Fprintf(os.Stderr, "scale: -sizes: %q is not a fleet size (an integer >= 2)\n", s)
			os.Exit(2)
		}
		cfg.Sizes = append(cfg.Sizes, n)
	}
	// Hundreds of agents in one process allocate a lot of short-lived
	// garbage (memberlist's compression, protobuf): collect less often so
	// the CPU goes to the agents. The heap figures are live heaps after a
	// forced collection, so they do not depend on this.
	debug.SetGCPercent(400)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := scale.Run(ctx, cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		stop()
		pprof.StopCPUProfile()
		os.Exit(1) //nolint:gocritic // the profile is stopped above
	}
}
