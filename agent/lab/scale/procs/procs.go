package procs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/lab/fleet"
	"github.com/fusebox-dev/fusebox/agent/lab/scale"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/ctxtime"
)

// Config configures Run.
type Config struct {
	// N is the number of agent processes (required, at least 2).
	N int
	// Agent is the fusebox-agent binary (required; fleet.Build builds one).
	Agent string
	// Dir is where Run makes its temporary directory: etcd's data, the
	// agents' data directories, sockets and logs (optional, default
	// os.TempDir(); unix socket paths must stay under ~100 bytes).
	Dir string
	// Clients is k, the agents whose clients report (optional, default 5).
	Clients int
	// Dependency is the dependency that fails (optional, default "dep-a").
	Dependency string
	// Warm is how long the clients report healthy calls before the
	// failures (optional, default 2.5 s, as scenario (a) in package scale).
	Warm time.Duration
	// StartTimeout bounds the start: every agent running and counting N
	// agents (optional, default 5 min).
	StartTimeout time.Duration
	// TripTimeout bounds the trip: from the first failure until every
	// agent holds the breaker open (optional, default 60 s).
	TripTimeout time.Duration
	// AgentArgs are extra fusebox-agent flags for every agent (optional;
	// parsed into the agent.Config the fleet renders as flags).
	AgentArgs []string
	// Log receives a line per step (optional, default none).
	Log io.Writer
	// Keep keeps the temporary directory (logs) after a failure; it is
	// always removed after a success (optional, default false).
	Keep bool
}

// Validate names every problem of the configuration.
func (c Config) Validate() error {
	var errs []error
	if c.N < 2 {
		errs = append(errs, fmt.Errorf("scale-procs: N must be at least 2, got %d", c.N))
	}
	if c.Agent == "" {
		errs = append(errs, errors.New("scale-procs: Agent (the fusebox-agent binary) is required"))
	} else if st, err := os.Stat(c.Agent); err != nil {
		errs = append(errs, fmt.Errorf("scale-procs: Agent: %w", err))
	} else if st.IsDir() || st.Mode()&0o111 == 0 {
		errs = append(errs, fmt.Errorf("scale-procs: Agent: %s is not an executable file", c.Agent))
	}
	if c.Clients < 0 {
		errs = append(errs, fmt.Errorf("scale-procs: Clients must be >= 0, got %d", c.Clients))
	}
	if c.Dependency != "" {
		if err := sharedstate.ValidateDependencyName(c.Dependency); err != nil {
			errs = append(errs, fmt.Errorf("scale-procs: Dependency: %w", err))
		}
	}
	if len(c.AgentArgs) > 0 {
		def := agent.DefaultConfig()
		if err := agentFlags(&def, c.AgentArgs); err != nil {
			errs = append(errs, fmt.Errorf("scale-procs: AgentArgs: %w", err))
		}
	}
	for name, d := range map[string]time.Duration{"Warm": c.Warm, "StartTimeout": c.StartTimeout, "TripTimeout": c.TripTimeout} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("scale-procs: %s must be >= 0, got %v", name, d))
		}
	}
	return errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	if c.Clients == 0 {
		c.Clients = 5
	}
	if c.Dependency == "" {
		c.Dependency = "dep-a"
	}
	if c.Warm == 0 {
		c.Warm = 2500 * time.Millisecond
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = 5 * time.Minute
	}
	if c.TripTimeout == 0 {
		c.TripTimeout = 60 * time.Second
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return c
}

// Result is what Run measured.
type Result struct {
	N int
	// Open counts the agents whose pushed snapshot showed the breaker open
	// before TripTimeout; Rejecting those whose Check then rejected a
	// first attempt. Both are N when the trip reached every agent.
	Open, Rejecting int
	// Spread holds, per agent that opened, how long after the first agent
	// it did; P50, P99 and Max summarise it (Max: first to last).
	Spread        []time.Duration
	P50, P99, Max time.Duration
	// Proposers counts the agents that proposed the open record themselves
	// (fusebox_agent_breaker_transitions_total{to="open",origin="self"}).
	Proposers int
	// Detect is how long after the clients began reporting failures the
	// first agent held the breaker open.
	Detect time.Duration
	// Membership is how long after the first agent started every agent
	// counted N agents and ran under the written policy.
	Membership time.Duration
	// CPU is the agents' CPU time (user + system, all N processes) per
	// wall-clock second since the first started: cores busy.
	CPU float64
	// Wall is how long Run took.
	Wall time.Duration
}

