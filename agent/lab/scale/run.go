package scale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/lab/simnet"
)

// RunConfig configures Run.
type RunConfig struct {
	// Sizes are the fleet sizes, one table row each (required).
	Sizes []int
	// Split is how long scenario (e) keeps the fleet split (optional,
	// default 30 s).
	Split time.Duration
	// Measure is how long (b) and (c) measure the steady state (optional,
	// default 10 s).
	Measure time.Duration
	// Verbose prints each step to the log writer.
	Verbose bool
	// Tune changes every agent's configuration before it starts (optional):
	// the tuning experiments of agent/README.md's "Scale" section run the
	// scenarios with other gossip timings through it.
	Tune func(*agent.Config)
	// Scenarios lists the scenarios to run, by letter (optional, default
	// "abcdef": all). Columns of skipped scenarios are printed as "–".
	Scenarios string
	// Dilate lists the dilation factors K to run each size at, one row
	// each (optional, default K = 1 for every size): an entry with N = 0
	// applies to every size that has no entry of its own.
	Dilate []Dilation
}

// Dilation is a dilation factor K for fleets of N agents (N = 0: every
// size without one of its own); see FleetConfig.Dilate.
type Dilation struct {
	N int
	K float64
}

// ParseDilations parses a comma-separated list of K or N:K ("1,4" runs
// every size at K = 1 and K = 4; "200:2,500:4" runs 200 at 2, 500 at 4
// and the other sizes at 1).
func ParseDilations(s string) ([]Dilation, error) {
	var out []Dilation
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		var d Dilation
		ks := f
		if n, k, ok := strings.Cut(f, ":"); ok {
			v, err := strconv.Atoi(strings.TrimSpace(n))
			if err != nil || v < 1 {
				return nil, fmt.Errorf("scale: dilation %q: %q is not a fleet size", f, n)
			}
			d.N, ks = v, k
		}
		k, err := strconv.ParseFloat(strings.TrimSpace(ks), 64)
		if err != nil || !(k >= 1 && k <= 1000) {
			return nil, fmt.Errorf("scale: dilation %q: K must be a number in [1, 1000]", f)
		}
		d.K = k
		out = append(out, d)
	}
	return out, nil
}

// dilations returns the factors size n runs at.
func (c RunConfig) dilations(n int) []float64 {
	var own, all []float64
	for _, d := range c.Dilate {
		switch d.N {
		case n:
			own = append(own, d.K)
		case 0:
			all = append(all, d.K)
		}
	}
	switch {
	case len(own) > 0:
		return own
	case len(all) > 0:
		return all
	}
	return []float64{1}
}

// runs reports whether scenario letter is selected.
func (c RunConfig) runs(letter byte) bool {
	return c.Scenarios == "" || strings.IndexByte(c.Scenarios, letter) >= 0
}

// HealWait is how long scenario (e) waits for the fleet to converge by
// itself after the heal (agents reconcile membership every
// --rejoin-interval) before it makes every agent join one of the other half.
const HealWait = time.Minute

// LossyStartWait bounds how long scenario (d) waits for its fleet on
// LossyLink to reach full membership.
const LossyStartWait = 5 * time.Minute

// LossyLink is scenario (d)'s network: 20–50 ms one way, 5% packet loss.
var LossyLink = simnet.Link{Latency: 20 * time.Millisecond, Jitter: 30 * time.Millisecond, Loss: 0.05}

// Row is one line of the table: every measure at one fleet size and
// dilation. Times are protocol time (measured time / K).
type Row struct {
	N         int
	K         float64
	Trip      TripResult
	Lossy     TripResult
	Steady    SteadyResult
	Thousand  SteadyResult
	Partition PartitionResult
	Churn     ChurnResult
	// CPU is the process's CPU time per wall-clock second over the row
	// (cores busy); Wall is how long the row took.
	CPU  float64
	Wall time.Duration
	// Lag is how late a timer of the run fired (p99, protocol time: the
	// lateness divided by K): the scheduling delay every timer of the
	// agents suffered too. A lag near the 100 ms tick means the machine,
	// not the protocol, set the pace.
	Lag time.Duration
	// LossyNotStarted says why (d) was not measured: its fleet did not
	// reach full membership within LossyStartWait ("": it was measured).
	LossyNotStarted string
	// ran is RunConfig.Scenarios: the columns of the others are "–".
	ran string
}

