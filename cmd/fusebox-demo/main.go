package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/fusebox-dev/fusebox/cmd/fusebox-demo/internal/demo"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run parses the flags and runs the demo until SIGINT/SIGTERM or
// --duration; it returns the exit code (0 ok, 1 failure, 2 usage).
func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stdout, stderr)
	if err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "fusebox-demo:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, a second one kills the process at once.
		<-ctx.Done()
		stop()
	}()
	defer stop()
	if err := demo.Run(ctx, cfg); err != nil {
		fmt.Fprintln(stderr, "fusebox-demo:", err)
		return 1
	}
	return 0
}

// defaultFuseboxctl is the fuseboxctl binary beside this one (make run
// builds both into bin/), relative to the working directory when it is
// under it ("./bin/fuseboxctl"), else absolute; "fuseboxctl" (from PATH)
// when there is none.
func defaultFuseboxctl() string {
	self, err := os.Executable()
	if err != nil {
		return "fuseboxctl"
	}
	ctl := filepath.Join(filepath.Dir(self), "fuseboxctl")
	if st, err := os.Stat(ctl); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return "fuseboxctl"
	}
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, ctl); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return "./" + rel
		}
	}
	return ctl
}

func parseFlags(args []string, stdout, stderr io.Writer) (demo.Config, error) {
	cfg := demo.DefaultConfig()
	cfg.Out = stdout
	logLevel := "warn"
	fs := pflag.NewFlagSet("fusebox-demo", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage:
  fusebox-demo [flags]

Runs a demo fleet in one process: an embedded etcd with a demo policy, a
coordinator (dashboard, JSON and Admin API), 3 agents gossiping on loopback
in 3 zones, and 3 services calling two dependencies: checkout and orders
through clientlib, returns (as a service in another language would)
through agent-c's egress proxy. shipping-api cycles healthy -> failing ->
slow -> recovering; catalog-api stays healthy (force it open from the
dashboard with the printed token). Every breaker transition is logged;
Ctrl-C (or --duration) stops the demo and prints a summary.

The banner names each agent's FUSEBOX_AGENT, for a service of yours that
links clientlib, and agent-c's egress proxy, for one in another language:
`+"  "+strings.Join(demo.ProxyClients, "\n  ")+`

With --agent ADDR (e.g. --agent unix:///run/fusebox/agent.sock, or
--agent "$FUSEBOX_AGENT"), it starts no etcd, coordinator or agents: only
the two dependencies and the 3 services, all three through clientlib on
the agent at ADDR and the policies it has. --http-addr then serves /healthz
and /readyz; --grpc-addr and --token are not used.

Flags:
`+fs.FlagUsages())
	}
	fs.StringVar(&cfg.Agent, "agent", "", "run only the demo services, on the external agent at this address (unix:///path.sock, /path.sock or loopback host:port; default: a whole fleet in process)")
	fs.DurationVar(&cfg.Duration, "duration", 0, "stop after this long (0: run until Ctrl-C)")
	fs.DurationVar(&cfg.PhaseDuration, "phase-duration", cfg.PhaseDuration, "length of each of the 4 phases of shipping-api's cycle")
	fs.BoolVar(&cfg.Headless, "headless", false, "no banner: print the addresses on one line, then phases, transitions and the summary")
	fs.StringVar(&cfg.DataDir, "data-dir", "", "directory for etcd's data and the agents' caches (default: a temporary directory, removed at exit)")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", cfg.HTTPAddr, "coordinator HTTP address: dashboard, /api/v1, /metrics (port 0: any free port)")
	fs.StringVar(&cfg.GRPCAddr, "grpc-addr", cfg.GRPCAddr, "coordinator Admin API address, for fuseboxctl (port 0: any free port)")
	fs.StringVar(&cfg.AdminToken, "token", "", "admin bearer token of the coordinator (default: a random one, printed)")
	fs.IntVar(&cfg.Rate, "rate", cfg.Rate, "shipping-api calls per second of each service")
	fs.StringVar(&logLevel, "log-level", logLevel, "level of the coordinator's and agents' logs on stderr: debug, info, warn, error")
	fs.StringVar(&cfg.Fuseboxctl, "fuseboxctl", defaultFuseboxctl(), "how the banner's command lines run fuseboxctl (default: the fuseboxctl beside this binary, as make run builds them, else fuseboxctl from PATH)")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	// Config takes zero values as "the default": on the command line a
	// zero is a mistake, not a request for the default.
	var errs []error
	if cfg.Rate <= 0 {
		errs = append(errs, fmt.Errorf("--rate must be > 0, got %d", cfg.Rate))
	}
	if cfg.PhaseDuration <= 0 {
		errs = append(errs, fmt.Errorf("--phase-duration must be > 0, got %v", cfg.PhaseDuration))
	}
	if cfg.HTTPAddr == "" || cfg.GRPCAddr == "" {
		errs = append(errs, errors.New("--http-addr and --grpc-addr must not be empty"))
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
		errs = append(errs, fmt.Errorf("--log-level: %w", err))
	}
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return cfg, errors.Join(errs...)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))
	return cfg, nil
}
