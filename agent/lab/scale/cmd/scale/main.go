// Command scale runs the fleet scenarios of agent/lab/scale in virtual
// time for each size given and prints agent/README.md's "Scale" table
// (markdown) with the machine it ran on, the breakdown of each agent's
// bytes, the fit of each per-agent measure against N, and a plot of them.
// `make scale` runs it for N = 10, 50, 200, 500 and 1,000.
//
// A synctest bubble needs a test to host it, so the command builds the
// scale package's test binary (or takes one, -test-binary) and runs its
// TestScale once per fleet of a row, each in a process of its own, one
// at a time: the processes' wall time, CPU time and peak RSS are the
// row's last column.
//
//	cd agent/lab && go run ./scale/cmd/scale -sizes 10,50 -plot /tmp/scale.png
package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fusebox-dev/fusebox/agent/lab/scale"
)

type options struct {
	sizes        []size
	serviceTimes []time.Duration
	base         scale.RunConfig
	testBinary   string
	plot, json   string
	rows         []string // -rows: print these runs' rows instead of running
	gogc         string
	memLimit     string
}

// size is a row's fleet size and, when it has its own, its scenarios.
type size struct {
	n         int
	scenarios string
}

func main() { os.Exit(run()) }

func run() int {
	var o options
	var sizes, services string
	flag.StringVar(&sizes, "sizes", "10,50,200,500,1000", "fleet sizes, comma-separated: a row each; N:LETTERS runs size N with those scenarios only")
	flag.StringVar(&services, "service-time", "0", "host CPU per packet received (simnet's ServiceTime), comma-separated durations: a row each per size (0: infinitely fast hosts)")
	flag.DurationVar(&o.base.Split, "split", 30*time.Second, "how long scenario (e) keeps the fleet split")
	flag.DurationVar(&o.base.Measure, "measure", 0, "how long scenario (b) measures the steady state (0: one period of memberlist's push-pull at N, at least 10 s)")
	flag.BoolVar(&o.base.Verbose, "v", false, "print each step to stderr")
	flag.StringVar(&o.base.Scenarios, "scenarios", "abcdef", "which scenarios to run, by letter (the others' columns print as –)")
	flag.StringVar(&o.testBinary, "test-binary", "", "the scale package's test binary (default: go test -c into a temp dir)")
	flag.StringVar(&o.plot, "plot", "", "write the plot of the per-agent measures against N to this PNG file")
	flag.StringVar(&o.json, "json", "", "write the rows to this file as JSON")
	rows := flag.String("rows", "", "print (and plot) the rows of earlier runs' -json files, comma-separated, by N, instead of running")
	flag.StringVar(&o.gogc, "gogc", "200", "GOGC of each run's process")
	flag.StringVar(&o.memLimit, "mem-limit", "16GiB", "GOMEMLIMIT of each run's process (a soft limit: the collector works harder near it)")
	// Tuning experiments: the agents' gossip settings (0 keeps the default).
	t := &o.base.Tuning
	flag.DurationVar(&t.GossipInterval, "gossip-interval", 0, "the agents' --gossip-interval (0: the default)")
	flag.DurationVar(&t.ProbeInterval, "probe-interval", 0, "the agents' --probe-interval (0: the default)")
	flag.DurationVar(&t.PushPullInterval, "push-pull-interval", 0, "the agents' --push-pull-interval (0: the default)")
	flag.DurationVar(&t.RejoinInterval, "rejoin-interval", 0, "the agents' --rejoin-interval (0: the default)")
	flag.DurationVar(&t.HealRejoinInterval, "heal-rejoin-interval", 0, "the agents' --heal-rejoin-interval (0: the default)")
	flag.IntVar(&t.RetransmitMult, "retransmit-mult", 0, "the agents' --retransmit-mult (0: the default)")
	flag.IntVar(&t.GossipNodes, "gossip-nodes", 0, "the agents' --gossip-nodes (0: the default)")
	rowFanout := flag.Int("row-fanout", -1, "the agents' --row-fanout (-1: the default)")
	flag.Parse()
	if *rowFanout >= 0 {
		t.RowFanout = rowFanout
	}
	if *rows != "" {
		o.rows = strings.Split(*rows, ",")
	}
	var errs []string
	for _, s := range strings.Split(sizes, ",") {
		ns, letters, _ := strings.Cut(strings.TrimSpace(s), ":")
		n, err := strconv.Atoi(ns)
		if err != nil || n < 2 {
			errs = append(errs, fmt.Sprintf("-sizes: %q is not a fleet size (an integer >= 2)", s))
			continue
		}
		if strings.Trim(letters, "abcdef") != "" {
			errs = append(errs, fmt.Sprintf("-sizes: %q: want N:LETTERS with letters of abcdef", s))
			continue
		}
		o.sizes = append(o.sizes, size{n, letters})
	}
	for _, s := range strings.Split(services, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil || d < 0 {
			errs = append(errs, fmt.Sprintf("-service-time: %q is not a duration >= 0", s))
			continue
		}
		o.serviceTimes = append(o.serviceTimes, d)
	}
	probe := o.base
	probe.N = 2
	if err := probe.Validate(); err != nil {
		errs = append(errs, err.Error())
	}
	if len(errs) > 0 {
		fmt.Fprintln(os.Stderr, "scale: "+strings.Join(errs, "; "))
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := runAll(ctx, o, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// runAll runs every row and prints the tables as the rows come.
func runAll(ctx context.Context, o options, out, log io.Writer) error {
	dir, err := os.MkdirTemp("", "fusebox-scale")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if len(o.rows) > 0 {
		var rows []scale.Row
		for _, file := range o.rows {
			b, err := os.ReadFile(file)
			if err != nil {
				return fmt.Errorf("scale: -rows: %w", err)
			}
			var rs []scale.Row
			if err := json.Unmarshal(b, &rs); err != nil {
				return fmt.Errorf("scale: -rows: %s: %w", file, err)
			}
			rows = append(rows, rs...)
		}
		slices.SortStableFunc(rows, func(a, b scale.Row) int {
			return cmp.Or(cmp.Compare(a.N, b.N), cmp.Compare(a.ServiceTime, b.ServiceTime))
		})
		fmt.Fprintf(out, "Rows of %s.\n\n%s\n", strings.Join(o.rows, ", "), scale.Header)
		for _, r := range rows {
			fmt.Fprintln(out, r.Markdown())
		}
		return report(o, rows, out)
	}
	if o.testBinary == "" {
		o.testBinary = filepath.Join(dir, "scale.test")
		build := exec.CommandContext(ctx, "go", "test", "-c", "-o", o.testBinary, "github.com/fusebox-dev/fusebox/agent/lab/scale")
		build.Stdout, build.Stderr = log, log
		if err := build.Run(); err != nil {
			return fmt.Errorf("scale: building the test binary: %w", err)
		}
	}
	fmt.Fprintf(out, "Command: %s\n", strings.Join(os.Args, " "))
	fmt.Fprintf(out, "Machine: %s; load average at start %s; %s.\n\n", scale.Machine(), scale.LoadAvg(), time.Now().Format("2006-01-02"))
	fmt.Fprintln(out, scale.Header)
	var rows []scale.Row
	for _, sz := range o.sizes {
		for _, svc := range o.serviceTimes {
			cfg := o.base
			cfg.N, cfg.ServiceTime = sz.n, svc
			if sz.scenarios != "" {
				cfg.Scenarios = sz.scenarios
			}
			r, err := runRow(ctx, o, cfg, dir, log)
			if err != nil {
				return fmt.Errorf("scale: N=%d, service time %v: %w", sz.n, svc, err)
			}
			fmt.Fprintln(out, r.Markdown())
			rows = append(rows, r)
			if err := writeJSON(o.json, rows); err != nil { // each row as it comes: a later one may fail
				return err
			}
		}
	}
	if err := report(o, rows, out); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nLoad average at the end: %s.\n", scale.LoadAvg())
	return nil
}

// report prints the breakdown and the fits of the rows and writes the
// JSON and the plot asked for.
func report(o options, rows []scale.Row, out io.Writer) error {
	fmt.Fprintf(out, "\nWhere each agent's bytes went in (b):\n\n%s\n", scale.BreakdownHeader)
	for _, r := range rows {
		fmt.Fprintln(out, r.BreakdownMarkdown())
	}
	if fits := scale.Fits(rows); len(fits) > 0 {
		fmt.Fprintln(out, "\nLeast-squares lines against N:")
		for _, f := range fits {
			fmt.Fprintln(out, "- "+f.String())
		}
	}
	if o.plot != "" {
		if err := scale.Plot(rows, o.plot); err != nil {
			// One size alone has no law of growth to draw: say so and go on.
			fmt.Fprintf(out, "No plot: %v\n", err)
			return nil
		}
		fmt.Fprintf(out, "Plot: %s\n", o.plot)
	}
	return nil
}

// writeJSON writes the rows to file ("": nothing).
func writeJSON(file string, rows []scale.Row) error {
	if file == "" {
		return nil
	}
	b, err := json.MarshalIndent(rows, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(file, b, 0o644); err != nil {
		return fmt.Errorf("scale: -json: %w", err)
	}
	return nil
}

// runRow runs the row's parts, each in a process of its own, and merges
// them.
func runRow(ctx context.Context, o options, cfg scale.RunConfig, dir string, log io.Writer) (scale.Row, error) {
	var row scale.Row
	first := true
	for _, p := range scale.Parts {
		if !cfg.Needs(p) {
			continue
		}
		r, err := runPart(ctx, o, cfg, p, dir, log)
		if err != nil {
			return row, fmt.Errorf("%s fleet: %w", p, err)
		}
		if first {
			row, first = r, false
		} else {
			row.Merge(r)
		}
	}
	return row, nil
}

// runPart runs TestScale for one part in a process and reads its Row,
// with the process's wall time, CPU time and peak RSS.
func runPart(ctx context.Context, o options, cfg scale.RunConfig, p scale.Part, dir string, log io.Writer) (scale.Row, error) {
	conf, err := json.Marshal(cfg)
	if err != nil {
		return scale.Row{}, err
	}
	outFile := filepath.Join(dir, fmt.Sprintf("row-%d-%s.json", cfg.N, p))
	args := []string{"-test.run", "^TestScale$", "-test.count", "1", "-test.timeout", "0",
		"-scale.config", string(conf), "-scale.part", string(p), "-scale.out", outFile}
	if cfg.Verbose {
		args = append(args, "-test.v")
	}
	cmd := exec.CommandContext(ctx, o.testBinary, args...)
	cmd.Env = append(os.Environ(), "GOGC="+o.gogc, "GOMEMLIMIT="+o.memLimit)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if cfg.Verbose {
		cmd.Stdout, cmd.Stderr = log, log
	}
	start := time.Now()
	err = cmd.Run()
	wall := time.Since(start)
	if err != nil {
		return scale.Row{}, fmt.Errorf("%w\n%s", err, tail(buf.Bytes(), 40))
	}
	b, err := os.ReadFile(outFile)
	if err != nil {
		return scale.Row{}, fmt.Errorf("the run wrote no row: %w\n%s", err, tail(buf.Bytes(), 40))
	}
	var r scale.Row
	if err := json.Unmarshal(b, &r); err != nil {
		return scale.Row{}, fmt.Errorf("the run's row: %w", err)
	}
	r.Wall = wall
	r.CPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.PeakRSS = uint64(ru.Maxrss) * 1024 // kilobytes on Linux
	}
	return r, nil
}

// tail returns the last n lines of b.
func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
