package scale

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/lab/simnet"
	"github.com/fusebox-dev/fusebox/protocol/gossip"
)

// Part is one fleet of a row: a row's scenarios run on two fleets, each
// in a process of its own (cmd/scale), so that the larger one's memory is
// given back before the other starts.
type Part string

const (
	// Clean is the fleet on clean links: scenarios (a), (e), (f), (b), (c).
	Clean Part = "clean"
	// Lossy is the fleet on LossyLink: scenario (d).
	Lossy Part = "lossy"
)

// Parts lists the parts in the order a row runs them.
var Parts = []Part{Clean, Lossy}

// letters are the scenarios each part runs.
func (p Part) letters() string {
	if p == Lossy {
		return "d"
	}
	return "abcef"
}

// RunConfig configures one row's part (RunPart). It travels as JSON from
// the scale command to the test process that runs the part.
type RunConfig struct {
	// N is the fleet size (required, at least 2).
	N int
	// Split is how long scenario (e) keeps the fleet split (optional,
	// default 30 s).
	Split time.Duration
	// Measure is how long (b) measures the steady state (optional,
	// default MeasurePeriod).
	Measure time.Duration
	// Scenarios lists the scenarios to run, by letter (optional, default
	// "abcdef": all). Columns of skipped scenarios print as "–".
	Scenarios string
	// ServiceTime is the CPU each host spends on a packet it receives
	// (simnet.Config.ServiceTime; optional, default 0: infinitely fast hosts).
	ServiceTime time.Duration
	// Tuning changes every agent's gossip settings (optional).
	Tuning Tuning
	// Verbose traces each step to the log writer.
	Verbose bool
}

