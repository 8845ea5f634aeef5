package membership

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/lab/fleet"
	"github.com/fusebox-dev/fusebox/agent/lab/fleet/fleettest"
	"github.com/fusebox-dev/fusebox/agent/lab/soak"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// requireNetns skips (or, with CI=true, fails) when the test cannot build
// namespaces.
func requireNetns(t *testing.T) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "not root"
	} else if _, err := exec.LookPath("ip"); err != nil {
		why = "`ip` (iproute2) not found"
	} else if _, err := exec.LookPath("nft"); err != nil {
		why = "`nft` (nftables) not found"
	}
	if why == "" {
		return
	}
	msg := "network namespace test needs root, iproute2's `ip` and `nft`: " + why
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (CI=true: failing instead of skipping)")
	}
	t.Skip(msg)
}

// agentsOf places the fleet's agents in the soak lab's agent namespaces.
type agentsOf struct{ soak.Lab }

func (l agentsOf) NS(i int) string   { return l.Lab.NS(soak.Node{Role: soak.RoleAgent, Index: i}) }
func (l agentsOf) Addr(i int) string { return l.Lab.Addr(soak.Node{Role: soak.RoleAgent, Index: i}) }

// Six fusebox-agent processes, each in its own network namespace on one
// bridge (the soak's lab), split 3 | 3 for longer than memberlist's
// dead-node timeouts, then healed: they agree again on one membership and
// on every breaker record, including a record each side changed on its
// own.
func TestPartitionHealsAcrossNamespaces(t *testing.T) {
	requireNetns(t)
	if testing.Short() {
		t.Skip("builds fusebox-agent and six namespaces")
	}
	const n = 6
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bins, err := fleet.Build(ctx, t.TempDir(), false, "fusebox-agent")
	if err != nil {
		t.Fatal(err)
	}
	lab := soak.Lab{Prefix: fmt.Sprintf("fbm%d", os.Getpid()%100000), Agents: n, EtcdMembers: 1}
	t.Cleanup(func() {
		if err := lab.Destroy(); err != nil {
			t.Errorf("deleting the namespaces: %v", err)
		}
	})
	if err := lab.Create(); err != nil {
		t.Fatal(err)
	}
	f := fleettest.Start(t, fleet.Config{N: n, Binary: bins[0], Namespaces: agentsOf{lab},
		Tune: func(_ int, c *agent.Config) {
			fleet.Quick(c)
			c.InsecureGossip = true // on the lab's bridge, not loopback
			c.PushPullInterval, c.RejoinInterval = 2*time.Second, 500*time.Millisecond
		}})

	value := func(i int, name string, labels ...string) int {
		m, err := f.Metrics(ctx, i)
		if err != nil {
			return -1
		}
		v, _ := m.Value(name, labels...)
		return int(v)
	}
	members := func(i int) int { return value(i, "fusebox_agent_members", "role", "agent", "state", "alive") }
	generation := func(i int, dep string) int { return value(i, "fusebox_agent_breaker_generation", "dependency", dep) }
	side := func(idx ...int) []soak.Node {
		var out []soak.Node
		for _, i := range idx {
			out = append(out, soak.Node{Role: soak.RoleAgent, Index: i})
		}
		return out
	}
	all := []int{0, 1, 2, 3, 4, 5}
	sideA, sideB := []int{0, 1, 2}, []int{3, 4, 5}
	everyone := func(idx []int, what string, want int, get func(int) int) {
		t.Helper()
		sstest.Eventually(t, 30*time.Second, what, func() bool {
			for _, i := range idx {
				if get(i) != want {
					return false
				}
			}
			return true
		})
	}
	everyone(all, "six agents see six members", n, members)

	if err := lab.Partition(side(sideA...), side(sideB...)); err != nil {
		t.Fatal(err)
	}
	everyone(all, "each side sees only its own three", 3, members)
	// Hold the partition past the dead-node timeouts (a condition, not a
	// sleep: memberlist has reaped the other side when each sees 3), then
	// let each side move a breaker on its own.
	for _, i := range sideA[:2] {
		fleettest.Report(t, f.Client(i), "payments", 0, 20)
	}
	for _, i := range sideB[:2] {
		fleettest.Report(t, f.Client(i), "shipping", 0, 20)
	}
	everyone(sideA, "side A opened payments", 1, func(i int) int { return generation(i, "payments") })
	everyone(sideB, "side B opened shipping", 1, func(i int) int { return generation(i, "shipping") })
	everyone(sideB, "side B knows nothing of payments", 0, func(i int) int { return generation(i, "payments") })

	if err := lab.Heal(side(all...)); err != nil {
		t.Fatal(err)
	}
	healed := time.Now()
	everyone(all, "one membership after the heal", n, members)
	everyone(all, "payments agreed everywhere", 1, func(i int) int { return generation(i, "payments") })
	everyone(all, "shipping agreed everywhere", 1, func(i int) int { return generation(i, "shipping") })
	t.Logf("converged %v after the heal (membership and both records)", time.Since(healed).Round(10*time.Millisecond))
}
