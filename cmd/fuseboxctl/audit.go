package main

import (
	"cmp"
	"context"
	"encoding/json"
	"strconv"
	"strings"
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
		Args:  noArgs(),
		RunE:  func(cmd *cobra.Command, _ []string) error { return o.run(cmd.Context()) },
	}
	cmd.Flags().StringVar(&o.dependency, "dependency", "", "only entries about this dependency (or _default)")
	cmd.Flags().Uint32Var(&o.limit, "limit", 50, "at most this many entries (the coordinator caps it at 1000)")
	_ = cmd.RegisterFlagCompletionFunc("dependency", completeDependencies(g))
	return cmd
}

func (o *auditOptions) run(ctx context.Context) error {
	resp, err := callOnce(ctx, o.globalOptions, fuseboxv1.AdminClient.ListAudit, &fuseboxv1.ListAuditRequest{Dependency: o.dependency, Limit: o.limit})
	if err != nil {
		return err
	}
	docs := convertAll(resp.GetEntries(), auditOf)
	if o.output != formatTable {
		return printData(o.stdout, o.output, map[string]any{"entries": docs})
	}
	t := newTable(o.stdout, "REVISION", "TIME", "ACTOR", "ACTION", "DEPENDENCY", "CHANGE")
	for _, d := range docs {
		at := ""
		if d.At != nil {
			at = d.At.Format(time.RFC3339)
		}
		t.row(d.Revision, at, d.Actor, d.Action, d.Dependency, changeSummary(d))
	}
	return t.Flush()
}

// changeSummary says what an audit entry changed: a policy write's field
// changes (as the dashboard shows them), an override's state, expiry and
// reason.
func changeSummary(d auditDoc) string {
	var before, after struct {
		State   string    `json:"state"`
		Reason  string    `json:"reason"`
		Expires time.Time `json:"expires"`
	}
	_ = json.Unmarshal(d.Before, &before)
	_ = json.Unmarshal(d.After, &after)
	switch d.Action {
	case "override.set":
		s := dash(after.State)
		if !after.Expires.IsZero() {
			s += " until " + after.Expires.UTC().Format(time.RFC3339)
		} else {
			s += " until cleared"
		}
		if after.Reason != "" {
			s += " " + strconv.Quote(after.Reason)
		}
		if before.State != "" {
			s = "replaced " + before.State + ": " + s
		}
		return s
	case "override.clear":
		s := "cleared " + cmp.Or(before.State, "the override")
		if before.Reason != "" {
			s += " " + strconv.Quote(before.Reason)
		}
		return s
	case "policy.put":
		switch {
		case len(d.Changes) == 0:
			return "written, no field changed"
		case string(d.Before) == "null":
			return "created: " + changesText(d.Changes)
		}
		return changesText(d.Changes)
	case "policy.delete":
		return "deleted: " + changesText(d.Changes)
	}
	return changesText(d.Changes)
}

// changesText is field changes in one line: "breaker.minimumRequests: 20 →
// 50; retry.maxAttempts: - → 5".
func changesText(cs []changeDoc) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = c.Field + ": " + showJSON(c.From) + " → " + showJSON(c.To)
	}
	return strings.Join(parts, "; ")
}