// Run runs every scenario at every size, printing the table to out (a row
// as soon as it is measured) and progress to log.
func Run(ctx context.Context, cfg RunConfig, out, log io.Writer) error {
	if len(cfg.Sizes) == 0 {
		return errors.New("scale: no sizes")
	}
	if cfg.Split <= 0 {
		cfg.Split = 30 * time.Second
	}
	if cfg.Measure <= 0 {
		cfg.Measure = 10 * time.Second
	}
	dir, err := os.MkdirTemp("", "fusebox-scale")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fmt.Fprintf(out, "Machine: %s; Go %s, GOMAXPROCS %d; load average at start %s.\n\n", machine(), runtime.Version(), runtime.GOMAXPROCS(0), loadavg())
	fmt.Fprintln(out, Header)
	for _, n := range cfg.Sizes {
		for _, k := range cfg.dilations(n) {
			r, err := RunSize(ctx, n, k, cfg, dir, log)
			if err != nil {
				return fmt.Errorf("scale: N=%d K=%v: %w", n, k, err)
			}
			fmt.Fprintln(out, r.Markdown())
		}
	}
	fmt.Fprintf(out, "\nLoad average at the end: %s.\n", loadavg())
	return nil
}

// RunSize measures one row, dilated k times: a fleet on a clean network
// for (a), (f), (e), (b) and (c), then a fleet on LossyLink for (d).
func RunSize(ctx context.Context, n int, k float64, cfg RunConfig, dir string, log io.Writer) (row Row, err error) {
	row = Row{N: n, K: k}
	trace := func(format string, args ...any) {
		if cfg.Verbose {
			fmt.Fprintf(log, "N=%d K=%v %s "+format+"\n", append([]any{n, k, time.Now().Format("15:04:05.000")}, args...)...)
		}
	}
	start, cpu0 := time.Now(), cpuTime()
	lag := startLagMeter(dilate(lagPeriod, k))
	defer func() {
		row.Wall = time.Since(start)
		row.CPU = (cpuTime() - cpu0).Seconds() / row.Wall.Seconds()
		row.Lag = time.Duration(float64(lag.stop()) / k)
	}()
	p := Policy()
	fc := FleetConfig{N: n, Dir: fmt.Sprintf("%s/%d-%v-clean", dir, n, k), Policy: &p, Net: simnet.Config{Seed: 1}, Trace: trace, Tune: cfg.Tune, Dilate: k}
	row.ran = cfg.Scenarios
	if cfg.runs('a') || cfg.runs('b') || cfg.runs('c') || cfg.runs('e') || cfg.runs('f') {
		trace("starting %d agents", n)
		f, err := NewFleet(ctx, fc)
		if err != nil {
			return row, err
		}
		defer f.Close()
		trace("full membership after %v (protocol time)", f.Protocol(time.Since(start)))

		// (f) holds the breaker (a) opened.
		if cfg.runs('a') || cfg.runs('f') {
			if row.Trip, err = Trip(ctx, f, "dep-a", 5, 2*time.Second); err != nil {
				return row, fmt.Errorf("(a): %w", err)
			}
			trace("(a) %+v", short(row.Trip))
		}
		if cfg.runs('f') {
			if row.Churn, err = Churn(ctx, f, "dep-a", 0.1, 5); err != nil {
				return row, fmt.Errorf("(f): %w", err)
			}
			trace("(f) %+v", row.Churn)
		}
		if cfg.runs('e') {
			if row.Partition, err = Partition(ctx, f, "dep-e", 4, cfg.Split, HealWait); err != nil {
				return row, fmt.Errorf("(e): %w", err)
			}
			trace("(e) %+v", row.Partition)
		}
		// (b) and (c) last: their backlog of rows would slow the trips down.
		if cfg.runs('b') {
			if row.Steady, err = Steady(ctx, f, "b", 100, 10, 0, 5*time.Second, cfg.Measure); err != nil {
				return row, fmt.Errorf("(b): %w", err)
			}
			trace("(b) %+v", row.Steady)
		}
		if cfg.runs('c') {
			if row.Thousand, err = Steady(ctx, f, "c", 1000, 10, 1000, 5*time.Second, cfg.Measure/2); err != nil {
				return row, fmt.Errorf("(c): %w", err)
			}
			trace("(c) %+v", row.Thousand)
		}
		f.Close()
	}
	if !cfg.runs('d') {
		return row, nil
	}

	fc.Dir, fc.Net = fmt.Sprintf("%s/%d-%v-lossy", dir, n, k), simnet.Config{Seed: 2, Link: LossyLink}
	sctx, cancel := context.WithTimeout(ctx, dilate(LossyStartWait, k))
	lf, err := NewFleet(sctx, fc)
	cancel()
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		// Reported, not fatal: on too few cores a large fleet on lossy
		// links may not reach full membership in any time worth waiting.
		row.LossyNotStarted = err.Error()
		trace("(d) not measured: %v", err)
		return row, nil
	}
	if err != nil {
		return row, fmt.Errorf("(d): %w", err)
	}
	defer lf.Close()
	if row.Lossy, err = Trip(ctx, lf, "dep-d", 5, 2*time.Second); err != nil {
		return row, fmt.Errorf("(d): %w", err)
	}
	trace("(d) %+v", short(row.Lossy))
	lf.Close()
	return row, nil
}

