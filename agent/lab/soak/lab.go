package soak

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// Lab is the soak's network: a namespace per agent, etcd member and the
// coordinator, one for the soak's callers and checks ("ctl"), each with a
// veth (eth0) to a bridge in a switch namespace, addresses in
// 10.78.0.0/24. Every name starts with Prefix, so runs never share a
// namespace; nothing outside them is touched. Faults are nftables tables
// inside the namespaces (inet soakpart, inet soakloss); deleting the
// namespaces deletes them too.
type Lab struct {
	Prefix      string
	Agents      int // at most 100
	EtcdMembers int // at most 40
}

// The lab's subnet; each namespace has its own bridge, so it cannot clash
// with the host's or another run's.
const labNet = "10.78.0"

// NS is the namespace of n.
func (l Lab) NS(n Node) string {
	switch n.Role {
	case RoleAgent:
		return fmt.Sprintf("%s-a%d", l.Prefix, n.Index)
	case RoleEtcd:
		return fmt.Sprintf("%s-e%d", l.Prefix, n.Index)
	}
	return l.Prefix + "-co"
}

// CtlNS is the namespace of the soak's callers and checks.
func (l Lab) CtlNS() string { return l.Prefix + "-ctl" }

func (l Lab) switchNS() string { return l.Prefix + "-sw" }

// Addr is n's address.
func (l Lab) Addr(n Node) string {
	switch n.Role {
	case RoleAgent:
		return fmt.Sprintf("%s.%d", labNet, 10+n.Index)
	case RoleEtcd:
		return fmt.Sprintf("%s.%d", labNet, 200+n.Index)
	}
	return labNet + ".250"
}

// CtlAddr is the ctl namespace's address.
func (l Lab) CtlAddr() string { return labNet + ".254" }

// Nodes lists every node of the lab: agents, etcd members, coordinator.
func (l Lab) Nodes() []Node {
	var out []Node
	for i := range l.Agents {
		out = append(out, Node{RoleAgent, i})
	}
	for i := range l.EtcdMembers {
		out = append(out, Node{RoleEtcd, i})
	}
	return append(out, Node{Role: RoleCoordinator})
}

// Validate names what the lab cannot build.
func (l Lab) Validate() error {
	var errs []error
	if l.Prefix == "" || len(l.Prefix) > 20 || strings.ContainsAny(l.Prefix, "/ \t") {
		errs = append(errs, fmt.Errorf("soak: lab: prefix %q must be 1 to 20 characters without '/' or spaces", l.Prefix))
	}
	if l.Agents < 1 || l.Agents > 100 {
		errs = append(errs, fmt.Errorf("soak: lab: 1 to 100 agents, got %d", l.Agents))
	}
	if l.EtcdMembers < 1 || l.EtcdMembers > 40 {
		errs = append(errs, fmt.Errorf("soak: lab: 1 to 40 etcd members, got %d", l.EtcdMembers))
	}
	return errors.Join(errs...)
}

// Create builds the namespaces, the bridge and the links. On failure it
// deletes what it made.
func (l Lab) Create() (err error) {
	if err := l.Validate(); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			l.Destroy()
		}
	}()
	sw := l.switchNS()
	if err := ip("netns", "add", sw); err != nil {
		return err
	}
	for _, args := range [][]string{
		{"-n", sw, "link", "add", "br0", "type", "bridge"},
		{"-n", sw, "link", "set", "br0", "up"},
		{"-n", sw, "link", "set", "lo", "up"},
	} {
		if err := ip(args...); err != nil {
			return err
		}
	}
	type host struct{ ns, addr, veth string }
	var hosts []host
	for _, n := range l.Nodes() {
		veth := strings.TrimPrefix(l.NS(n), l.Prefix+"-")
		hosts = append(hosts, host{l.NS(n), l.Addr(n), veth})
	}
	hosts = append(hosts, host{l.CtlNS(), l.CtlAddr(), "ctl"})
	for _, h := range hosts {
		for _, args := range [][]string{
			{"netns", "add", h.ns},
			{"-n", sw, "link", "add", h.veth, "type", "veth", "peer", "name", "eth0", "netns", h.ns},
			{"-n", sw, "link", "set", h.veth, "master", "br0"},
			{"-n", sw, "link", "set", h.veth, "up"},
			{"-n", h.ns, "addr", "add", h.addr + "/24", "dev", "eth0"},
			{"-n", h.ns, "link", "set", "eth0", "up"},
			{"-n", h.ns, "link", "set", "lo", "up"},
		} {
			if err := ip(args...); err != nil {
				return err
			}
		}
	}
	return nil
}

// Destroy deletes every namespace whose name starts with the prefix (the
// lab's, even half-built). It is idempotent.
func (l Lab) Destroy() error {
	names, err := l.Leftovers()
	if err != nil {
		return err
	}
	var errs []error
	for _, ns := range names {
		if err := ip("netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Leftovers lists the namespaces whose name starts with the prefix.
func (l Lab) Leftovers() ([]string, error) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return nil, fmt.Errorf("soak: ip netns list: %w", err)
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && strings.HasPrefix(f[0], l.Prefix+"-") {
			names = append(names, f[0])
		}
	}
	return names, nil
}

// Partition cuts every node of a from every node of b, both ways: each
// drops what comes from or goes to the other group (table inet soakpart).
// The ctl namespace is in neither group: the soak sees both sides.
func (l Lab) Partition(a, b []Node) error {
	var errs []error
	for _, side := range [][2][]Node{{a, b}, {b, a}} {
		peers := l.addrSet(side[1])
		for _, n := range side[0] {
			rules := fmt.Sprintf(`table inet soakpart {
	chain in { type filter hook input priority 0; policy accept; ip saddr %s drop; }
	chain out { type filter hook output priority 0; policy accept; ip daddr %s drop; }
}
`, peers, peers)
			if err := l.nft(n, rules); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// Heal removes the partition rules of nodes.
func (l Lab) Heal(nodes []Node) error { return l.dropTable(nodes, "soakpart") }

// Loss makes each of nodes drop percent % of the packets arriving on its
// eth0, at random (table inet soakloss).
func (l Lab) Loss(nodes []Node, percent int) error {
	if percent < 1 || percent > 99 {
		return fmt.Errorf("soak: loss of %d%%: must be 1 to 99", percent)
	}
	var errs []error
	rules := fmt.Sprintf(`table inet soakloss {
	chain in { type filter hook input priority 0; policy accept; iifname "eth0" numgen random mod 100 < %d drop; }
}
`, percent)
	for _, n := range nodes {
		if err := l.nft(n, rules); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// LossEnd removes the loss rules of nodes.
func (l Lab) LossEnd(nodes []Node) error { return l.dropTable(nodes, "soakloss") }

func (l Lab) dropTable(nodes []Node, table string) error {
	var errs []error
	for _, n := range nodes {
		if err := l.nft(n, "delete table inet "+table+"\n"); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (l Lab) addrSet(nodes []Node) string {
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = l.Addr(n)
	}
	return "{ " + strings.Join(addrs, ", ") + " }"
}

// nft runs an nft script in n's namespace.
func (l Lab) nft(n Node, script string) error {
	cmd := exec.Command("ip", "netns", "exec", l.NS(n), "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("soak: nft in %s: %w: %s (script: %s)", l.NS(n), err, strings.TrimSpace(out.String()), strings.TrimSpace(script))
	}
	return nil
}

// ip runs iproute2's ip.
func ip(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("soak: ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
