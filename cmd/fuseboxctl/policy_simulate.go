package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

type policySimulateOptions struct {
	*globalOptions
	file       string
	dependency string
	since      time.Duration
}

func newPolicySimulateCommand(g *globalOptions) *cobra.Command {
	o := &policySimulateOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "simulate -f FILE [--dependency NAME] [--since 1h]",
		Short: "Replay the last hour (or --since) under a proposed policy, beside the current one",
		Long: `simulate asks the coordinator to replay what its fleet observer saw of a
dependency over the last --since (default 1h, at most what it keeps: see
--history-coarse) through the engine, under the current policy and under the
one in FILE ("-" for stdin; the document "policy set" would write, or a
proposed _default with --dependency). It prints, per incident and in total,
when each would have opened and closed, the calls it would have refused (and
of them those that would have failed), the failed calls it would have let
through, the seconds from "failure rate over the threshold" to open and the
retries the budget would have allowed, beside what the fleet did.

It writes nothing (a viewer token will do). An invalid policy exits 2, a
dependency the coordinator keeps no history of exits 1. Replaying hours of
a busy fleet takes seconds: give --timeout room (default 10s). The replay's limits
(per-node detail, node-local breakers, what half-open probes would have
answered) are in its notes and in coordinator/README.md ("What-if: replaying a policy").`,
		Args: noArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd.Context()) },
	}
	cmd.Flags().StringVarP(&o.file, "file", "f", "", `proposed policy JSON file, "-" for stdin (required)`)
	cmd.Flags().StringVar(&o.dependency, "dependency", "", `the dependency to replay (default: the file's "dependency" field)`)
	cmd.Flags().DurationVar(&o.since, "since", time.Hour, "how far back to replay")
	_ = cmd.MarkFlagRequired("file")
	_ = cmd.MarkFlagFilename("file", "json")
	_ = cmd.RegisterFlagCompletionFunc("dependency", completeDependencies(g))
	return cmd
}

func (o *policySimulateOptions) run(ctx context.Context) error {
	data, err := readInput(o.file, o.stdin)
	if err != nil {
		return err
	}
	if o.since <= 0 {
		return usageError{fmt.Errorf("--since must be positive, got %v", o.since)}
	}
	resp, err := callOnce(ctx, o.globalOptions, fuseboxv1.AdminClient.SimulatePolicy,
		&fuseboxv1.SimulatePolicyRequest{Dependency: o.dependency, PolicyJson: data, Since: durationpb.New(o.since)})
	if err != nil {
		return err
	}
	doc := simulationOf(resp)
	if o.output != formatTable {
		return printData(o.stdout, o.output, doc)
	}
	return doc.print(o.stdout, true)
}

// ---- the documents of -o json|yaml (camelCase, part of the CLI's contract) ----

type simTotalsDoc struct {
	Demand           uint64 `json:"demand"`
	Refused          uint64 `json:"refused"`
	RefusedWouldFail uint64 `json:"refusedWouldFail"`
	FailedLetThrough uint64 `json:"failedLetThrough"`
	RetriesAllowed   uint64 `json:"retriesAllowed"`
	RetriesRefused   uint64 `json:"retriesRefused"`
	Probes           uint64 `json:"probes"`
	ShadowRefused    uint64 `json:"shadowRefused"`
	Opens            uint32 `json:"opens"`
}

func simTotalsOf(t *fuseboxv1.SimulatedTotals) simTotalsDoc {
	return simTotalsDoc{Demand: t.GetDemand(), Refused: t.GetRefused(), RefusedWouldFail: t.GetRefusedWouldFail(),
		FailedLetThrough: t.GetFailedLetThrough(), RetriesAllowed: t.GetRetriesAllowed(), RetriesRefused: t.GetRetriesRefused(),
		Probes: t.GetProbes(), ShadowRefused: t.GetShadowRefused(), Opens: t.GetOpens()}
}

type simSideDoc struct {
	Opened        *time.Time   `json:"opened,omitempty"`
	Closed        *time.Time   `json:"closed,omitempty"`
	Opens         uint32       `json:"opens"`
	OverThreshold *time.Time   `json:"overThreshold,omitempty"`
	SecondsToOpen *float64     `json:"secondsToOpen,omitempty"`
	Totals        simTotalsDoc `json:"totals"`
}

