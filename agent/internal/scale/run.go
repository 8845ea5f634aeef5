package scale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/protocol/gossip/simnet"
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

// Row is one line of the table: every measure at one fleet size.
type Row struct {
	N         int
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
		r, err := RunSize(ctx, n, cfg, dir, log)
		if err != nil {
			return fmt.Errorf("scale: N=%d: %w", n, err)
		}
		fmt.Fprintln(out, r.Markdown())
	}
	fmt.Fprintf(out, "\nLoad average at the end: %s.\n", loadavg())
	return nil
}

// RunSize measures one row: a fleet on a clean network for (b), (c), (a),
// (f) and (e), then a fleet on LossyLink for (d).
func RunSize(ctx context.Context, n int, cfg RunConfig, dir string, log io.Writer) (Row, error) {
	row := Row{N: n}
	trace := func(format string, args ...any) {
		if cfg.Verbose {
			fmt.Fprintf(log, "N=%d %s "+format+"\n", append([]any{n, time.Now().Format("15:04:05.000")}, args...)...)
		}
	}
	start, cpu0 := time.Now(), cpuTime()
	p := Policy()
	fc := FleetConfig{N: n, Dir: fmt.Sprintf("%s/%d-clean", dir, n), Policy: &p, Net: simnet.Config{Seed: 1}, Trace: trace, Tune: cfg.Tune}
	row.ran = cfg.Scenarios
	if cfg.runs('a') || cfg.runs('b') || cfg.runs('c') || cfg.runs('e') || cfg.runs('f') {
		trace("starting %d agents", n)
		f, err := NewFleet(ctx, fc)
		if err != nil {
			return row, err
		}
		defer f.Close()
		trace("full membership after %v", time.Since(start))

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
		row.Wall = time.Since(start)
		row.CPU = (cpuTime() - cpu0).Seconds() / row.Wall.Seconds()
		return row, nil
	}

	fc.Dir, fc.Net = fmt.Sprintf("%s/%d-lossy", dir, n), simnet.Config{Seed: 2, Link: LossyLink}
	sctx, cancel := context.WithTimeout(ctx, LossyStartWait)
	lf, err := NewFleet(sctx, fc)
	cancel()
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		// Reported, not fatal: on too few cores a large fleet on lossy
		// links may not reach full membership in any time worth waiting.
		row.LossyNotStarted = err.Error()
		trace("(d) not measured: %v", err)
		row.Wall = time.Since(start)
		row.CPU = (cpuTime() - cpu0).Seconds() / row.Wall.Seconds()
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
	row.Wall = time.Since(start)
	row.CPU = (cpuTime() - cpu0).Seconds() / row.Wall.Seconds()
	return row, nil
}

func short(r TripResult) TripResult {
	r.Spread = nil
	return r
}

// Header is the table's header (markdown).
const Header = "| N | (a) trip p50 / p99 / max | (a) proposers | (a) transition cost | (d) 5% loss, 20–50 ms: p50 / p99 / max | (b) per agent: KB/s, msgs/s | (b) deps every agent knows | (b) push-pull | (b) heap per agent | (c) push-pull | (c) heap per agent | (e) healthy half opened | (e) converged after heal | (f) restarted / allowed once ready | CPU cores busy, wall |\n" +
	"| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"

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
		trip(r.Trip),
		fmt.Sprint(r.Trip.Proposers),
		fmt.Sprintf("%d packets, %.1f KB", max(r.Trip.Packets, 0), float64(max(r.Trip.Bytes, 0))/1000),
		lossy,
		fmt.Sprintf("%.1f, %.0f", r.Steady.BytesPerAgent/1000, r.Steady.MsgsPerAgent),
		fmt.Sprintf("%d of %d", r.Steady.Known, r.Steady.Deps),
		kb(r.Steady.PushPull, r.Steady.PushPullErr),
		mb(r.Steady.HeapPerAgent),
		kb(r.Thousand.PushPull, r.Thousand.PushPullErr),
		mb(r.Thousand.HeapPerAgent),
		fmt.Sprintf("%d of %d", r.Partition.HealthySideEverOpen, r.N-r.N/2),
		heal,
		fmt.Sprintf("%d / %d", r.Churn.Restarted, r.Churn.HealthyAfterReady),
		fmt.Sprintf("%.2f, %s", r.CPU, r.Wall.Round(time.Second)),
	}
	if r.ran != "" {
		// Columns by scenario letter; N and the last column are always set.
		letters := "-aaadbbbbcceef-"
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
