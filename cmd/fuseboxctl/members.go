package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

type membersOptions struct {
	*globalOptions
}

func newMembersCommand(g *globalOptions) *cobra.Command {
	o := &membersOptions{globalOptions: g}
	return &cobra.Command{
		Use:   "members",
		Short: "List the fleet's gossip members and etcd registrations",
		Long: `members lists what the coordinator's observer sees in the gossip (status
alive, suspect, dead or left; dead and departed members stay listed for five
minutes) and the nodes registered in etcd that it does not see in the gossip
(status registered).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd.Context()) },
	}
}

func (o *membersOptions) run(ctx context.Context) error {
	c, err := o.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	var resp *fuseboxv1.ListMembersResponse
	if err := c.call(ctx, func(ctx context.Context, a fuseboxv1.AdminClient) (err error) {
		resp, err = a.ListMembers(ctx, &fuseboxv1.ListMembersRequest{})
		return err
	}); err != nil {
		return err
	}
	docs := []memberDoc{}
	for _, m := range resp.GetMembers() {
		docs = append(docs, memberOf(m))
	}
	if o.output != formatTable {
		return printData(o.stdout, o.output, map[string]any{"members": docs})
	}
	t := newTable(o.stdout, "NODE", "ROLE", "ZONE", "VERSION", "STATUS", "GOSSIP", "API")
	for _, m := range docs {
		t.row(m.Node, m.Role, m.Zone, m.Version, m.Status, m.GossipAddr, m.APIAddr)
	}
	return t.flush()
}
