// Command fusebox-demo runs a whole demo fleet in one process: an embedded
// etcd, a coordinator, three agents, a demo dependency that cycles through
// healthy → failing → slow → recovering, and traffic from three services.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"time"
)

// config is what the demo's flags set.
type config struct {
	duration      time.Duration
	phaseDuration time.Duration
	headless      bool
	dataDir       string
	httpAddr      string
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "fusebox-demo:", err)
		os.Exit(2)
	}
	_ = cfg
	fmt.Fprintln(os.Stderr, "fusebox-demo: the demo fleet is not built yet: it arrives with the demo issue")
	os.Exit(1)
}

func parseFlags(args []string) (config, error) {
	cfg := config{phaseDuration: 15 * time.Second, httpAddr: "127.0.0.1:7070"}
	fs := flag.NewFlagSet("fusebox-demo", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: fusebox-demo [flags]

Runs a demo fleet in one process (embedded etcd, coordinator, 3 agents, a
demo dependency cycling healthy → failing → slow → recovering, 3 services
calling it through clientlib) and prints the dashboard URL.

Status: not built yet; it arrives with the demo issue.

Flags:
`)
		fs.PrintDefaults()
	}
	fs.DurationVar(&cfg.duration, "duration", 0, "stop after this long (0: run until Ctrl-C)")
	fs.DurationVar(&cfg.phaseDuration, "phase-duration", cfg.phaseDuration, "length of each phase of the dependency's cycle")
	fs.BoolVar(&cfg.headless, "headless", false, "do not print the dashboard URL banner; log transitions only")
	fs.StringVar(&cfg.dataDir, "data-dir", "", "data directory of the embedded etcd (default: a temporary directory)")
	fs.StringVar(&cfg.httpAddr, "http-addr", cfg.httpAddr, "address of the coordinator's dashboard")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if cfg.phaseDuration <= 0 {
		return cfg, fmt.Errorf("--phase-duration must be > 0, got %s", cfg.phaseDuration)
	}
	if cfg.duration < 0 {
		return cfg, fmt.Errorf("--duration must be >= 0, got %s", cfg.duration)
	}
	return cfg, nil
}
