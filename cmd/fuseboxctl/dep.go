package main

import (
	"github.com/spf13/cobra"
)

func newDepCommand(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dep",
		Short: "Look at one dependency (dep show NAME)",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newDepShowCommand(g))
	return cmd
}
