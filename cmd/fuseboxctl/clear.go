package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

func newClearCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:               "clear NAME",
		Short:             "Remove a dependency's override (the breaker decides again)",
		Long:              "clear removes NAME's override. Clearing when there is none changes nothing and exits 0.",
		Args:              exactArgs("NAME, the dependency"),
		ValidArgsFunction: completeDependencies(g),
		RunE:              func(cmd *cobra.Command, args []string) error { return g.clear(cmd.Context(), args[0]) },
	}
}

func (g *globalOptions) clear(ctx context.Context, name string) error {
	resp, err := callOnce(ctx, g, fuseboxv1.AdminClient.ClearOverride, &fuseboxv1.ClearOverrideRequest{Dependency: name, Actor: g.actor})
	if err != nil {
		return err
	}
	if g.output != formatTable {
		return printData(g.stdout, g.output, map[string]any{"dependency": name, "cleared": resp.GetCleared()})
	}
	if resp.GetCleared() {
		fmt.Fprintf(g.stdout, "override on %s cleared\n", name)
	} else {
		fmt.Fprintf(g.stdout, "no override on %s: nothing cleared\n", name)
	}
	return nil
}
