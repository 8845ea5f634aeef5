package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

type policyRmOptions struct {
	*globalOptions
	expectedRevision int64
	yes              bool
	since            time.Duration
}

func newPolicyRmCommand(g *globalOptions) *cobra.Command {
	o := &policyRmOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "rm NAME [--yes]",
		Short: "Delete a policy (the dependency falls back to the fleet default), after showing what changes",
		Long: `rm deletes the policy of NAME; the dependency then runs on the fleet default.
Removing _default makes the built-in default the fleet default. Removing a
policy that does not exist changes nothing and exits 0.

Like "policy set", it first shows what the deletion changes (each field of
NAME's effective policy that takes the fleet default's value, or for
_default the built-in default's) and what NAME would have done over the
last --since under the fleet default (when the coordinator keeps its
history), asks on the terminal, and deletes with a compare-and-swap on the
revision it showed (exit 3 if someone changed the policy meanwhile). --yes
deletes without asking; without a terminal and without --yes nothing is
deleted (exit 6). With --expected-revision N it deletes only if the policy
is at mod revision N (exit 3 otherwise).`,
		Args:              exactArgs("NAME, the dependency or _default"),
		ValidArgsFunction: completePolicies(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), args[0], cmd.Flags().Changed("expected-revision"))
		},
	}
	cmd.Flags().Int64Var(&o.expectedRevision, "expected-revision", 0, "delete only if the policy is at this mod revision")
	cmd.Flags().BoolVarP(&o.yes, "yes", "y", false, "delete without the preview and the question (scripts)")
	cmd.Flags().DurationVar(&o.since, "since", time.Hour, "how far back the preview replays the dependency without its policy")
	return cmd
}

func (o *policyRmOptions) run(ctx context.Context, name string, expect bool) error {
	c, err := o.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	req := &fuseboxv1.DeletePolicyRequest{Dependency: name, Actor: o.actor}
	if expect {
		req.ExpectedRevision = proto.Int64(o.expectedRevision)
	}
	if !o.yes {
		ep, err := invoke(ctx, c, fuseboxv1.AdminClient.GetEffectivePolicy, &fuseboxv1.GetPolicyRequest{Dependency: name})
		if err != nil {
			return err // an invalid name is exit 2 before any question
		}
		stored, layer := ep.GetOwn(), fuseboxv1.PolicySource_POLICY_SOURCE_OWN
		if name == sharedstate.DefaultPolicyName {
			stored, layer = ep.GetFleetDefault(), fuseboxv1.PolicySource_POLICY_SOURCE_FLEET_DEFAULT
		}
		if stored == nil {
			return o.printDeleted(name, false)
		}
		if err := o.requireTerminal("policy "+name+" deletion", false); err != nil {
			return err
		}
		// What each field the policy sets becomes without it.
		changes := []changeDoc{}
		for _, f := range ep.GetFields() {
			if f.GetSource() == layer && f.GetValue() != f.GetInherited() {
				changes = append(changes, changeDoc{Field: f.GetField(), From: f.GetValue(), To: dash(f.GetInherited())})
			}
		}
		plan := writePlan{name: name, deletion: true, stored: stored, changes: changes, since: o.since,
			replay: fmt.Appendf(nil, `{"dependency":%q}`, name)} // the dependency on the fleet default alone
		if err := o.ask(ctx, c, plan); err != nil {
			return err
		}
		if !expect {
			req.ExpectedRevision = proto.Int64(stored.GetModRevision()) // what was shown is what is deleted
		}
	}
	resp, err := invoke(ctx, c, fuseboxv1.AdminClient.DeletePolicy, req)
	if err != nil {
		return err
	}
	return o.printDeleted(name, resp.GetDeleted())
}

func (o *policyRmOptions) printDeleted(name string, deleted bool) error {
	return o.printRemoval(name, "deleted", deleted, "policy "+name+" deleted", "no policy "+name+": nothing deleted")
}
