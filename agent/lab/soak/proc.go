package soak

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is one long-lived process of the soak (an agent, an etcd
// member, the coordinator), run in a namespace with `ip netns exec`, which
// execs the binary: the pid is the binary's. Its output goes to a log file
// that every incarnation appends to. Methods are safe for concurrent use.
type process struct {
	name    string
	ns      string
	argv    []string // binary and arguments
	logPath string
	// exited is called (from the process's waiter goroutine) when an
	// incarnation exits; expected says the soak stopped it.
	exited func(p *process, incarnation int, expected bool, err error)

	mu          sync.Mutex
	cmd         *exec.Cmd
	incarnation int // of the running (or last) process, from 0
	startedAt   time.Time
	stopping    bool
	done        chan struct{} // closed when the running incarnation exited
}

// start starts a new incarnation. The process must not be running.
func (p *process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("soak: %s is already running", p.name)
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("soak: %s: %w", p.name, err)
	}
	inc := p.incarnation
	if !p.startedAt.IsZero() {
		inc++
	}
	fmt.Fprintf(logf, "=== soak: %s incarnation %d starts at %s: %s\n", p.name, inc, time.Now().Format(time.RFC3339Nano), strings.Join(p.argv, " "))
	cmd := exec.Command("ip", append([]string{"netns", "exec", p.ns}, p.argv...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = soakEnv()
	// SIGKILL when the soak dies, so that nothing outlives a run killed
	// without a chance to clean up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("soak: start %s: %w", p.name, err)
	}
	p.cmd, p.incarnation, p.startedAt, p.stopping = cmd, inc, time.Now(), false
	done := make(chan struct{})
	p.done = done
	go func() {
		err := cmd.Wait()
		logf.Close()
		p.mu.Lock()
		expected := p.stopping
		p.cmd = nil
		p.mu.Unlock()
		close(done)
		if p.exited != nil {
			p.exited(p, inc, expected, err)
		}
	}()
	return nil
}

// running returns the pid, incarnation and start of the running process
// (pid 0 when none runs).
func (p *process) running() (pid, incarnation int, startedAt time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0, p.incarnation, p.startedAt
	}
	return p.cmd.Process.Pid, p.incarnation, p.startedAt
}

// stop sends sig to the running process, as the soak's own doing (its exit
// is expected), and waits up to grace for it to exit, then SIGKILLs it and
// waits. It returns at once when nothing runs.
func (p *process) stop(sig syscall.Signal, grace time.Duration) {
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

// soakEnv is the environment of the soak's processes: this one's without
// any FUSEBOX_ variable (a FUSEBOX_JOIN there would join another fleet).
func soakEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FUSEBOX_") {
			env = append(env, kv)
		}
	}
	return env
}

// procResources reads pid's RSS, threads and open files from /proc (-1
// for what cannot be read; Goroutines -1).
func procResources(pid int) Resources {
	r := Resources{RSS: -1, FDs: -1, Threads: -1, Goroutines: -1}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			f := strings.Fields(v)
			if len(f) == 0 {
				continue
			}
			n, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				continue
			}
			switch k {
			case "VmRSS":
				r.RSS = n << 10 // kB
			case "Threads":
				r.Threads = n
			}
		}
	}
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		r.FDs = int64(len(ents))
	}
	return r
}
