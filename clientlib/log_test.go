package clientlib

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// logLines is a slog.Handler that keeps every record as one line,
// "LEVEL message key=value…", for a test to read.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (h *logLines) Enabled(context.Context, slog.Level) bool { return true }

func (h *logLines) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message)
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.String())
		return true
	})
	h.mu.Lock()
	h.lines = append(h.lines, b.String())
	h.mu.Unlock()
	return nil
}

func (h *logLines) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logLines) WithGroup(string) slog.Handler      { return h }

// atInfo returns the lines at level info and above.
func (h *logLines) atInfo() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, l := range h.lines {
		if !strings.HasPrefix(l, "DEBUG ") {
			out = append(out, l)
		}
	}
	return out
}

// refuse sends a DependencyError for dep on every session.
func (f *fakeAgent) refuse(dep, msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for out := range f.sessions {
		out <- &fuseboxv1.SessionResponse{Msg: &fuseboxv1.SessionResponse_Error{
			Error: &fuseboxv1.DependencyError{Dependency: dep, Message: msg}}}
	}
}

// The client logs each change of mode once, through Config.Logger: a
// warning when it falls back to local decisions (whatever the calls and
// the reconnection attempts meanwhile), an info line when the agent is
// back, a warning when the agent refuses a dependency. Nothing per call.
func TestModeChangesLoggedOnce(t *testing.T) {
	out := &logLines{}
	f := newFakeAgent(t)
	c := agentClient(t, f, Config{Logger: slog.New(out)})
	dep := c.Dependency("inventory")
	calls := func() {
		for range 50 {
			if _, err := call(dep); err != nil {
				t.Fatal(err)
			}
		}
	}
	calls()
	if l := out.atInfo(); len(l) != 0 {
		t.Fatalf("logged while connected: %q", l)
	}

	f.stop()
	sstest.Eventually(t, 10*time.Second, "the client to notice the agent is gone", func() bool { return !c.AgentConnected() })
	failures := c.metrics.sessionFailures.Load()
	calls()
	sstest.Eventually(t, 10*time.Second, "three more failed reconnections", func() bool {
		return c.metrics.sessionFailures.Load() >= failures+3
	})
	l := out.atInfo()
	if len(l) != 1 || !strings.Contains(l[0], "WARN ") || !strings.Contains(l[0], "agent unreachable; deciding locally") ||
		!strings.Contains(l[0], "agent="+f.address()) {
		t.Fatalf("lines after the agent went away: %q, want one warning naming the agent", l)
	}

	f.start()
	sstest.Eventually(t, 10*time.Second, "the reconnection", c.AgentConnected)
	calls()
	sstest.Eventually(t, 10*time.Second, "the reconnection logged", func() bool { return len(out.atInfo()) == 2 })
	if l := out.atInfo(); !strings.Contains(l[1], "INFO ") || !strings.Contains(l[1], "agent reachable again") ||
		!strings.Contains(l[1], "node=fake-node") {
		t.Errorf("reconnection line %q", l[1])
	}

	f.refuse("inventory", "fusebox: too many dependencies")
	f.refuse("inventory", "fusebox: too many dependencies")
	sstest.Eventually(t, 10*time.Second, "the refusal logged", func() bool { return len(out.atInfo()) >= 3 })
	calls()
	if l := out.atInfo(); len(l) != 3 || !strings.Contains(l[2], "WARN ") || !strings.Contains(l[2], "dependency=inventory") ||
		!strings.Contains(l[2], "too many dependencies") {
		t.Errorf("lines after two refusals of one name: %q, want one more warning naming it", l)
	}
}