func simSideOf(s *fuseboxv1.SimulatedSide) simSideDoc {
	d := simSideDoc{Opened: tsPtr(s.GetOpened()), Closed: tsPtr(s.GetClosed()), Opens: s.GetOpens(),
		OverThreshold: tsPtr(s.GetOverThreshold()), Totals: simTotalsOf(s.GetTotals())}
	if s.SecondsToOpen != nil {
		v := s.GetSecondsToOpen()
		d.SecondsToOpen = &v
	}
	return d
}

type simIncidentDoc struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	simTriple[simSideDoc]
}

type simIntervalDoc struct {
	State      string    `json:"state"`
	From       time.Time `json:"from"`
	To         time.Time `json:"to"`
	Generation uint64    `json:"generation"`
	Reason     string    `json:"reason,omitempty"`
}

func simIntervalsOf(ivs []*fuseboxv1.SimulatedInterval) []simIntervalDoc {
	return convertAll(ivs, func(iv *fuseboxv1.SimulatedInterval) simIntervalDoc {
		return simIntervalDoc{State: iv.GetState(), From: iv.GetFrom().AsTime().UTC(), To: iv.GetTo().AsTime().UTC(),
			Generation: iv.GetGeneration(), Reason: iv.GetReason()}
	})
}

// simTriple is one thing of each side: what the fleet did, and what the
// current and the proposed policy would have done.
type simTriple[T any] struct {
	Fleet    T `json:"fleet"`
	Current  T `json:"current"`
	Proposed T `json:"proposed"`
}

func (t simTriple[T]) sides() [3]T { return [3]T{t.Fleet, t.Current, t.Proposed} }

// simSides names the sides in the order of sides.
var simSides = [3]string{"fleet", "current", "proposed"}

type simulationDoc struct {
	Dependency      string                      `json:"dependency"`
	From            time.Time                   `json:"from"`
	To              time.Time                   `json:"to"`
	Resolution      string                      `json:"resolution"`
	FineFrom        *time.Time                  `json:"fineFrom,omitempty"`
	CurrentRevision int64                       `json:"currentRevision"`
	Changes         []changeDoc                 `json:"changes"`
	Incidents       []simIncidentDoc            `json:"incidents"`
	Totals          simTriple[simTotalsDoc]     `json:"totals"`
	States          simTriple[[]simIntervalDoc] `json:"states"`
	Policies        simTriple[json.RawMessage]  `json:"policies"`
	Notes           []string                    `json:"notes"`
}

func simulationOf(r *fuseboxv1.SimulatePolicyResponse) simulationDoc {
	d := simulationDoc{Dependency: r.GetDependency(), From: r.GetFrom().AsTime().UTC(), To: r.GetTo().AsTime().UTC(),
		Resolution: r.GetResolution().AsDuration().String(), FineFrom: tsPtr(r.GetFineFrom()), CurrentRevision: r.GetCurrentRevision(),
		Changes:   policyChanges(r.GetCurrent().GetPolicyJson(), r.GetProposed().GetPolicyJson()),
		Incidents: []simIncidentDoc{}, Notes: nonNil(r.GetNotes())}
	d.Totals = simTriple[simTotalsDoc]{Fleet: simTotalsOf(r.GetFleetTotals()), Current: simTotalsOf(r.GetCurrent().GetTotals()),
		Proposed: simTotalsOf(r.GetProposed().GetTotals())}
	d.States = simTriple[[]simIntervalDoc]{Fleet: simIntervalsOf(r.GetFleetStates()), Current: simIntervalsOf(r.GetCurrent().GetStates()),
		Proposed: simIntervalsOf(r.GetProposed().GetStates())}
	d.Policies = simTriple[json.RawMessage]{Fleet: rawJSON(r.GetCurrent().GetPolicyJson()), Current: rawJSON(r.GetCurrent().GetPolicyJson()),
		Proposed: rawJSON(r.GetProposed().GetPolicyJson())}
	for _, inc := range r.GetIncidents() {
		d.Incidents = append(d.Incidents, simIncidentDoc{From: inc.GetFrom().AsTime().UTC(), To: inc.GetTo().AsTime().UTC(),
			simTriple: simTriple[simSideDoc]{Fleet: simSideOf(inc.GetFleet()), Current: simSideOf(inc.GetCurrent()), Proposed: simSideOf(inc.GetProposed())}})
	}
	return d
}

