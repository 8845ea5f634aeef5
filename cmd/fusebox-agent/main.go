package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/sharedstate/logging"
)

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stderr))
}

// run is main without the process exit, for tests: 0 ok, 1 runtime error,
// 2 bad configuration.
func run(args []string, getenv func(string) string, stderr io.Writer) int {
	cfg, err := agent.LoadConfig(args, getenv, stderr)
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "fusebox-agent:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := agent.Run(ctx, cfg, agent.WithLogger(logging.New(cfg.LogFormat, cfg.LogLevel, stderr))); err != nil {
		fmt.Fprintln(stderr, "fusebox-agent:", err)
		return 1
	}
	return 0
}