// Header is the table's header (markdown): the first columns of package
// scale's table, then what only real processes show.
const Header = "| N | (a) trip p50 / p99 / max | (a) proposers | first open after the first failure | full membership after | agents' CPU cores busy, wall |\n" +
	"| --- | --- | --- | --- | --- | --- |"

// Markdown formats the result as a row under Header.
func (r Result) Markdown() string {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }
	return fmt.Sprintf("| %d | %s / %s / %s | %d | %s | %.1f s | %.2f, %s |", r.N, ms(r.P50), ms(r.P99), ms(r.Max),
		r.Proposers, ms(r.Detect), r.Membership.Seconds(), r.CPU, r.Wall.Round(time.Second))
}

// Check returns nil when every agent held the breaker open and rejected,
// and otherwise an error saying how many did not.
func (r Result) Check() error {
	var errs []error
	if r.Open < r.N {
		errs = append(errs, fmt.Errorf("%d of %d agents never held the breaker open", r.N-r.Open, r.N))
	}
	if r.Rejecting < r.N {
		errs = append(errs, fmt.Errorf("%d of %d agents did not reject a first attempt", r.N-r.Rejecting, r.N))
	}
	if len(errs) > 0 {
		return fmt.Errorf("scale-procs: %w", errors.Join(errs...))
	}
	return nil
}