func short(r TripResult) TripResult {
	r.Spread = nil
	return r
}

// Header is the table's header (markdown).
const Header = "| N | K | (a) trip p50 / p99 / max | (a) proposers | (a) transition cost | (d) 5% loss, 20–50 ms: p50 / p99 / max | (b) per agent: KB/s, msgs/s | (b) memberlist's share of packet bytes | (b) deps every agent knows | (b) push-pull | (b) heap per agent | (c) push-pull | (c) heap per agent | (e) healthy half opened | (e) converged after heal | (f) restarted / allowed once ready | CPU cores busy, wall, timer lag p99 |\n" +
	"| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"

// Markdown formats the row.
func (r Row) Markdown() string {
	trip := func(t TripResult) string {
		return fmt.Sprintf("%s / %s / %s", ms(t.P50), ms(t.P99), ms(t.Max))
	}
	heal := fmt.Sprintf("not within %v by itself; %.1f s after every agent joined one of the other half", HealWait, r.Partition.Converge.Seconds())
	if r.Partition.NotConverged != "" {
		heal = fmt.Sprintf("not within %v by itself, nor %v after every agent joined one of the other half", HealWait, JoinedConvergeWait)
	}
	if r.Partition.SelfHealed {
		heal = fmt.Sprintf("%.1f s by itself", r.Partition.Converge.Seconds())
	}
	lossy := trip(r.Lossy)
	if r.LossyNotStarted != "" {
		lossy = fmt.Sprintf("not measured: no full membership within %v", LossyStartWait)
	}
	cols := []string{
		fmt.Sprint(r.N),
		fmt.Sprint(r.K),
		trip(r.Trip),
		fmt.Sprint(r.Trip.Proposers),
		fmt.Sprintf("%d packets, %.1f KB", max(r.Trip.Packets, 0), float64(max(r.Trip.Bytes, 0))/1000),
		lossy,
		fmt.Sprintf("%.1f, %.0f", r.Steady.BytesPerAgent/1000, r.Steady.MsgsPerAgent),
		fmt.Sprintf("%.0f%%", 100*r.Steady.OwnShare()),
		fmt.Sprintf("%d of %d", r.Steady.Known, r.Steady.Deps),
		kb(r.Steady.PushPull, r.Steady.PushPullErr),
		mb(r.Steady.HeapPerAgent),
		kb(r.Thousand.PushPull, r.Thousand.PushPullErr),
		mb(r.Thousand.HeapPerAgent),
		fmt.Sprintf("%d of %d", r.Partition.HealthySideEverOpen, r.N-r.N/2),
		heal,
		fmt.Sprintf("%d / %d", r.Churn.Restarted, r.Churn.HealthyAfterReady),
		fmt.Sprintf("%.2f, %s, %s", r.CPU, r.Wall.Round(time.Second), ms(r.Lag)),
	}
	if r.ran != "" {
		// Columns by scenario letter; N, K and the last column are always set.
		letters := "--aaadbbbbbcceef-"
		for i, l := range letters {
			if l != '-' && !strings.ContainsRune(r.ran, l) {
				cols[i] = "–"
			}
		}
	}
	return "| " + strings.Join(cols, " | ") + " |"
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }
func mb(b uint64) string        { return fmt.Sprintf("%.2f MB", float64(b)/1e6) }
func kb(b int, err error) string {
	if err != nil {
		return "over the frame limit: " + err.Error()
	}
	return fmt.Sprintf("%.1f KB", float64(b)/1000)
}

// cpuTime returns the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// machine describes the CPU: model and count.
func machine() string {
	model := runtime.GOARCH
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%d × %s, %s", runtime.NumCPU(), model, runtime.GOOS)
}

// lagPeriod is how often (protocol time) the lag meter's timer fires.
const lagPeriod = 10 * time.Millisecond

// lagMeter measures how late a periodic timer fires: the scheduling delay
// of a goroutine woken by a timer, which every agent's tick, gossip round
// and probe suffers alike.
type lagMeter struct {
	done chan struct{}
	out  chan time.Duration
}

func startLagMeter(period time.Duration) *lagMeter {
	m := &lagMeter{done: make(chan struct{}), out: make(chan time.Duration, 1)}
	go func() {
		var lags []time.Duration
		t := time.NewTimer(period)
		defer t.Stop()
		due := time.Now().Add(period)
		for {
			select {
			case <-m.done:
				m.out <- percentile(lags, 0.99)
				return
			case <-t.C:
				lags = append(lags, max(0, time.Since(due)))
				due = time.Now().Add(period)
				t.Reset(period)
			}
		}
	}()
	return m
}

// stop ends the meter and returns the p99 lateness.
func (m *lagMeter) stop() time.Duration {
	close(m.done)
	return <-m.out
}
