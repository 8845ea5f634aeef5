package main

import (
	"github.com/spf13/cobra"
)

func newForceClosedCommand(g *globalOptions) *cobra.Command {
	o := &overrideOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "force-closed NAME [--ttl 10m] [--reason TEXT]",
		Short: "Force a dependency's breaker closed on every agent (the breaker never rejects)",
		Long: `force-closed disables NAME's breaker on every agent (calls are never rejected
by it; the retry budget still applies) until the override expires (--ttl)
or is cleared. It replaces any override NAME had. Needs an admin token.`,
		Args:              exactArgs("NAME, the dependency"),
		ValidArgsFunction: completeDependencies(g),
		RunE:              func(cmd *cobra.Command, args []string) error { return o.set(cmd.Context(), args[0], false) },
	}
	o.addFlags(cmd)
	return cmd
}
