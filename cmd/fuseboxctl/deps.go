package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

func newDepsCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "deps",
		Short: "List every dependency with its breaker state, rates and budget use",
		Args:  noArgs(),
		RunE:  func(cmd *cobra.Command, _ []string) error { return g.deps(cmd.Context()) },
	}
}

func (g *globalOptions) deps(ctx context.Context) error {
	snap, err := callOnce(ctx, g, fuseboxv1.AdminClient.GetFleet, &fuseboxv1.GetFleetRequest{})
	if err != nil {
		return err
	}
	docs := convertAll(snap.GetDependencies(), dependencyOf)
	if g.output != formatTable {
		return printData(g.stdout, g.output, map[string]any{"dependencies": docs})
	}
	if len(docs) == 0 {
		fmt.Fprintln(g.stdout, "No dependencies yet: no policy, override or traffic.")
		return nil
	}
	t := newTable(g.stdout, "DEPENDENCY", "STATE", "OVERRIDE", "MODE", "GEN", "REQUESTS", "FAILURE", "SLOW", "BUDGET", "NODES", "PROBERS")
	for i, d := range snap.GetDependencies() {
		doc := docs[i]
		t.row(doc.Dependency, doc.State, doc.Override, doc.Mode, doc.Generation, doc.Fleet.Requests(),
			pct(doc.FailureRate), pct(doc.SlowRate), pct(doc.BudgetUsed), len(d.GetNodes()), len(doc.Probers))
	}
	return t.Flush()
}
