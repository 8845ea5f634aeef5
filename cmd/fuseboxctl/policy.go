package main

import (
	"github.com/spf13/cobra"
)

func newPolicyCommand(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Get, set, edit, lint, simulate or remove policies",
		Long: `Policies are JSON documents stored in etcd (policies/<dependency>, and
policies/_default for the fleet default). A dependency's policy sets only the
fields it changes; the rest comes from _default, field by field.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(
		newPolicyGetCommand(g),
		newPolicySetCommand(g),
		newPolicyEditCommand(g),
		newPolicyLintCommand(g),
		newPolicySimulateCommand(g),
		newPolicyRmCommand(g),
	)
	return cmd
}
