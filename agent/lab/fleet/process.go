package fleet

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ProcessConfig configures a Process.
type ProcessConfig struct {
	// Name names the process in messages (required).
	Name string
	// Argv is the binary and its arguments (required).
	Argv []string
	// NetNS runs the process in this network namespace, through `ip netns
	// exec` (which execs the binary: the pid is the binary's) (optional).
	NetNS string
	// Log is the file every incarnation's standard output and error are
	// appended to, each incarnation after a header line (required).
	Log string
	// Env is the environment (optional, default Env()).
	Env []string
	// Line is called with each line the process writes to standard error,
	// in order, from one goroutine per incarnation (optional). It must not
	// keep the slice. The line is in the log either way.
	Line func(incarnation int, line []byte)
	// Exited is called when an incarnation exits, from its waiter goroutine,
	// before Done is closed (so Stop returns after it): it must not call
	// Stop or wait for Done (optional); expected says Stop asked for it.
	Exited func(p *Process, incarnation int, expected bool, err error)
}

// Process is one long-lived process of a lab run (an agent, an etcd
// member, a coordinator), started again as often as the caller likes; each
// start is an incarnation, numbered from 0. It dies with this process
// (SIGKILL as parent-death signal). Methods are safe for concurrent use.
type Process struct {
	cfg ProcessConfig

	mu          sync.Mutex
	cmd         *exec.Cmd
	incarnation int // of the running (or last) process
	startedAt   time.Time
	stopping    bool
	done        chan struct{} // closed when the running (or last) incarnation exited
	exit        error         // how the last incarnation exited
}

// NewProcess validates cfg; the process starts with Start.
func NewProcess(cfg ProcessConfig) (*Process, error) {
	var errs []error
	if cfg.Name == "" {
		errs = append(errs, errors.New("fleet: process: Name is required"))
	}
	if len(cfg.Argv) == 0 || cfg.Argv[0] == "" {
		errs = append(errs, fmt.Errorf("fleet: process %s: Argv is required", cfg.Name))
	}
	if cfg.Log == "" {
		errs = append(errs, fmt.Errorf("fleet: process %s: Log is required", cfg.Name))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.Env == nil {
		cfg.Env = Env()
	}
	done := make(chan struct{})
	close(done)
	return &Process{cfg: cfg, incarnation: -1, done: done}, nil
}

// Env is this process's environment without any FUSEBOX_ variable: a
// FUSEBOX_JOIN there would join another fleet.
func Env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FUSEBOX_") {
			env = append(env, kv)
		}
	}
	return env
}

// Name returns the process's name.
func (p *Process) Name() string { return p.cfg.Name }

// LogPath returns the log file.
func (p *Process) LogPath() string { return p.cfg.Log }

// Start starts a new incarnation. The process must not be running.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("fleet: %s is already running", p.cfg.Name)
	}
	logf, err := os.OpenFile(p.cfg.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("fleet: %s: %w", p.cfg.Name, err)
	}
	inc := p.incarnation + 1
	fmt.Fprintf(logf, "=== %s incarnation %d starts at %s: %s\n", p.cfg.Name, inc, time.Now().Format(time.RFC3339Nano), strings.Join(p.cfg.Argv, " "))
	argv := p.cfg.Argv
	if p.cfg.NetNS != "" {
		argv = append([]string{"ip", "netns", "exec", p.cfg.NetNS}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = p.cfg.Env
	cmd.Stdout = logf
	var stderr io.ReadCloser
	if p.cfg.Line != nil {
		if stderr, err = cmd.StderrPipe(); err != nil {
			logf.Close()
			return fmt.Errorf("fleet: %s: %w", p.cfg.Name, err)
		}
	} else {
		cmd.Stderr = logf
	}
	// SIGKILL when this process dies, so that nothing outlives a run
	// killed without a chance to clean up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("fleet: start %s: %w", p.cfg.Name, err)
	}
	p.cmd, p.incarnation, p.startedAt, p.stopping, p.exit = cmd, inc, time.Now(), false, nil
	done := make(chan struct{})
	p.done = done
	go p.wait(cmd, inc, logf, stderr, done)
	return nil
}

// wait reads the incarnation's standard error (when Line is set) until it
// ends, waits for its exit and reports it.
func (p *Process) wait(cmd *exec.Cmd, inc int, logf *os.File, stderr io.Reader, done chan struct{}) {
	var scanErr error
	if stderr != nil {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			logf.Write(append(line, '\n'))
			p.cfg.Line(inc, line)
		}
		scanErr = sc.Err()
	}
	err := errors.Join(cmd.Wait(), scanErr)
	logf.Close()
	p.mu.Lock()
	expected := p.stopping
	p.cmd, p.exit = nil, err
	p.mu.Unlock()
	if p.cfg.Exited != nil {
		p.cfg.Exited(p, inc, expected, err)
	}
	close(done)
}

// Running returns the pid, incarnation and start of the running process
// (pid 0 when none runs; incarnation -1 before the first start).
func (p *Process) Running() (pid, incarnation int, startedAt time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0, p.incarnation, p.startedAt
	}
	return p.cmd.Process.Pid, p.incarnation, p.startedAt
}

// Done is closed when the running incarnation (or, when none runs, the
// last one) has exited; Err then says how.
func (p *Process) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// Err returns how the last incarnation exited (nil while it runs).
func (p *Process) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exit
}

// Stop sends sig to the running process, as the caller's own doing (its
// exit is expected), waits up to grace for it to exit, then SIGKILLs it and
// waits. It returns at once when nothing runs.
func (p *Process) Stop(sig syscall.Signal, grace time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	if cmd == nil {
		p.mu.Unlock()
		return
	}
	p.stopping = true
	p.mu.Unlock()
	cmd.Process.Signal(sig)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	cmd.Process.Kill()
	<-done
}

// Tail returns the last n lines of the log, for an error message.
func (p *Process) Tail(n int) string {
	b, err := os.ReadFile(p.cfg.Log)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
