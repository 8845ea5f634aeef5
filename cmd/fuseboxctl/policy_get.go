package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

type policyGetOptions struct {
	*globalOptions
	stored bool
}

func newPolicyGetCommand(g *globalOptions) *cobra.Command {
	o := &policyGetOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "get [NAME] [--stored]",
		Short: "Show the policy a dependency runs on and where each value comes from (or list them all)",
		Long: `get NAME shows the policy NAME (a dependency, or _default) runs on: every
field with its value and where the value comes from — NAME's own policy, the
fleet default (_default) or the built-in default — and the value it would
have without that source (what "policy rm" would leave). A dependency without
a policy of its own runs on the fleet default; that is no error. With -o json
or yaml: {dependency, modRevision, policy (its own stored document, null
when it has none), fleetDefault, effective, fields}.

--stored prints only NAME's own stored document, ready for "policy set -f"
(-o json or yaml: {dependency, modRevision, policy}); it exits 1 when NAME
has none. Without NAME, get lists every stored policy.`,
		Args:              optionalArgs("NAME, the dependency or _default"),
		ValidArgsFunction: completePolicies(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return o.list(cmd.Context())
			}
			if o.stored {
				return o.getStored(cmd.Context(), args[0])
			}
			return o.get(cmd.Context(), args[0])
		},
	}
	cmd.Flags().BoolVar(&o.stored, "stored", false, "print only the stored document of NAME (for policy set -f)")
	return cmd
}

// effectiveDoc is policy get's document: the stored policy as before
// (modRevision, policy), with the fleet default, the effective policy and
// where each of its fields comes from.
type effectiveDoc struct {
	Dependency string `json:"dependency"`
	// ModRevision and Policy are NAME's own stored document (0 and null: it
	// has none and runs on the fleet default).
	ModRevision int64           `json:"modRevision"`
	Policy      json.RawMessage `json:"policy"`
	// FleetDefault is the stored fleet default; null: none is stored, the
	// built-in default is the fleet default.
	FleetDefault *policyDoc      `json:"fleetDefault"`
	Effective    json.RawMessage `json:"effective"`
	Fields       []fieldDoc      `json:"fields"`
}

// fieldDoc is one field of the effective policy.
type fieldDoc struct {
	Field string          `json:"field"`
	Value json.RawMessage `json:"value"`
	// Source is "own", "fleet-default" or "built-in".
	Source string `json:"source"`
	// Inherited is the value without Source: the fleet default's for own,
	// the built-in default's for fleet-default.
	Inherited json.RawMessage `json:"inherited,omitempty"`
}

// Sources of a field's value, as -o json|yaml and the table name them.
var sourceNames = map[fuseboxv1.PolicySource][2]string{
	fuseboxv1.PolicySource_POLICY_SOURCE_OWN:           {"own", "own policy"},
	fuseboxv1.PolicySource_POLICY_SOURCE_FLEET_DEFAULT: {"fleet-default", "fleet default"},
	fuseboxv1.PolicySource_POLICY_SOURCE_BUILT_IN:      {"built-in", "built-in default"},
}

func effectiveOf(ep *fuseboxv1.EffectivePolicy) effectiveDoc {
	d := effectiveDoc{Dependency: ep.GetDependency(), Policy: rawJSON(nil), Effective: rawJSON(ep.GetPolicyJson()), Fields: []fieldDoc{}}
	own := ep.GetOwn()
	if ep.GetDependency() == sharedstate.DefaultPolicyName {
		own = ep.GetFleetDefault()
	}
	if own != nil {
		d.ModRevision, d.Policy = own.GetModRevision(), rawJSON(own.GetPolicyJson())
	}
	if fd := ep.GetFleetDefault(); fd != nil {
		doc := policyOf(fd)
		d.FleetDefault = &doc
	}
	for _, f := range ep.GetFields() {
		fd := fieldDoc{Field: f.GetField(), Value: rawJSON([]byte(f.GetValue())), Source: sourceNames[f.GetSource()][0]}
		if f.GetInherited() != "" {
			fd.Inherited = rawJSON([]byte(f.GetInherited()))
		}
		d.Fields = append(d.Fields, fd)
	}
	return d
}

func (o *policyGetOptions) get(ctx context.Context, name string) error {
	ep, err := callOnce(ctx, o.globalOptions, fuseboxv1.AdminClient.GetEffectivePolicy, &fuseboxv1.GetPolicyRequest{Dependency: name})
	if err != nil {
		return err
	}
	if o.output != formatTable {
		return printData(o.stdout, o.output, effectiveOf(ep))
	}
	w := o.stdout
	fmt.Fprintf(w, "Dependency:  %s\n", safeText(ep.GetDependency()))
	fmt.Fprintf(w, "Policy:      %s\n\n", policySources(ep))
	t := newTable(w, "FIELD", "VALUE", "FROM", "WITHOUT IT")
	for _, f := range ep.GetFields() {
		t.row(f.GetField(), showJSON(f.GetValue()), cmp.Or(sourceNames[f.GetSource()][1], "unknown"), showJSON(f.GetInherited()))
	}
	return t.Flush()
}

// policySources says which documents make up an effective policy.
func policySources(ep *fuseboxv1.EffectivePolicy) string {
	fleet := "the built-in default (no fleet default is stored)"
	if fd := ep.GetFleetDefault(); fd != nil {
		fleet = fmt.Sprintf("the fleet default (_default, revision %d)", fd.GetModRevision())
	}
	if ep.GetDependency() == sharedstate.DefaultPolicyName {
		if fd := ep.GetFleetDefault(); fd != nil {
			return fmt.Sprintf("the fleet default, stored at revision %d, over the built-in default", fd.GetModRevision())
		}
		return "none stored: the fleet default is the built-in default"
	}
	if own := ep.GetOwn(); own != nil {
		return fmt.Sprintf("its own, stored at revision %d, over %s", own.GetModRevision(), fleet)
	}
	return "none of its own: it runs on " + fleet
}

// getStored prints NAME's own stored document.
func (o *policyGetOptions) getStored(ctx context.Context, name string) error {
	e, err := callOnce(ctx, o.globalOptions, fuseboxv1.AdminClient.GetPolicy, &fuseboxv1.GetPolicyRequest{Dependency: name})
	if status.Code(err) == codes.NotFound {
		return failure(exitError, err, "policy %s: none stored: it runs on the fleet default (policy get %s shows it)", name, name)
	}
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
	resp, err := callOnce(ctx, o.globalOptions, fuseboxv1.AdminClient.ListPolicies, &fuseboxv1.ListPoliciesRequest{})
	if err != nil {
		return err
	}
	docs := convertAll(resp.GetPolicies(), policyOf)
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
		t.row(d.Dependency, d.ModRevision, truncate(compact.String(), 100))
	}
	return t.Flush()
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