// Run runs the scenario (see the package documentation). It returns what
// it measured and, when a step failed (an agent did not start, membership
// was not reached, the trip did not reach every agent), an error naming
// the step; the result then holds what was measured until then. Every
// agent process is stopped (SIGTERM, then SIGKILL)
// before Run returns, whatever happened.
func Run(ctx context.Context, cfg Config) (res Result, err error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	cfg = cfg.withDefaults()
	res.N = cfg.N
	start := time.Now()
	defer func() { res.Wall = time.Since(start) }()
	logf := func(format string, args ...any) {
		fmt.Fprintf(cfg.Log, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
	}

	dir, err := os.MkdirTemp(cfg.Dir, "fbprocs")
	if err != nil {
		return res, fmt.Errorf("scale-procs: %w", err)
	}
	defer func() {
		if err != nil && cfg.Keep {
			logf("kept %s (agent logs in agent-*.log)", dir)
			return
		}
		os.RemoveAll(dir)
	}()

	p := scale.Policy()
	startCtx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	logf("starting etcd and %d agents", cfg.N)
	f, err := fleet.New(startCtx, fleet.Config{N: cfg.N, Dir: dir, Etcd: true, Policy: &p, Binary: cfg.Agent, Seeds: 1,
		Tune: func(_ int, c *agent.Config) {
			agentFlags(c, cfg.AgentArgs) // checked by Validate
		}})
	if err != nil {
		return res, fmt.Errorf("scale-procs: %w", err)
	}
	defer f.Close()
	if err := f.WaitAll(startCtx, "every agent runs the policies from etcd", func(i int) error {
		m, err := f.Metrics(startCtx, i)
		if err != nil {
			return err
		}
		if v, _ := m.Value("fusebox_agent_policy_source", "source", "etcd"); v != 1 {
			return fmt.Errorf("%s does not run the policies from etcd", fleet.Name(i))
		}
		return nil
	}); err != nil {
		return res, fmt.Errorf("scale-procs: %w", err)
	}
	res.Membership = time.Since(f.Started())
	logf("every agent counts %d agents and runs the etcd policy, %.1f s after the first started", cfg.N, res.Membership.Seconds())

	if err := trip(ctx, f, cfg, logf, &res); err != nil {
		return res, err
	}
	res.CPU = cpu(f).Seconds() / time.Since(f.Started()).Seconds()
	return res, res.Check()
}

// agentFlags parses fusebox-agent flags into c.
func agentFlags(c *agent.Config, args []string) error {
	fs := agent.NewFlagSet(c)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return nil
}

// trip runs the scenario on a started fleet and fills res.
func trip(ctx context.Context, f *fleet.Fleet, cfg Config, logf func(string, ...any), res *Result) error {
	dep := cfg.Dependency
	obs, err := observe(ctx, f, dep)
	if err != nil {
		return err
	}
	defer obs.stop()

	clients := scale.Spread(cfg.N, cfg.Clients)
	logf("clients on agents %v report healthy calls for %v", clients, cfg.Warm)
	stop := scale.Traffic(ctx, f, clients, []string{dep}, 10, 0, scale.ReportEvery, logf)
	ok := ctxtime.Sleep(ctx, cfg.Warm)
	stop()
	if !ok {
		return ctx.Err()
	}
	if n := obs.opened(); n > 0 {
		return fmt.Errorf("scale-procs: %d agents held %s open on healthy traffic", n, dep)
	}

	logf("the clients report only failures")
	failStart := time.Now()
	stop = scale.Traffic(ctx, f, clients, []string{dep}, 0, 10, scale.ReportEvery, logf)
	defer stop()
	tripCtx, cancel := context.WithTimeout(ctx, cfg.TripTimeout)
	defer cancel()
	first, waitErr := obs.wait(tripCtx)
	stop()

	var earliest time.Time
	for _, at := range first {
		if !at.IsZero() && (earliest.IsZero() || at.Before(earliest)) {
			earliest = at
		}
	}
	for _, at := range first {
		if !at.IsZero() {
			res.Open++
			res.Spread = append(res.Spread, at.Sub(earliest))
		}
	}
	if !earliest.IsZero() {
		res.Detect = earliest.Sub(failStart)
	}
	res.P50, res.P99, res.Max = scale.Percentile(res.Spread, 0.5), scale.Percentile(res.Spread, 0.99), scale.Percentile(res.Spread, 1)
	logf("%d of %d agents held %s open; first to last: %v", res.Open, cfg.N, dep, res.Max)

	// Every agent must reject now (Check, as a strict client asks), and
	// the proposers are counted from every agent's metrics.
	res.Rejecting = rejecting(ctx, f, dep, logf)
	res.Proposers, err = proposers(ctx, f, dep)
	if err != nil {
		return err
	}
	logf("%d agents reject; %d proposed the open record", res.Rejecting, res.Proposers)
	if waitErr != nil {
		return fmt.Errorf("scale-procs: the trip did not reach every agent within %v: %w", cfg.TripTimeout, waitErr)
	}
	return nil
}

// rejecting asks every agent to Check a first attempt to dep and counts
// the rejections.
func rejecting(ctx context.Context, f *fleet.Fleet, dep string, logf func(string, ...any)) int {
	n := 0
	for i := range f.Size() {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		d, err := f.Client(i).Check(cctx, &fuseboxv1.CheckRequest{Dependency: dep, Kind: fuseboxv1.AttemptKind_ATTEMPT_KIND_FIRST,
			Service: "scale-procs", Instance: "check"})
		cancel()
		switch {
		case err != nil:
			logf("%s: check: %v", fleet.Name(i), err)
		case d.GetVerdict() == fuseboxv1.Verdict_VERDICT_REJECT:
			n++
		default:
			logf("%s: check: %v (%v)", fleet.Name(i), d.GetVerdict(), d.GetReason())
		}
	}
	return n
}

// proposers counts the agents whose metrics say they proposed an open
// record of dep themselves.
func proposers(ctx context.Context, f *fleet.Fleet, dep string) (int, error) {
	n := 0
	var errs []error
	for i := range f.Size() {
		m, err := f.Metrics(ctx, i)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if v, _ := m.Value("fusebox_agent_breaker_transitions_total", "dependency", dep, "to", "open", "origin", "self"); v > 0 {
			n++
		}
	}
	if err := errors.Join(errs...); err != nil {
		return n, fmt.Errorf("scale-procs: counting the proposers: %w", err)
	}
	return n, nil
}

// cpu returns the CPU time (user + system) the running agents used so far,
// from /proc/<pid>/stat.
func cpu(f *fleet.Fleet) time.Duration {
	var total time.Duration
	for i := range f.Size() {
		pid, _, _ := f.Process(i).Running()
		if pid == 0 {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
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
