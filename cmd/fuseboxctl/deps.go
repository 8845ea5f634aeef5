package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

type depsOptions struct {
	*globalOptions
}

func newDepsCommand(g *globalOptions) *cobra.Command {
	o := &depsOptions{globalOptions: g}
	return &cobra.Command{
		Use:   "deps",
		Short: "List every dependency with its breaker state, rates and budget use",
		Args:  noArgs(),
		RunE:  func(cmd *cobra.Command, _ []string) error { return o.run(cmd.Context()) },
	}
}

func (o *depsOptions) run(ctx context.Context) error {
	snap, err := callOnce(ctx, o.globalOptions, func(ctx context.Context, a fuseboxv1.AdminClient) (*fuseboxv1.FleetSnapshot, error) {
		return a.GetFleet(ctx, &fuseboxv1.GetFleetRequest{})
	})
	if err != nil {
		return err
	}
	docs := []dependencyDoc{}
	for _, d := range snap.GetDependencies() {
		docs = append(docs, dependencyOf(d, false))
	}
	if o.output != formatTable {
		return printData(o.stdout, o.output, map[string]any{"dependencies": docs})
	}
	if len(docs) == 0 {
		fmt.Fprintln(o.stdout, "No dependencies yet: no policy, override or traffic.")
		return nil
	}
	t := newTable(o.stdout, "DEPENDENCY", "STATE", "OVERRIDE", "MODE", "GEN", "REQUESTS", "FAILURE", "SLOW", "BUDGET", "NODES", "PROBERS")
	for _, d := range snap.GetDependencies() {
		doc := dependencyOf(d, false)
		t.row(doc.Dependency, doc.State, doc.Override, doc.Mode, fmt.Sprint(doc.Generation),
			fmt.Sprint(requests(d.GetFleet())), pct(doc.FailureRate), pct(doc.SlowRate), pct(doc.BudgetUsed),
			fmt.Sprint(len(d.GetNodes())), fmt.Sprint(len(doc.Probers)))
	}
	return t.flush()
}
