package soak

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// Config configures a soak run.
type Config struct {
	// Duration is the whole run, from the moment the fleet is up and the
	// traffic starts (required, at least Warmup + Settle + 30 s).
	Duration time.Duration
	// Seed draws the schedule (optional; 0 draws a seed, which the run
	// prints: give it back to reproduce the schedule).
	Seed int64
	// Agents is the number of agents (optional, default 8, at least 4);
	// the first Sentinels (optional, default 2) are never killed.
	Agents, Sentinels int
	// Warmup is the faultless start (optional, default 60 s; 30 s for a
	// Duration under ShortRun): the dead dependency dies in its middle.
	// Settle is the faultless end (optional, default 90 s; 45 s under
	// ShortRun; longer than every bound), so the run ends converged.
	Warmup, Settle time.Duration
	// Rate is each agent's calls per second to each dependency (optional,
	// default 2); CallDeadline each call's deadline (optional, default 1 s).
	Rate         float64
	CallDeadline time.Duration
	// Bin is the directory holding fusebox-agent, fusebox-coordinator and
	// fuseboxctl (required).
	Bin string
	// Dir is where the run makes its directory of data, sockets and logs
	// (optional, default os.TempDir(); socket paths stay under ~100 bytes).
	Dir string
	// Keep keeps the run's directory (the logs) after a clean run; it is
	// always kept after a failed one (optional, default false).
	Keep bool
	// Verbose prints the whole schedule and each fault as it is injected
	// (optional, default false).
	Verbose bool
	// Out receives the progress and the summary (optional, default
	// os.Stdout).
	Out io.Writer `json:"-"`
}

func (c Config) withDefaults() Config {
	if c.Agents == 0 {
		c.Agents = 8
	}
	if c.Sentinels == 0 {
		c.Sentinels = 2
	}
	short := c.Duration < ShortRun
	if c.Warmup == 0 {
		c.Warmup = time.Minute
		if short {
			c.Warmup = 30 * time.Second
		}
	}
	if c.Settle == 0 {
		c.Settle = 90 * time.Second
		if short {
			c.Settle = 45 * time.Second
		}
	}
	if c.Rate == 0 {
		c.Rate = 2
	}
	if c.CallDeadline == 0 {
		c.CallDeadline = time.Second
	}
	if c.Dir == "" {
		c.Dir = os.TempDir()
	}
	if c.Out == nil {
		c.Out = os.Stdout
	}
	return c
}

// Validate names every problem of the configuration (after defaults).
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.Duration < c.Warmup+c.Settle+30*time.Second {
		errs = append(errs, fmt.Errorf("soak: duration %v is too short: at least warm-up (%v) + settle (%v) + 30s", c.Duration, c.Warmup, c.Settle))
	}
	if c.Settle < max(DeadFaultBound, WriteBound, MembershipBound)+10*time.Second {
		errs = append(errs, fmt.Errorf("soak: settle %v must exceed the longest bound (%v) by 10s", c.Settle, max(DeadFaultBound, WriteBound, MembershipBound)))
	}
	if c.Warmup < 20*time.Second {
		errs = append(errs, fmt.Errorf("soak: warm-up %v must be at least 20s", c.Warmup))
	}
	if c.Rate <= 0 || c.Rate > 50 {
		errs = append(errs, fmt.Errorf("soak: rate %v calls/s must be in (0, 50]", c.Rate))
	}
	if c.CallDeadline < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("soak: call deadline %v must be at least 100ms", c.CallDeadline))
	}
	if err := c.plan().Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Bin == "" {
		errs = append(errs, errors.New("soak: bin (the directory of fusebox-agent, fusebox-coordinator and fuseboxctl) is required"))
	} else {
		for _, b := range []string{"fusebox-agent", "fusebox-coordinator", "fuseboxctl"} {
			if st, err := os.Stat(filepath.Join(c.Bin, b)); err != nil || st.Mode()&0o111 == 0 {
				errs = append(errs, fmt.Errorf("soak: bin: %s is not an executable file", filepath.Join(c.Bin, b)))
			}
		}
	}
	return errors.Join(errs...)
}

// ShortRun: a run shorter than this (a quick check, `make soak
// DURATION=2m`) gets a shorter warm-up and settle, leaving it time for
// faults.
const ShortRun = 5 * time.Minute

// plan is the schedule's plan for c.
func (c Config) plan() Plan {
	return Plan{Seed: c.Seed, Agents: c.Agents, Sentinels: c.Sentinels, EtcdMembers: etcdMembers,
		Start: c.Warmup, End: c.Duration - c.Settle}
}

// etcdMembers is the size of the soak's etcd cluster.
const etcdMembers = 3

// Requirements says what the machine lacks for a soak (root, iproute2's
// ip, nftables' nft), or nil.
func Requirements() error {
	var errs []error
	if os.Geteuid() != 0 {
		errs = append(errs, errors.New("soak: needs root (it makes network namespaces and nftables rules): run it as root"))
	}
	for _, b := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(b); err != nil {
			errs = append(errs, fmt.Errorf("soak: %s not found (Debian: apt-get install -y iproute2 nftables)", b))
		}
	}
	return errors.Join(errs...)
}