// policyChanges lists the fields that differ between two policy documents.
func policyChanges(from, to []byte) []changeDoc {
	return changesOf(sharedstate.DiffDocuments(from, to))
}

// ---- the table ----

func clock(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format("15:04:05.0")
}

func secs(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.1fs", *v)
}

// print writes the simulation as text; full adds the header and the notes
// (policy set's preview has its own).
func (d simulationDoc) print(w io.Writer, full bool) error {
	if full {
		fine := ""
		if d.FineFrom != nil && d.FineFrom.After(d.From) {
			fine = fmt.Sprintf(", 1s slots before %s", d.FineFrom.UTC().Format("15:04:05"))
		}
		fmt.Fprintf(w, "Replay of %s from %s to %s UTC (%v, %s slots%s)\n", safeText(d.Dependency), d.From.Format("2006-01-02 15:04:05"),
			d.To.Format("15:04:05"), d.To.Sub(d.From).Round(time.Second), d.Resolution, fine)
		rev := "the fleet default"
		if d.CurrentRevision > 0 {
			rev = fmt.Sprintf("revision %d", d.CurrentRevision)
		}
		fmt.Fprintf(w, "Current policy: %s\n", rev)
		printChanges(w, d.Changes)
	}
	fmt.Fprintln(w)
	t := newTable(w, "INCIDENT", "SIDE", "OPENED", "CLOSED", "OPENS", "TO OPEN", "REFUSED", "WOULD FAIL", "FAILED THROUGH", "RETRIES")
	// The fleet's refused calls were never made: nobody knows whether they
	// would have failed.
	wouldFail := func(side int, t simTotalsDoc) any {
		if side == 0 {
			return ""
		}
		return t.RefusedWouldFail
	}
	for i, inc := range d.Incidents {
		label := []string{fmt.Sprintf("%d", i+1), inc.From.Format("15:04:05.0"), "to " + inc.To.Format("15:04:05.0")}
		for k, s := range inc.sides() {
			t.row(label[k], simSides[k], clock(s.Opened), clock(s.Closed), s.Opens, secs(s.SecondsToOpen),
				s.Totals.Refused, wouldFail(k, s.Totals), s.Totals.FailedLetThrough, s.Totals.RetriesAllowed)
		}
	}
	if len(d.Incidents) == 0 {
		t.row("none", "", "", "", "", "", "", "", "", "")
	}
	for k, s := range d.Totals.sides() {
		label := " "
		if k == 0 {
			label = "TOTAL"
		}
		t.row(label, simSides[k], " ", " ", s.Opens, " ", s.Refused, wouldFail(k, s), s.FailedLetThrough, s.RetriesAllowed)
	}
	if err := t.Flush(); err != nil {
		return err
	}
	if p := d.Totals.Proposed; p.ShadowRefused > 0 {
		fmt.Fprintf(w, "The proposed policy is in shadow mode: it would have refused %d calls and let them through.\n", p.ShadowRefused)
	}
	if full && len(d.Notes) > 0 {
		fmt.Fprintln(w, "\nNotes:")
		for _, n := range d.Notes {
			fmt.Fprintf(w, "  - %s\n", safeText(n))
		}
	}
	return nil
}

func printChanges(w io.Writer, cs []changeDoc) {
	if len(cs) == 0 {
		fmt.Fprintln(w, "Changes: none (the proposed policy is the current one)")
		return
	}
	fmt.Fprintln(w, "Changes:")
	t := newTable(w)
	for _, c := range cs {
		t.row("  "+c.Field, showJSON(c.From), "→", showJSON(c.To))
	}
	_ = t.Flush()
}
