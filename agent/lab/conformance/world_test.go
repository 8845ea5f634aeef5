package conformance

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/lab/fleet"
	"github.com/fusebox-dev/fusebox/coordinator"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// settle bounds every wait for a state the fleet reaches by itself (a
// policy applied, a breaker opened, a snapshot pushed): generous, for a
// loaded 2-core machine.
const settle = 20 * time.Second

// world is what the callers take part in: an embedded etcd, a coordinator
// on it (for fuseboxctl), and agents that found each other through it,
// each with its egress proxy on; the lab's fleet builds it.
type world struct {
	f      *fleet.Fleet
	coord  *coordinator.Coordinator
	agents []*agent.Agent // in process
}

// newWorld starts the etcd, the coordinator and n agents in process.
func newWorld(t *testing.T, n int) *world { return startWorld(t, n, "") }

// startWorld starts the etcd, the coordinator and n agents (processes of
// the binary bin when it is set; Add brings more); everything is closed at
// t's cleanup, and the agents' logs printed if the test failed.
func startWorld(t *testing.T, n int, bin string) *world {
	t.Helper()
	var mu sync.Mutex
	logs := map[int]*sstest.Buffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 2*settle)
	defer cancel()
	f, err := fleet.New(ctx, fleet.Config{N: n, Dir: t.TempDir(), Etcd: true, Coordinator: true, Binary: bin,
		Tune: func(_ int, c *agent.Config) {
			fleet.Quick(c)
			c.Proxy.Addr = "127.0.0.1:0"
		},
		Logger: func(i int) *slog.Logger {
			mu.Lock()
			defer mu.Unlock()
			logs[i] = &sstest.Buffer{}
			return slog.New(slog.NewTextHandler(logs[i], &slog.HandlerOptions{Level: slog.LevelInfo}))
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer f.Close()
		if !t.Failed() {
			return
		}
		for i := range f.Size() {
			mu.Lock()
			l := logs[i]
			mu.Unlock()
			if l != nil {
				t.Logf("log of %s:\n%s", fleet.Name(i), l.String())
			} else if p := f.Process(i); p != nil {
				b, _ := os.ReadFile(p.LogPath())
				t.Logf("log of %s:\n%s", fleet.Name(i), b)
			}
		}
	})
	return &world{f: f, coord: f.Coordinator(), agents: f.Agents()}
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