// Validate names every problem of the configuration.
func (c RunConfig) Validate() error {
	var errs []error
	if c.N < 2 {
		errs = append(errs, fmt.Errorf("scale: N must be at least 2, got %d", c.N))
	}
	if c.Split < 0 || c.Measure < 0 || c.ServiceTime < 0 {
		errs = append(errs, fmt.Errorf("scale: Split, Measure and ServiceTime must be >= 0, got %v, %v, %v", c.Split, c.Measure, c.ServiceTime))
	}
	if strings.Trim(c.Scenarios, "abcdef") != "" {
		errs = append(errs, fmt.Errorf("scale: Scenarios %q: want letters of abcdef", c.Scenarios))
	}
	if err := c.Tuning.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// runs reports whether scenario letter is selected.
func (c RunConfig) runs(letter byte) bool {
	return c.Scenarios == "" || strings.IndexByte(c.Scenarios, letter) >= 0
}

// Needs reports whether part p has a scenario to run.
func (c RunConfig) Needs(p Part) bool {
	for _, l := range []byte(p.letters()) {
		if c.runs(l) {
			return true
		}
	}
	return false
}

// Tuning is the agent settings a run may change from agent.DefaultConfig
// (a zero field keeps the default): the tuning experiments of
// agent/README.md's "Scale" section.
type Tuning struct {
	GossipInterval, ProbeInterval, PushPullInterval time.Duration
	RejoinInterval, HealRejoinInterval              time.Duration
	RetransmitMult, GossipNodes                     int
	// RowFanout is the agents' --row-fanout (nil: the default).
	RowFanout *int `json:",omitempty"`
}

// Validate names every problem of the tuning.
func (t Tuning) Validate() error {
	if t.GossipInterval < 0 || t.ProbeInterval < 0 || t.PushPullInterval < 0 || t.RejoinInterval < 0 || t.HealRejoinInterval < 0 || t.RetransmitMult < 0 || t.GossipNodes < 0 {
		return fmt.Errorf("scale: tuning %+v: intervals, RetransmitMult and GossipNodes must be >= 0", t)
	}
	if t.RowFanout != nil && (*t.RowFanout < 0 || *t.RowFanout > 64) {
		return fmt.Errorf("scale: tuning: RowFanout must be in 0..64, got %d", *t.RowFanout)
	}
	return nil
}

// Apply sets the tuned fields of c.
func (t Tuning) Apply(c *agent.Config) {
	set := func(dst *time.Duration, v time.Duration) {
		if v > 0 {
			*dst = v
		}
	}
	set(&c.GossipInterval, t.GossipInterval)
	set(&c.ProbeInterval, t.ProbeInterval)
	set(&c.PushPullInterval, t.PushPullInterval)
	set(&c.RejoinInterval, t.RejoinInterval)
	set(&c.HealRejoinInterval, t.HealRejoinInterval)
	if t.RetransmitMult > 0 {
		c.RetransmitMult = t.RetransmitMult
	}
	if t.GossipNodes > 0 {
		c.GossipNodes = t.GossipNodes
	}
	if t.RowFanout != nil {
		c.RowFanout = *t.RowFanout
	}
}

// String is the tuning as the scale command's flags would say it ("" for
// none).
func (t Tuning) String() string {
	var out []string
	add := func(flag string, v time.Duration) {
		if v > 0 {
			out = append(out, fmt.Sprintf("-%s %v", flag, v))
		}
	}
	add("gossip-interval", t.GossipInterval)
	add("probe-interval", t.ProbeInterval)
	add("push-pull-interval", t.PushPullInterval)
	add("rejoin-interval", t.RejoinInterval)
	add("heal-rejoin-interval", t.HealRejoinInterval)
	if t.RetransmitMult > 0 {
		out = append(out, fmt.Sprintf("-retransmit-mult %d", t.RetransmitMult))
	}
	if t.GossipNodes > 0 {
		out = append(out, fmt.Sprintf("-gossip-nodes %d", t.GossipNodes))
	}
	if t.RowFanout != nil {
		out = append(out, fmt.Sprintf("-row-fanout %d", *t.RowFanout))
	}
	return strings.Join(out, " ")
}

// HealWait is how long scenario (e) waits for the fleet to converge after
// the heal: long enough to tell a heal over the target (3 s) from one that
// does not come, short enough that a fleet which does not converge costs
// minutes of wall time, not hours, at N = 1,000.
const HealWait = 10 * time.Second

// MeasurePeriod is (b)'s default measuring time for n agents: one period
// of memberlist's periodic full-state exchange (push-pull), at least 10 s.
// memberlist starts an exchange every interval up to 32 members and every
// (1 + ⌈log2(n/32)⌉) intervals beyond. The fleet starts at one moment, so
// the exchanges come in rounds; a window shorter than the period catches a
// round or not by chance, one period counts every agent's exchange once.
func MeasurePeriod(interval time.Duration, n int) time.Duration {
	if n > 32 {
		interval *= time.Duration(1 + math.Ceil(math.Log2(float64(n)/32)))
	}
	return max(10*time.Second, interval)
}

// LossyStartWait bounds how long scenario (d) waits for its fleet on
// LossyLink to reach full membership.
const LossyStartWait = 5 * time.Minute

// LossyLink is scenario (d)'s network: 20–50 ms one way, 5% packet loss.
var LossyLink = simnet.Link{Latency: 20 * time.Millisecond, Jitter: 30 * time.Millisecond, Loss: 0.05}

// RunPart builds part p's fleet of cfg.N agents in dir and runs its
// scenarios that cfg selects, tracing each step to log with cfg.Verbose.
// Run it inside a testing/synctest bubble, with ctx made there (the scale
// test, TestScale, does): the fleet then runs on virtual time, every
// timer on schedule however slow the machine, and every time in the Row
// is virtual. It returns what it measured; the caller closes nothing, but
// must let the bubble's virtual time run out memberlist's last probes
// (SettleTime) before the bubble ends.
func RunPart(ctx context.Context, cfg RunConfig, p Part, dir string, log io.Writer) (row Row, err error) {
	if err := cfg.Validate(); err != nil {
		return row, err
	}
	if cfg.Split <= 0 {
		cfg.Split = 30 * time.Second
	}
	n := cfg.N
	if cfg.Measure <= 0 {
		cfg.Measure = MeasurePeriod(cmp.Or(cfg.Tuning.PushPullInterval, gossip.DefaultPushPullInterval), n)
	}
	row = Row{N: n, ServiceTime: cfg.ServiceTime, Tuning: cfg.Tuning.String(), Scenarios: cfg.Scenarios}
	if row.Scenarios == "" {
		row.Scenarios = "abcdef"
	}
	begin := time.Now()
	trace := func(format string, args ...any) {
		if cfg.Verbose {
			fmt.Fprintf(log, "N=%d %s +%v "+format+"\n", append([]any{n, p, time.Since(begin).Round(time.Millisecond)}, args...)...)
		}
	}
	defer func() { row.Virtual = time.Since(begin) }()
	pol := Policy()
	fc := FleetConfig{N: n, Dir: fmt.Sprintf("%s/%d-%s", dir, n, p), Policy: &pol, Trace: trace, Tune: cfg.Tuning.Apply,
		Net: simnet.Config{Seed: 1, ServiceTime: cfg.ServiceTime}}
	switch {
	case !cfg.Needs(p):
		return row, nil
	case p == Lossy:
		return row, runLossy(ctx, cfg, fc, &row, trace)
	case p == Clean:
		return row, runClean(ctx, cfg, fc, &row, trace)
	}
	return row, fmt.Errorf("scale: no part %q", p)
}

// SettleTime is how much virtual time a bubble must still let pass after
// RunPart returned: memberlist's probes that were under way at Shutdown
// wait for their ProbeTimeout, and the bubble ends only when every
// goroutine it started has.
const SettleTime = 10 * time.Second

// runClean runs (a), (e), (f), (b) and (c) on one fleet on clean links.
func runClean(ctx context.Context, cfg RunConfig, fc FleetConfig, row *Row, trace func(string, ...any)) error {
	start := time.Now()
	trace("starting %d agents", cfg.N)
	f, err := NewFleet(ctx, fc)
	if err != nil {
		return err
	}
	defer f.Close()
	row.Membership = time.Since(start)
	trace("full membership after %v", row.Membership)

	// (f) holds the breaker (a) opened.
	if cfg.runs('a') || cfg.runs('f') {
		if row.Trip, err = Trip(ctx, f, "dep-a", 5, 2*time.Second); err != nil {
			return fmt.Errorf("(a): %w", err)
		}
		row.Trip.Spread = nil
		trace("(a) %+v", row.Trip)
	}
	// (e) before (f): the heal is measured on a fleet whose membership
	// only its start changed, not while the restarts' membership gossip
	// is still spreading.
	if cfg.runs('e') {
		if row.Partition, err = Partition(ctx, f, "dep-e", 4, cfg.Split, HealWait); err != nil {
			return fmt.Errorf("(e): %w", err)
		}
		trace("(e) %+v", row.Partition)
	}
	if cfg.runs('f') {
		if row.Churn, err = Churn(ctx, f, "dep-a", 0.1, 5); err != nil {
			return fmt.Errorf("(f): %w", err)
		}
		trace("(f) %+v", row.Churn)
	}
	// (b) and (c) last, once memberlist's membership gossip of what came
	// before is done: the steady state.
	if cfg.runs('b') || cfg.runs('c') {
		if row.Quiet, err = f.WaitQuiet(ctx, QuietWait); err != nil {
			return fmt.Errorf("waiting for quiet membership: %w", err)
		}
		trace("quiet: %+v", row.Quiet)
	}
	if cfg.runs('b') {
		if row.Steady, err = Steady(ctx, f, "b", 100, 10, 0, 5*time.Second, cfg.Measure); err != nil {
			return fmt.Errorf("(b): %w", err)
		}
		trace("(b) %+v", row.Steady)
	}
	if cfg.runs('c') {
		if row.Thousand, err = Steady(ctx, f, "c", 1000, 10, 1000, 5*time.Second, 5*time.Second); err != nil {
			return fmt.Errorf("(c): %w", err)
		}
		trace("(c) %+v", row.Thousand)
	}
	return nil
}

// runLossy runs (d): a trip on a fleet on LossyLink.
func runLossy(ctx context.Context, cfg RunConfig, fc FleetConfig, row *Row, trace func(string, ...any)) error {
	fc.Net.Seed, fc.Net.Link = 2, LossyLink
	start := time.Now()
	sctx, cancel := context.WithTimeout(ctx, LossyStartWait)
	lf, err := NewFleet(sctx, fc)
	cancel()
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		// Reported, not fatal: the table says so.
		row.LossyNotStarted = err.Error()
		trace("(d) not measured: %v", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("(d): %w", err)
	}
	defer lf.Close()
	row.LossyMembership = time.Since(start)
	if row.Lossy, err = Trip(ctx, lf, "dep-d", 5, 2*time.Second); err != nil {
		return fmt.Errorf("(d): %w", err)
	}
	row.Lossy.Spread = nil
	trace("(d) %+v", row.Lossy)
	return nil
}
