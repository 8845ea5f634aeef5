package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

type policyRmOptions struct {
	*globalOptions
	expectedRevision int64
}

func newPolicyRmCommand(g *globalOptions) *cobra.Command {
	o := &policyRmOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "rm NAME",
		Short: "Delete a policy (the dependency falls back to the fleet default)",
		Long: `rm deletes the policy of NAME; the dependency then runs on the fleet default.
Removing _default makes the built-in default the fleet default. Removing a
policy that does not exist changes nothing and exits 0. With
--expected-revision N it deletes only if the policy is at mod revision N
(exit 3 otherwise).`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completePolicies(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), args[0], cmd.Flags().Changed("expected-revision"))
		},
	}
	cmd.Flags().Int64Var(&o.expectedRevision, "expected-revision", 0, "delete only if the policy is at this mod revision")
	return cmd
}

func (o *policyRmOptions) run(ctx context.Context, name string, expect bool) error {
	req := &fuseboxv1.DeletePolicyRequest{Dependency: name, Actor: o.actor}
	if expect {
		rev := o.expectedRevision
		req.ExpectedRevision = &rev
	}
	resp, err := callOnce(ctx, o.globalOptions, func(ctx context.Context, a fuseboxv1.AdminClient) (*fuseboxv1.DeletePolicyResponse, error) {
		return a.DeletePolicy(ctx, req)
	})
	if err != nil {
		return err
	}
	if o.output != formatTable {
		return printData(o.stdout, o.output, map[string]any{"dependency": name, "deleted": resp.GetDeleted()})
	}
	if resp.GetDeleted() {
		fmt.Fprintf(o.stdout, "policy %s deleted\n", name)
	} else {
		fmt.Fprintf(o.stdout, "no policy %s: nothing deleted\n", name)
	}
	return nil
}