// Result is what a run found.
type Result struct {
	Seed        int64
	Violations  int
	Troubles    int // failures of the soak itself
	Interrupted bool
	Dir         string // the run's directory, when kept
}

// innerConfig is what the outer process hands the run in the ctl
// namespace.
type innerConfig struct {
	Config
	Prefix    string
	RunDir    string
	Keyring   string // gossip keyring file
	Tokens    string // coordinator tokens file
	TokenFile string // fuseboxctl's token
	Self      string // this executable
}

// Run runs a soak: it builds the lab, runs the soak's checks and callers
// in the ctl namespace (this executable again, as `inner`), and deletes
// the lab whatever happens. Ctrl-C (ctx done) stops the run early: the
// summary covers what ran.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg = cfg.withDefaults()
	if cfg.Seed == 0 {
		var b [8]byte
		rand.Read(b[:])
		cfg.Seed = int64(uint64(b[0])<<56|uint64(b[1])<<48|uint64(b[2])<<40|uint64(b[3])<<32|
			uint64(b[4])<<24|uint64(b[5])<<16|uint64(b[6])<<8|uint64(b[7])) & (1<<53 - 1)
	}
	res := Result{Seed: cfg.Seed}
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	if err := Requirements(); err != nil {
		return res, err
	}
	self, err := os.Executable()
	if err != nil {
		return res, fmt.Errorf("soak: %w", err)
	}
	prefix := fmt.Sprintf("fbsk%d", os.Getpid())
	runDir, err := os.MkdirTemp(cfg.Dir, "fbsoak-")
	if err != nil {
		return res, fmt.Errorf("soak: %w", err)
	}
	failed := true
	defer func() {
		if failed || cfg.Keep {
			res.Dir = runDir
			return
		}
		os.RemoveAll(runDir)
	}()
	lab := Lab{Prefix: prefix, Agents: cfg.Agents, EtcdMembers: etcdMembers}
	if err := lab.Create(); err != nil {
		return res, err
	}
	defer func() {
		if err := lab.Destroy(); err != nil {
			fmt.Fprintf(cfg.Out, "soak: deleting the namespaces %s-*: %v\n", prefix, err)
		}
	}()
	ic := innerConfig{Config: cfg, Prefix: prefix, RunDir: runDir, Self: self,
		Keyring: filepath.Join(runDir, "keyring"), Tokens: filepath.Join(runDir, "tokens"), TokenFile: filepath.Join(runDir, "token")}
	key := make([]byte, 32)
	tok := make([]byte, 24)
	rand.Read(key)
	rand.Read(tok)
	for path, content := range map[string]string{
		ic.Keyring:   base64.StdEncoding.EncodeToString(key) + "\n",
		ic.Tokens:    "admin " + hex.EncodeToString(tok) + " soak\n",
		ic.TokenFile: hex.EncodeToString(tok) + "\n",
	} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			return res, fmt.Errorf("soak: %w", err)
		}
	}
	cfgPath := filepath.Join(runDir, "inner.json")
	b, err := json.Marshal(ic)
	if err != nil {
		return res, fmt.Errorf("soak: %w", err)
	}
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		return res, fmt.Errorf("soak: %w", err)
	}

	cmd := exec.Command("ip", "netns", "exec", lab.CtlNS(), self, "inner", cfgPath)
	cmd.Stdout, cmd.Stderr = cfg.Out, cfg.Out
	// Its own process group (a terminal's Ctrl-C reaches this process
	// only, which then stops the run in order), killed with this one.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return res, fmt.Errorf("soak: start the run in %s: %w", lab.CtlNS(), err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var waitErr error
	select {
	case waitErr = <-done:
	case <-ctx.Done():
		res.Interrupted = true
		fmt.Fprintln(cfg.Out, "soak: interrupted: stopping the run (the summary covers what ran)")
		cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(2 * time.Minute)
		select {
		case waitErr = <-done:
		case <-t.C:
			fmt.Fprintln(cfg.Out, "soak: the run did not stop within 2 minutes: killing it")
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			waitErr = <-done
		}
		t.Stop()
	}
	// Whatever the run left running in the namespaces (it stops its
	// processes itself; this is for a run that was killed).
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	var exit *exec.ExitError
	switch {
	case waitErr == nil:
	case errors.As(waitErr, &exit) && exit.ExitCode() == exitViolations:
		res.Violations = 1 // at least; the summary has the count
	case errors.As(waitErr, &exit) && exit.ExitCode() == exitTrouble:
		res.Troubles = 1
	default:
		return res, fmt.Errorf("soak: the run in %s failed: %w", lab.CtlNS(), waitErr)
	}
	failed = res.Violations > 0 || res.Troubles > 0 || res.Interrupted
	return res, nil
}

// Exit codes of the inner run.
const (
	exitViolations = 1
	exitTrouble    = 3
)
