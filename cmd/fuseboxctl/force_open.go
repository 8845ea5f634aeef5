package main

import (
	"github.com/spf13/cobra"
)

func newForceOpenCommand(g *globalOptions) *cobra.Command {
	o := &overrideOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "force-open NAME [--ttl 10m] [--reason TEXT]",
		Short: "Force a dependency's breaker open on every agent (calls are rejected)",
		Long: `force-open makes every agent reject calls to NAME with reason forced-open,
whatever the breaker computes, until the override expires (--ttl) or is
cleared (fuseboxctl clear NAME). It replaces any override NAME had. Needs an
admin token.`,
		Args:              exactArgs("NAME, the dependency"),
		ValidArgsFunction: completeDependencies(g),
		RunE:              func(cmd *cobra.Command, args []string) error { return o.set(cmd.Context(), args[0], true) },
	}
	o.addFlags(cmd)
	return cmd
}
