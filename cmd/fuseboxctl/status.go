package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

func newStatusCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the fleet at a glance: members, breakers, overrides",
		Long: `status summarises the fleet: the members the coordinator's observer sees,
how many dependencies the agents treat as closed, open, half-open, forced
open, forced closed or in shadow mode (each counted once, as the dashboard
shows it: an override first, then shadow mode, then the breaker), the
overrides in force, and every dependency that is not simply closed. It also says how the coordinator
and the agents follow etcd: synced or not, and the last time etcd's history
went back under them (a snapshot restore, a wiped etcd, another cluster), which
they noticed and answered by listing policies and overrides again from scratch.`,
		Args: noArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error { return g.status(cmd.Context()) },
	}
}

type statusDoc struct {
	Coordinator string     `json:"coordinator"`
	At          *time.Time `json:"at,omitempty"`
	// Etcd is how the coordinator follows etcd; each member's etcd (from
	// its registration) how it does.
	Etcd         *etcdSyncDoc    `json:"etcd,omitempty"`
	Members      []memberDoc     `json:"members"`
	Dependencies []dependencyDoc `json:"dependencies"`
	// Counts is how many dependencies are in each effective state
	// (dependencyDoc.Effective): closed, open, half-open, forced-open,
	// forced-closed, shadow.
	Counts    map[string]int `json:"counts"`
	Overrides []overrideDoc  `json:"overrides"`
}

func (g *globalOptions) status(ctx context.Context) error {
	c, err := g.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	snap, err := invoke(ctx, c, fuseboxv1.AdminClient.GetFleet, &fuseboxv1.GetFleetRequest{})
	if err != nil {
		return err
	}
	ovs, err := invoke(ctx, c, fuseboxv1.AdminClient.ListOverrides, &fuseboxv1.ListOverridesRequest{})
	if err != nil {
		return err
	}
	regs, err := invoke(ctx, c, fuseboxv1.AdminClient.ListMembers, &fuseboxv1.ListMembersRequest{})
	if err != nil {
		return err
	}
	etcdOf := map[string]*fuseboxv1.EtcdSync{} // by node, from the registrations
	for _, m := range regs.GetMembers() {
		etcdOf[m.GetNode()] = m.GetEtcd()
	}
	doc := statusDoc{Coordinator: g.coordinator, At: tsPtr(snap.GetAt()), Etcd: etcdSyncOf(snap.GetEtcd()),
		Members: convertAll(snap.GetMembers(), func(m *fuseboxv1.Member) memberDoc {
			d := memberOf(m)
			d.Etcd = etcdSyncOf(etcdOf[m.GetNode()])
			return d
		}),
		Dependencies: convertAll(snap.GetDependencies(), dependencyOf),
		Overrides:    convertAll(ovs.GetOverrides(), overrideOf),
		Counts:       map[string]int{},
	}
	for _, s := range effectiveStates {
		doc.Counts[s] = 0
	}
	for _, d := range doc.Dependencies {
		doc.Counts[d.Effective]++
	}
	if g.output != formatTable {
		return printData(g.stdout, g.output, doc)
	}

	roles := map[string]int{}
	statuses := map[string]int{}
	var zones []string
	for _, m := range doc.Members {
		if m.Status == "alive" || m.Status == "suspect" {
			roles[m.Role]++
			if m.Role == "agent" && m.Zone != "" && !slices.Contains(zones, m.Zone) {
				zones = append(zones, m.Zone)
			}
		}
		statuses[m.Status]++
	}
	slices.Sort(zones)
	var attention []dependencyDoc
	for _, d := range doc.Dependencies {
		if d.State != "closed" || d.Override != "" || len(d.NodeLocalOpen) > 0 {
			attention = append(attention, d)
		}
	}
	forced := map[string]int{}
	for _, ov := range doc.Overrides {
		forced[ov.State]++
	}
	w := g.stdout
	fmt.Fprintf(w, "Coordinator:   %s\n", g.coordinator)
	zoneText := ""
	if len(zones) > 0 {
		zoneText = " in zones " + safeText(strings.Join(zones, ", "))
	}
	fmt.Fprintf(w, "Members:       %d agent(s) alive%s, %d observer(s); %d suspect, %d dead, %d left\n",
		roles["agent"], zoneText, roles["observer"], statuses["suspect"], statuses["dead"], statuses["left"])
	counts := make([]string, 0, len(effectiveStates))
	for _, s := range effectiveStates {
		counts = append(counts, fmt.Sprintf("%d %s", doc.Counts[s], s))
	}
	fmt.Fprintf(w, "Dependencies:  %d: %s\n", len(doc.Dependencies), strings.Join(counts, ", "))
	fmt.Fprintf(w, "Overrides:     %d forced-open, %d forced-closed\n", forced["forced-open"], forced["forced-closed"])
	printEtcd(w, doc)
	if len(attention) == 0 {
		fmt.Fprintln(w, "\nEvery breaker is closed and none is overridden.")
		return nil
	}
	fmt.Fprintln(w)
	t := newTable(w, "DEPENDENCY", "EFFECTIVE", "BREAKER", "OVERRIDE", "GEN", "REQUESTS", "FAILURE", "SLOW", "NODE-LOCAL-OPEN", "REASON")
	for _, d := range attention {
		t.row(d.Dependency, d.Effective, d.State, d.Override, d.Generation, d.Fleet.Requests(),
			pct(d.FailureRate), pct(d.SlowRate), strings.Join(d.NodeLocalOpen, ","), cmp.Or(d.OverrideReason, d.Reason))
	}
	return t.Flush()
}

