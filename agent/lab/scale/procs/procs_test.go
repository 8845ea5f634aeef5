package procs

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fusebox-dev/fusebox/agent/lab/fleet"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConfigValidate(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "agent")
	if err := os.WriteFile(notExec, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		cfg  Config
		want []string
	}{
		{Config{N: 1, Clients: -1, Warm: -time.Second}, []string{"N must be at least 2, got 1", "Agent (the fusebox-agent binary) is required",
			"Clients must be >= 0, got -1", "Warm must be >= 0"}},
		{Config{N: 4, Agent: filepath.Join(dir, "missing")}, []string{"Agent: stat " + filepath.Join(dir, "missing")}},
		{Config{N: 4, Agent: notExec, Dependency: "no spaces allowed"}, []string{"is not an executable file", "Dependency:"}},
		{Config{N: 4, Agent: notExec, AgentArgs: []string{"--no-such-flag"}}, []string{"AgentArgs: unknown flag: --no-such-flag"}},
		{Config{N: 4, Agent: dir}, []string{"is not an executable file"}},
	}
	for _, c := range cases {
		err := c.cfg.Validate()
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("Validate(%+v) = %v, want it to say %q", c.cfg, err, w)
			}
		}
	}
}

// logWriter sends Run's progress lines to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// TestRealAgents runs the scenario with 4 real fusebox-agent processes:
// every agent holds the breaker open and rejects, at most 3 proposed it;
// with no time for the trip, Run says it did not reach every agent. No
// agent process is left running either way. It asserts counts, never
// times.
func TestRealAgents(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skipf("no go command to build fusebox-agent with: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bins, err := fleet.Build(ctx, t.TempDir(), raceEnabled, "fusebox-agent")
	if err != nil {
		t.Fatal(err)
	}
	bin := bins[0]
	const n = 4

	t.Run("trip", func(t *testing.T) {
		r, err := Run(ctx, Config{N: n, Agent: bin, Dir: t.TempDir(), Log: logWriter{t}})
		noAgentLeft(t, bin)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%+v", r)
		if r.Open != n || r.Rejecting != n || len(r.Spread) != n {
			t.Errorf("%d agents opened, %d rejected, %d times; want %d each", r.Open, r.Rejecting, len(r.Spread), n)
		}
		if r.Proposers < 1 || r.Proposers > 3 {
			t.Errorf("%d agents proposed the trip, want 1 to 3", r.Proposers)
		}
		if !(r.P50 <= r.P99 && r.P99 <= r.Max) {
			t.Errorf("percentiles out of order: %v, %v, %v", r.P50, r.P99, r.Max)
		}
	})

	t.Run("no time to trip", func(t *testing.T) {
		r, err := Run(ctx, Config{N: n, Agent: bin, Dir: t.TempDir(), Log: logWriter{t}, TripTimeout: time.Nanosecond})
		noAgentLeft(t, bin)
		if err == nil || !strings.Contains(err.Error(), "did not reach every agent") {
			t.Fatalf("Run = %v, want an error saying the trip did not reach every agent", err)
		}
		if r.Open == n {
			t.Errorf("all %d agents opened within a nanosecond", n)
		}
		if r.Check() == nil {
			t.Error("Result.Check accepts a trip that did not reach every agent")
		}
	})
}

// noAgentLeft fails the test when a process of the binary bin still runs.
func noAgentLeft(t *testing.T, bin string) {
	t.Helper()
	exes, err := filepath.Glob("/proc/[0-9]*/exe")
	if err != nil {
		t.Fatal(err)
	}
	for _, exe := range exes {
		if target, err := os.Readlink(exe); err == nil && target == bin {
			t.Errorf("agent process %s still runs after Run returned", filepath.Dir(exe))
		}
	}
}
