package main

import (
	"context"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

func newMembersCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "members",
		Short: "List the fleet's gossip members and etcd registrations",
		Long: `members lists what the coordinator's observer sees in the gossip (status
alive, suspect, dead or left; dead and departed members stay listed for five
minutes) and the nodes registered in etcd that it does not see in the gossip
(status registered).`,
		Args: noArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error { return g.members(cmd.Context()) },
	}
}

func (g *globalOptions) members(ctx context.Context) error {
	resp, err := callOnce(ctx, g, fuseboxv1.AdminClient.ListMembers, &fuseboxv1.ListMembersRequest{})
	if err != nil {
		return err
	}
	docs := convertAll(resp.GetMembers(), memberOf)
	if g.output != formatTable {
		return printData(g.stdout, g.output, map[string]any{"members": docs})
	}
	t := newTable(g.stdout, "NODE", "ROLE", "ZONE", "VERSION", "WIRE", "SIGNS", "STATUS", "GOSSIP", "API")
	for _, m := range docs {
		wire := "?"
		if m.Wire > 0 {
			wire = strconv.Itoa(int(m.Wire))
		}
		t.row(m.Node, m.Role, m.Zone, m.Version, wire, yesNo(m.Signs), m.Status, m.GossipAddr, m.APIAddr)
	}
	return t.Flush()
}