// effectiveStates are the values of dependencyDoc.Effective, in the order
// status counts them.
var effectiveStates = []string{"closed", "open", "half-open", "forced-open", "forced-closed", "shadow"}

// printEtcd writes the status lines about etcd: how the coordinator follows
// it, its last rewind, and how the alive agents follow it (from their
// registrations).
func printEtcd(w io.Writer, doc statusDoc) {
	if e := doc.Etcd; e != nil {
		synced := "synced"
		if !e.Synced {
			synced = "NOT synced (listing or watching failed, or a rewind is being handled)"
		}
		fmt.Fprintf(w, "Etcd:          cluster %s at revision %d; the coordinator is %s\n", safeText(e.ClusterID), e.Revision, synced)
		if e.LastRewind != nil {
			fmt.Fprintf(w, "Etcd rewind:   %s (%d since the coordinator started): etcd's history went back (a restore, a wipe?); the coordinator listed everything again\n",
				safeText(e.LastRewind.String()), e.Rewinds)
		}
	}
	var synced, unsynced, unknown, rewound int
	var notSynced []string
	var last *etcdRewindDoc
	for _, m := range doc.Members {
		if m.Role != "agent" || (m.Status != "alive" && m.Status != "suspect") {
			continue
		}
		switch {
		case m.Etcd == nil:
			unknown++
		case m.Etcd.Synced:
			synced++
		default:
			unsynced++
			notSynced = append(notSynced, m.Node)
		}
		if m.Etcd == nil || m.Etcd.LastRewind == nil {
			continue
		}
		rewound++
		if r := m.Etcd.LastRewind; last == nil || (r.At != nil && last.At != nil && r.At.After(*last.At)) {
			last = r
		}
	}
	line := fmt.Sprintf("Agents' etcd:  %d synced, %d not synced, %d unknown (no registration)", synced, unsynced, unknown)
	if len(notSynced) > 0 {
		line += " — not synced: " + safeText(strings.Join(firstN(notSynced, 5), ", "))
	}
	if rewound > 0 {
		line += fmt.Sprintf("; %d saw a rewind, the last %s", rewound, safeText(last.String()))
	}
	fmt.Fprintln(w, line)
}

// firstN returns the first n of s, and "…" when there were more.
func firstN(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return append(slices.Clone(s[:n]), "…")
}
