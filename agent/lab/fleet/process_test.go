package fleet

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/agent"
)

// script writes an executable shell script that ignores its arguments.
func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fake-agent")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	return p
}

// An agent process is up when it logged "agent started", with the
// addresses of that line; a wait for a message it never logs ends when it
// exits, naming the exit and the log's last lines.
func TestAgentProcessLogLines(t *testing.T) {
	goOn := filepath.Join(t.TempDir(), "go-on")
	t.Setenv("FLEET_TEST_GO_ON", goOn)
	bin := script(t, `echo '{"msg":"agent started","gossip":"127.0.0.1:7","http":"127.0.0.1:8","proxy":"127.0.0.1:9"}' >&2
echo 'not json' >&2
while [ ! -e "$FLEET_TEST_GO_ON" ]; do sleep 0.05; done
echo '{"msg":"going away"}' >&2
exit 3`)
	cfg := agent.DefaultConfig()
	cfg.Name = "agent-x"
	p, err := StartAgentProcess(timeout(t, time.Minute), bin, cfg, filepath.Join(t.TempDir(), "x.log"))
	if err != nil {
		t.Fatal(err)
	}
	if p.GossipAddr() != "127.0.0.1:7" || p.HTTPAddr() != "127.0.0.1:8" || p.ProxyAddr() != "127.0.0.1:9" {
		t.Errorf("addresses %q %q %q", p.GossipAddr(), p.HTTPAddr(), p.ProxyAddr())
	}
	if c := p.Config(); c.LogFormat != "json" || c.LogLevel != "info" {
		t.Errorf("the process logs %s at %s, want json at info", c.LogFormat, c.LogLevel)
	}
	pid, inc, _ := p.Running()
	if pid == 0 || inc != 0 {
		t.Errorf("Running = %d, %d", pid, inc)
	}
	if err := os.WriteFile(goOn, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	err = p.WaitLog(timeout(t, time.Minute), MsgSynced)
	if err == nil || !strings.Contains(err.Error(), "exited before logging") || !strings.Contains(err.Error(), "going away") ||
		!strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("WaitLog for a message never logged: %v", err)
	}
	if pid, _, _ := p.Running(); pid != 0 {
		t.Errorf("pid %d after the exit", pid)
	}
}

// A process that exits without starting is an error with its log; Stop
// makes the exit expected, and a restart is a new incarnation.
func TestProcess(t *testing.T) {
	_, err := StartAgentProcess(timeout(t, time.Minute), script(t, "echo 'cannot start' >&2; exit 1"), agent.DefaultConfig(),
		filepath.Join(t.TempDir(), "y.log"))
	if err == nil || !strings.Contains(err.Error(), "cannot start") {
		t.Errorf("a process that exits at start: %v", err)
	}

	var mu sync.Mutex
	var exits []bool
	p, err := NewProcess(ProcessConfig{Name: "sleeper", Argv: []string{script(t, "exec sleep 60")}, Log: filepath.Join(t.TempDir(), "s.log"),
		Exited: func(_ *Process, _ int, expected bool, _ error) {
			mu.Lock()
			defer mu.Unlock()
			exits = append(exits, expected)
		}})
	if err != nil {
		t.Fatal(err)
	}
	for inc := range 2 {
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		if err := p.Start(); err == nil {
			t.Error("a second Start while running succeeded")
		}
		if _, got, _ := p.Running(); got != inc {
			t.Errorf("incarnation %d, want %d", got, inc)
		}
		p.Stop(syscall.SIGTERM, 10*time.Second)
		select {
		case <-p.Done(): // Stop returns after the exit
		default:
			t.Fatal("Stop returned before the process exited")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(exits) != 2 || !exits[0] || !exits[1] {
		t.Errorf("exits %v, want two expected ones", exits)
	}
	if _, err := NewProcess(ProcessConfig{}); err == nil || !strings.Contains(err.Error(), "Name is required") {
		t.Errorf("NewProcess without a name: %v", err)
	}
}
