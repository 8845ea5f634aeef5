package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

type clearOptions struct {
	*globalOptions
}

func newClearCommand(g *globalOptions) *cobra.Command {
	o := &clearOptions{globalOptions: g}
	return &cobra.Command{
		Use:               "clear NAME",
		Short:             "Remove a dependency's override (the breaker decides again)",
		Long:              "clear removes NAME's override. Clearing when there is none changes nothing and exits 0.",
		Args:              exactArgs("NAME, the dependency"),
		ValidArgsFunction: completeDependencies(g),
		RunE:              func(cmd *cobra.Command, args []string) error { return o.run(cmd.Context(), args[0]) },
	}
}

func (o *clearOptions) run(ctx context.Context, name string) error {
	resp, err := callOnce(ctx, o.globalOptions, func(ctx context.Context, a fuseboxv1.AdminClient) (*fuseboxv1.ClearOverrideResponse, error) {
		return a.ClearOverride(ctx, &fuseboxv1.ClearOverrideRequest{Dependency: name, Actor: o.actor})
	})
	if err != nil {
		return err
	}
	if o.output != formatTable {
		return printData(o.stdout, o.output, map[string]any{"dependency": name, "cleared": resp.GetCleared()})
	}
	if resp.GetCleared() {
		fmt.Fprintf(o.stdout, "override on %s cleared\n", name)
	} else {
		fmt.Fprintf(o.stdout, "no override on %s: nothing cleared\n", name)
	}
	return nil
}
