package conformance

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/agenttest"
	"github.com/fusebox-dev/fusebox/coordinator"
	"github.com/fusebox-dev/fusebox/protocol/gossip"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded/embeddedtest"
)

// settle bounds every wait for a state the fleet reaches by itself (a
// policy applied, a breaker opened, a snapshot pushed): generous, for a
// loaded 2-core machine.
const settle = 20 * time.Second

// world is what the callers take part in: an embedded etcd, a coordinator
// on it (for fuseboxctl), and agents that found each other through it,
// each with its egress proxy on.
type world struct {
	etcd   []string
	coord  *coordinator.Coordinator
	agents []*agent.Agent
}

// newWorld starts the etcd, the coordinator and n agents; everything is
// closed at t's cleanup.
func newWorld(t *testing.T, n int) *world {
	t.Helper()
	srv := embeddedtest.Start(t)
	w := &world{etcd: srv.Endpoints(), coord: startCoordinator(t, srv.Endpoints())}
	for i := range n {
		w.agents = append(w.agents, startAgent(t, fmt.Sprintf("agent-%d", i), w.etcd))
	}
	sstest.Eventually(t, settle, fmt.Sprintf("%d agents ready and seeing each other", n), func() bool {
		for _, a := range w.agents {
			if !a.Ready() || a.Gossip().NumAgents() != n {
				return false
			}
		}
		return true
	})
	return w
}

func startCoordinator(t *testing.T, etcd []string) *coordinator.Coordinator {
	t.Helper()
	cfg := coordinator.DefaultConfig()
	cfg.Name = "coordinator-" + filepath.Base(t.TempDir())
	cfg.DataDir = ""
	cfg.Etcd = etcd
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.GossipAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.ShutdownTimeout = 2 * time.Second
	c, err := coordinator.New(cfg,
		coordinator.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		coordinator.WithGossip(func(g *gossip.Config) {
			g.GossipInterval, g.ProbeInterval, g.PushPullInterval = 50*time.Millisecond, 200*time.Millisecond, 500*time.Millisecond
		}),
		coordinator.WithTickInterval(50*time.Millisecond, 100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// startAgent starts agent name with its egress proxy on loopback port 0;
// it is closed at cleanup (Close is idempotent), and its log printed if
// the test failed.
func startAgent(t *testing.T, name string, etcd []string) *agent.Agent {
	t.Helper()
	cfg := agenttest.Config(t, name, etcd)
	cfg.Proxy.Addr = "127.0.0.1:0"
	log := &sstest.Buffer{}
	a, err := agent.New(cfg, agent.WithLogger(slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelInfo}))))
	if err != nil {
		t.Fatalf("agent.New(%s): %v", name, err)
	}
	t.Cleanup(func() {
		_ = a.Close()
		if t.Failed() {
			t.Logf("log of %s:\n%s", name, log.String())
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		t.Fatalf("Start(%s): %v", name, err)
	}
	return a
}

// ctl runs the fuseboxctl binary against the coordinator with stdin and
// returns its standard output; a non-zero exit fails t.
func (w *world) ctl(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, ctlBinary, append([]string{"--coordinator", w.coord.GRPCAddr(), "--actor", "conformance"}, args...)...)
	cmd.Env = []string{"HOME=" + t.TempDir(), "USER=conformance"}
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("fuseboxctl %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

// setPolicy writes dep's policy with `fuseboxctl policy set` and waits
// until every agent applies it (applied tells).
func (w *world) setPolicy(t *testing.T, dep, policy string, applied func(sharedstate.Policy) bool) {
	t.Helper()
	w.ctl(t, policy, "policy", "set", dep, "-f", "-", "--yes")
	w.waitAgents(t, "applies the policy of "+dep, func(a *agent.Agent) bool { return applied(a.Engine().Policy(dep)) })
}

// waitAgents waits until cond holds for every agent.
func (w *world) waitAgents(t *testing.T, what string, cond func(*agent.Agent) bool) {
	t.Helper()
	sstest.Eventually(t, settle, "every agent "+what, func() bool {
		for _, a := range w.agents {
			if !cond(a) {
				return false
			}
		}
		return true
	})
}

// snapshot is a's snapshot of dep (nil when a does not track it).
func snapshot(a *agent.Agent, dep string) *sharedstate.Snapshot { return a.Engine().Snapshot(dep) }

// ownCounts is a's own window of dep, as it gossips it.
func ownCounts(a *agent.Agent, dep string) sharedstate.Counts {
	if f, ok := a.Engine().Fleet(dep); ok {
		return f.Node
	}
	return sharedstate.Counts{}
}
