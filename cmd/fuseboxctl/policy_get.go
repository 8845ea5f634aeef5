package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

type policyGetOptions struct {
	*globalOptions
}

func newPolicyGetCommand(g *globalOptions) *cobra.Command {
	o := &policyGetOptions{globalOptions: g}
	return &cobra.Command{
		Use:   "get [NAME]",
		Short: "Print a policy (or list them all without NAME)",
		Long: `get NAME prints the stored policy document of NAME (a dependency or _default):
with -o table, the JSON document itself, ready for "policy set -f"; with -o json
or yaml, {dependency, modRevision, policy}. Without NAME it lists every policy.`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: completePolicies(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return o.list(cmd.Context())
			}
			return o.get(cmd.Context(), args[0])
		},
	}
}

func (o *policyGetOptions) get(ctx context.Context, name string) error {
	e, err := callOnce(ctx, o.globalOptions, func(ctx context.Context, a fuseboxv1.AdminClient) (*fuseboxv1.PolicyEntry, error) {
		return a.GetPolicy(ctx, &fuseboxv1.GetPolicyRequest{Dependency: name})
	})
	if err != nil {
		return err
	}
	if o.output != formatTable {
		return printData(o.stdout, o.output, policyOf(e))
	}
	_, err = o.stdout.Write(indentJSON(e.GetPolicyJson()))
	return err
}

func (o *policyGetOptions) list(ctx context.Context) error {
	resp, err := callOnce(ctx, o.globalOptions, func(ctx context.Context, a fuseboxv1.AdminClient) (*fuseboxv1.ListPoliciesResponse, error) {
		return a.ListPolicies(ctx, &fuseboxv1.ListPoliciesRequest{})
	})
	if err != nil {
		return err
	}
	docs := []policyDoc{}
	for _, e := range resp.GetPolicies() {
		docs = append(docs, policyOf(e))
	}
	if o.output != formatTable {
		return printData(o.stdout, o.output, map[string]any{"policies": docs})
	}
	if len(docs) == 0 {
		fmt.Fprintln(o.stdout, "No policies stored: every dependency runs on the built-in default.")
		return nil
	}
	t := newTable(o.stdout, "NAME", "REVISION", "POLICY")
	for _, d := range docs {
		var compact bytes.Buffer
		if json.Compact(&compact, d.Policy) != nil {
			compact.Write(d.Policy)
		}
		t.row(d.Dependency, fmt.Sprint(d.ModRevision), truncate(compact.String(), 100))
	}
	return t.flush()
}

// indentJSON pretty-prints a JSON document (as it is, when it is not JSON),
// ending with a newline.
func indentJSON(b []byte) []byte {
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		out.Reset()
		out.Write(b)
	}
	if out.Len() == 0 || out.Bytes()[out.Len()-1] != '\n' {
		out.WriteByte('\n')
	}
	return out.Bytes()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

// completePolicies completes stored policy names.
func completePolicies(g *globalOptions) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return completeFrom(g, func(ctx context.Context, a fuseboxv1.AdminClient) ([]string, error) {
		resp, err := a.ListPolicies(ctx, &fuseboxv1.ListPoliciesRequest{})
		var names []string
		for _, e := range resp.GetPolicies() {
			names = append(names, e.GetDependency())
		}
		return names, err
	})
}
