package main

import (
	"context"
	"strconv"

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
		Args: noArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd.Context()) },
	}
}

func (o *membersOptions) run(ctx context.Context) error {
	resp, err := callOnce(ctx, o.globalOptions, func(ctx context.Context, a fuseboxv1.AdminClient) (*fuseboxv1.ListMembersResponse, error) {
		return a.ListMembers(ctx, &fuseboxv1.ListMembersRequest{})
	})
	if err != nil {
		return err
	}
	docs := []memberDoc{}
	for _, m := range resp.GetMembers() {
		docs = append(docs, memberOf(m))
	}
	if o.output != formatTable {
		return printData(o.stdout, o.output, map[string]any{"members": docs})
	}
	t := newTable(o.stdout, "NODE", "ROLE", "ZONE", "VERSION", "WIRE", "SIGNS", "STATUS", "GOSSIP", "API")
	for _, m := range docs {
		wire, signs := "?", "no"
		if m.Wire > 0 {
			wire = strconv.Itoa(int(m.Wire))
		}
		if m.Signs {
			signs = "yes"
		}
		t.row(m.Node, m.Role, m.Zone, m.Version, wire, signs, m.Status, m.GossipAddr, m.APIAddr)
	}
	return t.flush()
}
