package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

// overrideOptions are the options of force-open and force-closed.
type overrideOptions struct {
	*globalOptions
	ttl    time.Duration
	reason string
	// method sets the override: ForceOpen or ForceClosed.
	method rpc[*fuseboxv1.SetOverrideRequest, *fuseboxv1.OverrideEntry]
}

func newForceOpenCommand(g *globalOptions) *cobra.Command {
	return newOverrideCommand(g, fuseboxv1.AdminClient.ForceOpen, &cobra.Command{
		Use:   "force-open NAME [--ttl 10m] [--reason TEXT]",
		Short: "Force a dependency's breaker open on every agent (calls are rejected)",
		Long: `force-open makes every agent reject calls to NAME with reason forced-open,
whatever the breaker computes, until the override expires (--ttl) or is
cleared (fuseboxctl clear NAME). It replaces any override NAME had. Needs an
admin token.`,
	})
}

func newForceClosedCommand(g *globalOptions) *cobra.Command {
	return newOverrideCommand(g, fuseboxv1.AdminClient.ForceClosed, &cobra.Command{
		Use:   "force-closed NAME [--ttl 10m] [--reason TEXT]",
		Short: "Force a dependency's breaker closed on every agent (the breaker never rejects)",
		Long: `force-closed disables NAME's breaker on every agent (calls are never rejected
by it; the retry budget still applies) until the override expires (--ttl)
or is cleared. It replaces any override NAME had. Needs an admin token.`,
	})
}

// newOverrideCommand completes cmd as a command that sets an override
// through method (ForceOpen or ForceClosed).
func newOverrideCommand(g *globalOptions, method rpc[*fuseboxv1.SetOverrideRequest, *fuseboxv1.OverrideEntry], cmd *cobra.Command) *cobra.Command {
	o := &overrideOptions{globalOptions: g, method: method}
	cmd.Args = exactArgs("NAME, the dependency")
	cmd.ValidArgsFunction = completeDependencies(g)
	cmd.RunE = func(cmd *cobra.Command, args []string) error { return o.set(cmd.Context(), args[0]) }
	cmd.Flags().DurationVar(&o.ttl, "ttl", 0, "remove the override by itself after this long, e.g. 10m (default: until cleared)")
	cmd.Flags().StringVar(&o.reason, "reason", "", "why, for the audit and the dashboard")
	return cmd
}

func (o *overrideOptions) set(ctx context.Context, name string) error {
	if o.ttl < 0 {
		return usageError{fmt.Errorf("--ttl %v must not be negative", o.ttl)}
	}
	req := &fuseboxv1.SetOverrideRequest{Dependency: name, Reason: o.reason, Actor: o.actor}
	if o.ttl > 0 {
		req.Ttl = durationpb.New(o.ttl)
	}
	e, err := callOnce(ctx, o.globalOptions, o.method, req)
	if err != nil {
		return err
	}
	doc := overrideOf(e)
	if o.output != formatTable {
		return printData(o.stdout, o.output, doc)
	}
	until := "until cleared"
	if doc.Expires != nil {
		until = "until " + doc.Expires.Format(time.RFC3339)
	}
	fmt.Fprintf(o.stdout, "%s %s %s (by %s)\n", name, safeText(doc.State), until, safeText(doc.Actor))
	return nil
}

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
	return g.printRemoval(name, "cleared", resp.GetCleared(), "override on "+name+" cleared", "no override on "+name+": nothing cleared")
}
