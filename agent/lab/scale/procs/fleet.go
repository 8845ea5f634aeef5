package procs

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

// fleet is N fusebox-agent processes in one process group.
type fleet struct {
	cfg  Config
	dir  string
	etcd []string
	logf func(format string, args ...any)

	procs   []*proc
	pgid    int // the process group of every agent: the first agent's pid
	started time.Time
	http    *http.Client
	once    sync.Once
}

// proc is one agent process.
type proc struct {
	i       int
	name    string
	cmd     *exec.Cmd
	logPath string
	socket  string

	up     chan struct{} // closed when the agent logged "agent started"
	gossip string        // its gossip and HTTP addresses, from that line
	httpAt string
	exited chan struct{} // closed when the process has been waited for
	exit   error

	conn *grpc.ClientConn
	api  fuseboxv1.AgentClient
}

// name returns agent i's node name, as package scale names its agents.
func name(i int) string { return fmt.Sprintf("agent-%03d", i) }

// start starts the agents: the first alone, then the others joining it
// (and finding each other in etcd's member registry), and waits until each
// has logged its start.
func (f *fleet) start(ctx context.Context) error {
	f.http = &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
	f.started = time.Now()
	for i := range f.cfg.N {
		p, err := f.spawn(i)
		if err != nil {
			return err
		}
		f.procs = append(f.procs, p)
		if i == 0 {
			if err := f.waitUp(ctx, p); err != nil {
				return err
			}
		}
	}
	for _, p := range f.procs {
		if err := f.waitUp(ctx, p); err != nil {
			return err
		}
	}
	for _, p := range f.procs {
		conn, err := grpc.NewClient("unix://"+p.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return fmt.Errorf("scale-procs: %s: dial %s: %w", p.name, p.socket, err)
		}
		p.conn, p.api = conn, fuseboxv1.NewAgentClient(conn)
	}
	return nil
}

// spawn starts agent i.
func (f *fleet) spawn(i int) (*proc, error) {
	p := &proc{i: i, name: name(i), up: make(chan struct{}), exited: make(chan struct{})}
	p.socket = filepath.Join(f.dir, "s", fmt.Sprintf("%d.sock", i))
	p.logPath = filepath.Join(f.dir, p.name+".log")
	args := []string{
		"--name", p.name,
		"--zone", "z1",
		"--data-dir", filepath.Join(f.dir, p.name),
		"--gossip-addr", "127.0.0.1:0",
		"--socket", p.socket,
		"--http-addr", "127.0.0.1:0",
		"--etcd", strings.Join(f.etcd, ","),
		"--log-format", "json",
		"--log-level", "info",
	}
	if i > 0 {
		args = append(args, "--join", f.procs[0].gossip)
	}
	args = append(args, f.cfg.AgentArgs...)
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("scale-procs: %w", err)
	}
	cmd := exec.Command(f.cfg.Agent, args...)
	// Only FUSEBOX_* variables the run sets: none from the caller's
	// environment (a FUSEBOX_JOIN there would join another fleet).
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FUSEBOX_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Stdout = logFile
	stderr, err := cmd.StderrPipe()
	if err != nil {
		logFile.Close()
		return nil, fmt.Errorf("scale-procs: %w", err)
	}
	// One process group for every agent (the first one's), so that one
	// signal reaches them all; and SIGKILL when this process dies, so that
	// no agent outlives a run killed without a chance to clean up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: f.pgid, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("scale-procs: start %s: %w", p.name, err)
	}
	if i == 0 {
		f.pgid = cmd.Process.Pid
	}
	p.cmd = cmd
	go func() {
		defer close(p.exited)
		defer logFile.Close()
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		upDone := false
		for sc.Scan() {
			line := sc.Bytes()
			logFile.Write(line)
			logFile.Write([]byte{'\n'})
			if upDone {
				continue
			}
			var rec struct{ Msg, Gossip, HTTP string }
			if json.Unmarshal(line, &rec) == nil && rec.Msg == "agent started" {
				p.gossip, p.httpAt = rec.Gossip, rec.HTTP
				upDone = true
				close(p.up)
			}
		}
		scanErr := sc.Err()
		p.exit = errors.Join(cmd.Wait(), scanErr)
	}()
	return p, nil
}

