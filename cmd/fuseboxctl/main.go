package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

// run executes one command line and returns the exit code.
func run(ctx context.Context, args []string) int {
	cmd := newRootCommand(os.Stdin, os.Stdout, os.Stderr)
	cmd.SetArgs(args)
	return report(os.Stderr, cmd.ExecuteContext(ctx))
}
