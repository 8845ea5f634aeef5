package demo_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/cmd/fusebox-demo/internal/demo"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// lines collects a process's output lines as they come.
type lines struct {
	mu  sync.Mutex
	all []string
}

func (l *lines) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = append(l.all, s)
}

func (l *lines) find(re *regexp.Regexp) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.all {
		if m := re.FindStringSubmatch(s); m != nil {
			return m
		}
	}
	return nil
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.all, "\n")
}

// counterValue returns the sum of a counter's series in reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				v += m.GetCounter().GetValue()
			}
		}
	}
	return v
}

// TestExternalAgent runs the fusebox-demo binary with --agent against a
// real agent started here (its unix socket, the agent's own default
// policy): the binary runs only the services, they open sessions with
// that agent, their failing phase opens the agent's breaker, the binary
// logs that transition as its clients saw it, serves /readyz, and exits 0
// with a summary when --duration has passed.
func TestExternalAgent(t *testing.T) {
	if buildErr != nil {
		t.Fatalf("fusebox-demo was not built: %v", buildErr)
	}
	const phase = 2 * time.Second
	policy := demo.DemoPolicy(phase)
	policy.Breaker.MinFailingNodes = 1 // one agent: its own traffic trips the fleet breaker

	sockDir, err := os.MkdirTemp("", "fbext") // unix socket paths are short
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	ac := agent.DefaultConfig()
	ac.Name = "node-ext"
	ac.DataDir = t.TempDir()
	ac.GossipAddr = "127.0.0.1:0"
	ac.HTTPAddr = "127.0.0.1:0"
	ac.Socket = filepath.Join(sockDir, "agent.sock")
	ac.ShutdownTimeout = 3 * time.Second
	reg := prometheus.NewRegistry()
	a, err := agent.New(ac, agent.WithDefaultPolicy(policy), agent.WithRegisterer(reg),
		agent.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Errorf("agent.Close: %v", err)
		}
	})

	p := startDemoProcess(ctx, t, "", "--agent", "unix://"+ac.Socket, "--headless",
		"--phase-duration", phase.String(), "--duration", (6 * phase).String(), "--http-addr", "127.0.0.1:0", "--log-level", "error")
	out := p.out

	// The headless line names the agent (by its node name, from its
	// Welcome) and the readiness URL.
	banner := regexp.MustCompile(`^fusebox-demo: agent (\S+) \((\S+)\)  health (http://\S+/readyz)$`)
	sstest.Eventually(t, time.Minute, "the headless line", func() bool { return out.find(banner) != nil })
	m := out.find(banner)
	if m[1] != ac.Name || m[2] != "unix://"+ac.Socket {
		t.Errorf("headless line names agent %s at %s, want %s at unix://%s", m[1], m[2], ac.Name, ac.Socket)
	}
	sstest.Eventually(t, 10*time.Second, "/readyz to answer 200", func() bool {
		resp, err := http.Get(m[3])
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	// The three services have sessions with this agent, and their
	// failing phase opens its breaker.
	if n := counterValue(t, reg, "fusebox_agent_sessions_opened_total"); n < 3 {
		t.Errorf("the agent opened %v sessions, want the 3 services'", n)
	}
	sstest.Eventually(t, 6*phase, "the agent's shipping-api breaker to open", func() bool {
		s := a.Engine().Snapshot(demo.ShippingAPI)
		return s != nil && s.OpenCount > 0
	})
	if s := a.Engine().Snapshot(demo.CatalogAPI); s == nil || s.State != sharedstate.Closed || s.OpenCount != 0 {
		t.Errorf("catalog-api at the agent: %+v, want closed and never opened", s)
	}

	if err := p.wait(time.Minute); err != nil {
		t.Fatalf("fusebox-demo --duration %v: %v", 6*phase, err)
	}
	opened := regexp.MustCompile(fmt.Sprintf(`transition  %s @%s: \S+ -> open `, demo.ShippingAPI, ac.Name))
	if out.find(opened) == nil {
		t.Errorf("no %q line in the output", opened)
	}
	if out.find(regexp.MustCompile(`transition  `+demo.CatalogAPI)) != nil {
		t.Errorf("catalog-api moved; it should stay closed")
	}
	if out.find(regexp.MustCompile(`^Summary: `)) == nil {
		t.Errorf("no summary")
	}
}

// TestExternalAgentConfig checks what Config refuses with an external
// agent.
func TestExternalAgentConfig(t *testing.T) {
	cfg := demo.DefaultConfig()
	cfg.Agent = "unix:///run/fusebox/agent.sock"
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate with Agent %q: %v", cfg.Agent, err)
	}
	p := demo.DemoPolicy(time.Second)
	cfg.Policy = &p
	cfg.AdminToken = "x"
	cfg.Agent = "10.0.0.1:7950"
	err := cfg.Validate()
	for _, want := range []string{"agent: \"10.0.0.1:7950\"", "policy: must be empty", "admin-token: must be empty"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v, want it to mention %q", err, want)
		}
	}
}
