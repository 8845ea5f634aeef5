package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

type auditOptions struct {
	*globalOptions
	dependency string
	limit      uint32
}

func newAuditCommand(g *globalOptions) *cobra.Command {
	o := &auditOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "audit [--dependency NAME] [--limit N]",
		Short: "Show who changed which policy or override, newest first",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return o.run(cmd.Context()) },
	}
	cmd.Flags().StringVar(&o.dependency, "dependency", "", "only entries about this dependency (or _default)")
	cmd.Flags().Uint32Var(&o.limit, "limit", 50, "at most this many entries (the coordinator caps it at 1000)")
	_ = cmd.RegisterFlagCompletionFunc("dependency", completeDependencies(g))
	return cmd
}

func (o *auditOptions) run(ctx context.Context) error {
	resp, err := callOnce(ctx, o.globalOptions, func(ctx context.Context, a fuseboxv1.AdminClient) (*fuseboxv1.ListAuditResponse, error) {
		return a.ListAudit(ctx, &fuseboxv1.ListAuditRequest{Dependency: o.dependency, Limit: o.limit})
	})
	if err != nil {
		return err
	}
	docs := []auditDoc{}
	for _, e := range resp.GetEntries() {
		docs = append(docs, auditOf(e))
	}
	if o.output != formatTable {
		return printData(o.stdout, o.output, map[string]any{"entries": docs})
	}
	t := newTable(o.stdout, "REVISION", "TIME", "ACTOR", "ACTION", "DEPENDENCY", "CHANGE")
	for _, d := range docs {
		at := ""
		if d.At != nil {
			at = d.At.Format(time.RFC3339)
		}
		t.row(fmt.Sprint(d.Revision), at, d.Actor, d.Action, d.Dependency, changeSummary(d))
	}
	return t.flush()
}

// changeSummary says in a few words what an audit entry changed.
func changeSummary(d auditDoc) string {
	var after struct {
		State   string    `json:"state"`
		Reason  string    `json:"reason"`
		Expires time.Time `json:"expires"`
	}
	switch d.Action {
	case "override.set":
		if json.Unmarshal(d.After, &after) == nil {
			s := after.State
			if after.Reason != "" {
				s += fmt.Sprintf(" %q", after.Reason)
			}
			if !after.Expires.IsZero() {
				s += " until " + after.Expires.UTC().Format(time.RFC3339)
			}
			return s
		}
	case "override.clear":
		return "override removed"
	case "policy.put":
		if string(d.Before) == "null" {
			return "created"
		}
		return "updated"
	case "policy.delete":
		return "deleted"
	}
	return ""
}
