// Command fuseboxctl is the Fusebox admin CLI: it talks to a coordinator's
// Admin API to show the fleet, set policies and force breakers open.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd := newRootCommand()
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "fuseboxctl:", err)
		os.Exit(exitCode(err))
	}
}
