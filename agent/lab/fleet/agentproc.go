package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"syscall"

	"github.com/fusebox-dev/fusebox/agent"
)

// AgentProcess is a fusebox-agent process run from an agent.Config: its
// flags are Args(cfg), its log is JSON, and it knows which messages its
// running incarnation logged.
type AgentProcess struct {
	*Process
	cfg agent.Config

	mu      sync.Mutex
	inc     int             // the incarnation seen describes
	seen    map[string]bool // the messages it logged
	up      startedLine     // its "agent started" line
	changed chan struct{}   // closed and replaced when seen grows
}

// startedLine is what an "agent started" log line says.
type startedLine struct{ Msg, Gossip, HTTP, Proxy string }

// MsgStarted and MsgSynced are the agent's log messages when it has
// started (its addresses in the line) and when it holds etcd's policies.
const (
	MsgStarted = "agent started"
	MsgSynced  = "policies synced from etcd"
)

// StartAgentProcess starts bin with cfg, its log appended to logPath, and
// waits until it logged MsgStarted. cfg's log format becomes JSON, its
// level info unless it is debug. On error (the process exited, ctx ended)
// the process is stopped and the error holds the log's tail.
func StartAgentProcess(ctx context.Context, bin string, cfg agent.Config, logPath string) (*AgentProcess, error) {
	return startAgentProcess(ctx, bin, "", cfg, logPath)
}

// startAgentProcess is StartAgentProcess in network namespace netns ("":
// this process's).
func startAgentProcess(ctx context.Context, bin, netns string, cfg agent.Config, logPath string) (*AgentProcess, error) {
	cfg.LogFormat = "json"
	if cfg.LogLevel != "debug" {
		cfg.LogLevel = "info"
	}
	p := &AgentProcess{cfg: cfg, inc: -1, changed: make(chan struct{})}
	proc, err := NewProcess(ProcessConfig{Name: cfg.Name, Argv: append([]string{bin}, Args(cfg)...), NetNS: netns, Log: logPath, Line: p.line})
	if err != nil {
		return nil, err
	}
	p.Process = proc
	if err := p.start(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// start starts an incarnation and waits for its MsgStarted.
func (p *AgentProcess) start(ctx context.Context) error {
	p.mu.Lock()
	p.seen, p.up = map[string]bool{}, startedLine{}
	p.inc = -1 // lines of the previous incarnation no longer count
	p.mu.Unlock()
	if err := p.Process.Start(); err != nil {
		return err
	}
	if err := p.WaitLog(ctx, MsgStarted); err != nil {
		p.Stop(syscall.SIGKILL, 0)
		return err
	}
	return nil
}

// line records a log line's message (lines that are not JSON are skipped).
func (p *AgentProcess) line(inc int, b []byte) {
	var l startedLine
	if json.Unmarshal(b, &l) != nil || l.Msg == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if inc != p.inc {
		if inc < p.inc {
			return
		}
		p.inc, p.seen, p.up = inc, map[string]bool{}, startedLine{}
	}
	if l.Msg == MsgStarted {
		p.up = l
	}
	if !p.seen[l.Msg] {
		p.seen[l.Msg] = true
		close(p.changed)
		p.changed = make(chan struct{})
	}
}

// WaitLog waits until the running incarnation logged msg; it fails when
// the process exits first or ctx ends.
func (p *AgentProcess) WaitLog(ctx context.Context, msg string) error {
	for {
		_, inc, _ := p.Running()
		done := p.Done()
		p.mu.Lock()
		ok, changed := p.inc == inc && p.seen[msg], p.changed
		p.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-done:
			// Every line is read before the exit is reported: look once more.
			p.mu.Lock()
			ok := p.inc == inc && p.seen[msg]
			p.mu.Unlock()
			if ok {
				return nil
			}
			return fmt.Errorf("fleet: %s exited before logging %q (%v): %s", p.Name(), msg, p.Err(), p.Tail(10))
		case <-ctx.Done():
			return fmt.Errorf("fleet: %s did not log %q: %w (log: %s)", p.Name(), msg, ctx.Err(), p.LogPath())
		}
	}
}

// Config returns the configuration the process runs with.
func (p *AgentProcess) Config() agent.Config { return p.cfg }

// GossipAddr, HTTPAddr and ProxyAddr return the running incarnation's
// addresses, from its MsgStarted line ("" before it, or when off).
func (p *AgentProcess) GossipAddr() string { return p.started().Gossip }

// HTTPAddr returns the address of /metrics, /healthz and /readyz.
func (p *AgentProcess) HTTPAddr() string { return p.started().HTTP }

// ProxyAddr returns the egress proxy's address.
func (p *AgentProcess) ProxyAddr() string { return p.started().Proxy }

func (p *AgentProcess) started() startedLine {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.up
}

// Restart stops the process (SIGTERM: it leaves the gossip; SIGKILL after
// its shutdown timeout) and starts it again with the same flags, waiting
// for its MsgStarted.
func (p *AgentProcess) Restart(ctx context.Context) error {
	p.Stop(syscall.SIGTERM, p.cfg.ShutdownTimeout+stopGrace)
	return p.start(ctx)
}