// waitUp waits until p logged its start, or it exited, or ctx ended.
func (f *fleet) waitUp(ctx context.Context, p *proc) error {
	select {
	case <-p.up:
		if p.gossip == "" || p.httpAt == "" {
			return fmt.Errorf("scale-procs: %s started without a gossip or HTTP address (log: %s)", p.name, p.logPath)
		}
		return nil
	case <-p.exited:
		return fmt.Errorf("scale-procs: %s exited at start (%v): %s", p.name, p.exit, tail(p.logPath))
	case <-ctx.Done():
		return fmt.Errorf("scale-procs: %s did not start: %w (log: %s)", p.name, ctx.Err(), p.logPath)
	}
}

// tail returns the last lines of a log file, for an error message.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], "\n")
}

// each calls fn for every agent, 8 at a time, and waits.
func (f *fleet) each(fn func(p *proc)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, p := range f.procs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			fn(p)
		}()
	}
	wg.Wait()
}

// waitMembership polls every agent's /metrics until each counts N alive
// agents, is ready, and runs under the policies from etcd.
func (f *fleet) waitMembership(ctx context.Context) error {
	n := float64(f.cfg.N)
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	lastReport := time.Now()
	for {
		var mu sync.Mutex
		var why []string
		f.each(func(p *proc) {
			m, err := f.scrape(ctx, p)
			var w string
			switch {
			case err != nil:
				w = err.Error()
			case m.value("fusebox_agent_members", "role", "agent", "state", "alive") != n:
				w = fmt.Sprintf("%s counts %.0f agents", p.name, m.value("fusebox_agent_members", "role", "agent", "state", "alive"))
			case m.value("fusebox_agent_ready") != 1:
				w = p.name + " is not ready"
			case m.value("fusebox_agent_policy_source", "source", "etcd") != 1:
				w = p.name + " does not run the policies from etcd"
			default:
				return
			}
			mu.Lock()
			why = append(why, w)
			mu.Unlock()
		})
		if len(why) == 0 {
			return nil
		}
		if time.Since(lastReport) > 10*time.Second {
			f.logf("waiting for membership: %d agents not there yet, e.g. %s", len(why), why[0])
			lastReport = time.Now()
		}
		for _, p := range f.procs {
			select {
			case <-p.exited:
				return fmt.Errorf("scale-procs: %s exited (%v): %s", p.name, p.exit, tail(p.logPath))
			default:
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("scale-procs: full membership not reached: %w: %d agents short, e.g. %s", ctx.Err(), len(why), why[0])
		case <-t.C:
		}
	}
}

// close stops every agent: SIGTERM to the process group (each leaves the
// gossip and exits), SIGKILL to what is left after 15 s, and waits.
func (f *fleet) close() {
	f.once.Do(func() {
		for _, p := range f.procs {
			if p.conn != nil {
				p.conn.Close()
			}
		}
		if f.http != nil {
			f.http.CloseIdleConnections()
		}
		if len(f.procs) == 0 {
			return
		}
		signal := func(sig syscall.Signal) {
			syscall.Kill(-f.pgid, sig)
			for _, p := range f.procs { // in case one left the group
				p.cmd.Process.Signal(sig)
			}
		}
		wait := func(d time.Duration) bool {
			t := time.NewTimer(d)
			defer t.Stop()
			for _, p := range f.procs {
				select {
				case <-p.exited:
				case <-t.C:
					return false
				}
			}
			return true
		}
		signal(syscall.SIGTERM)
		if !wait(15 * time.Second) {
			f.logf("agents still running 15 s after SIGTERM: SIGKILL")
			signal(syscall.SIGKILL)
			wait(time.Minute)
		}
	})
}

// cpu returns the CPU time (user + system) the running agents used so far,
// from /proc/<pid>/stat.
func (f *fleet) cpu() time.Duration {
	var total time.Duration
	for _, p := range f.procs {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
		if err != nil {
			continue
		}
		// The fields after the command name (in parentheses, which may hold
		// spaces): state is field 3, utime 14, stime 15, in clock ticks.
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) < 13 {
			continue
		}
		ut, _ := strconv.ParseInt(fields[11], 10, 64)
		st, _ := strconv.ParseInt(fields[12], 10, 64)
		total += time.Duration(ut+st) * time.Second / clockTicks
	}
	return total
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100
