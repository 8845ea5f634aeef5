package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

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

func newDepShowCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:               "show NAME",
		Short:             "Show a dependency's breaker, fleet counts, zones and every node",
		Args:              exactArgs("NAME, the dependency"),
		ValidArgsFunction: completeDependencies(g),
		RunE:              func(cmd *cobra.Command, args []string) error { return g.depShow(cmd.Context(), args[0]) },
	}
}

func (g *globalOptions) depShow(ctx context.Context, name string) error {
	snap, err := callOnce(ctx, g, fuseboxv1.AdminClient.GetFleet, &fuseboxv1.GetFleetRequest{Dependency: name})
	if err != nil {
		return err
	}
	if len(snap.GetDependencies()) == 0 {
		return failure(exitError, nil, "dependency %q: not known to the coordinator", name)
	}
	doc := dependencyDetailOf(snap.GetDependencies()[0])
	if g.output != formatTable {
		return printData(g.stdout, g.output, doc)
	}
	w := g.stdout
	state := doc.State
	if doc.Generation > 0 {
		state += fmt.Sprintf(" (generation %d", doc.Generation)
		if doc.OpenCount > 0 {
			state += fmt.Sprintf(", opened %d time(s) in a row", doc.OpenCount)
		}
		if doc.Since != nil {
			state += ", since " + doc.Since.Format(time.RFC3339)
		}
		state += ")"
	}
	fmt.Fprintf(w, "Dependency:   %s\n", safeText(doc.Dependency))
	fmt.Fprintf(w, "State:        %s\n", state)
	if doc.Reason != "" {
		fmt.Fprintf(w, "Reason:       %s\n", safeText(doc.Reason))
	}
	fmt.Fprintf(w, "Override:     %s\n", overrideText(doc, snap.GetAt().AsTime()))
	fmt.Fprintf(w, "Mode:         %s\n", dash(doc.Mode))
	if doc.TripRule != nil {
		fmt.Fprintf(w, "Trip rule:    %s\n", doc.TripRule)
	}
	f := doc.Fleet
	fmt.Fprintf(w, "Fleet:        %d requests (%d first attempts, %d retries), %s failures, %s slow, %d rejected\n",
		f.Requests(), f.FirstAttempts, f.Retries, pct(doc.FailureRate), pct(doc.SlowRate), f.Rejected)
	fmt.Fprintf(w, "Retry budget: %s used\n", pct(doc.BudgetUsed))
	fmt.Fprintf(w, "Throttle:     %s\n", throttleText(doc))
	fmt.Fprintf(w, "In flight:    %s\n", inFlightText(doc))
	fmt.Fprintf(w, "Probers:      %s\n", safeText(dash(strings.Join(doc.Probers, ", "))))
	fmt.Fprintf(w, "Node-local:   %s\n", safeText(dash(strings.Join(doc.NodeLocalOpen, ", "))))

	if len(doc.Zones) > 0 {
		fmt.Fprintln(w)
		t := newTable(w, "ZONE", "REQUESTS", "FAILURES", "SLOW", "RETRIES", "REJECTED")
		for _, z := range doc.Zones {
			c := z.Counts
			t.row(z.Zone, c.Requests(), c.Failures, c.SlowCalls, c.Retries, c.Rejected)
		}
		if err := t.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	if len(doc.Nodes) == 0 {
		fmt.Fprintln(w, "No node reports traffic.")
		return nil
	}
	t := newTable(w, "NODE", "ZONE", "REQUESTS", "FIRST", "RETRIES", "FAILURES", "SLOW", "REJECTED", "IN-FLIGHT", "LOCAL-OPEN", "PROBER")
	for _, n := range doc.Nodes {
		c := n.Counts
		t.row(n.Node, n.Zone, c.Requests(), c.FirstAttempts, c.Retries, c.Failures, c.SlowCalls, c.Rejected, n.InFlight,
			yesNo(n.NodeLocalOpen), yesNo(n.Prober))
	}
	return t.Flush()
}

// overrideText describes the override in force: its state, until when
// (with the time left at now, the snapshot's time), who set it and why, e.g.
// `forced-open until 2026-12-01T10:12:00Z (9m12s left), set by alice
// (ops-admin): "db failover"`.
func overrideText(doc dependencyDoc, now time.Time) string {
	if doc.Override == "" {
		return "none"
	}
	s := doc.Override + " until cleared"
	if e := doc.OverrideExpires; e != nil {
		s = fmt.Sprintf("%s until %s (%s left)", doc.Override, e.Format(time.RFC3339), max(e.Sub(now), 0).Round(time.Second))
	}
	if doc.OverrideActor != "" {
		s += ", set by " + safeText(doc.OverrideActor)
	}
	if doc.OverrideReason != "" {
		s += ": " + strconv.Quote(doc.OverrideReason)
	}
	return s
}

// throttleText describes adaptive throttling: off, or the probability with
// which first attempts are refused while the breaker is closed.
func throttleText(doc dependencyDoc) string {
	if !doc.ThrottleEnabled {
		return "off"
	}
	return fmt.Sprintf("refusing %s of first attempts (fleet window)", pct(doc.ThrottleProbability))
}

// inFlightText shows the fleet's calls in flight against the policy's limit.
func inFlightText(doc dependencyDoc) string {
	if doc.MaxInFlight == 0 {
		return fmt.Sprintf("%d (no limit)", doc.InFlight)
	}
	return fmt.Sprintf("%d of %d (%s of the fleet limit)", doc.InFlight, doc.MaxInFlight, pct(float64(doc.InFlight)/float64(doc.MaxInFlight)))
}
