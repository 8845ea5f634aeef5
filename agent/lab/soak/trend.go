package soak

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Resources is one sample of a process.
type Resources struct {
	RSS     int64 // bytes, /proc/PID/status VmRSS
	FDs     int64 // open file descriptors, /proc/PID/fd
	Threads int64 // /proc/PID/status Threads
	// Goroutines from the process's own metrics (go_goroutines); -1 when
	// unknown (the sample is then not judged on it).
	Goroutines int64
}

// Tolerance is how much a resource may grow and still count as flat: the
// last third's median at most the first third's × (1 + Ratio) + Abs.
type Tolerance struct {
	Ratio float64
	Abs   int64
}

// DefaultTolerances are the soak's: RSS +20% + 8 MiB, goroutines +10% +
// 10, open files +10% + 8. Threads are reported, not judged (a Go runtime
// keeps threads it once needed).
var DefaultTolerances = map[string]Tolerance{
	"rss":        {Ratio: 0.20, Abs: 8 << 20},
	"goroutines": {Ratio: 0.10, Abs: 10},
	"fds":        {Ratio: 0.10, Abs: 8},
}

// TrendChecker judges whether the resources of each long-lived process
// stay flat. Each process incarnation (a restart starts a new one) is a
// series; its first Warmup (or first fifth, if longer) is left out, and
// what remains is judged only if it spans at least MinSpan with at least
// 9 samples: split in thirds by time order, the last third's median of
// each judged resource must be within its tolerance of the first third's.
// Medians of thirds ignore a single spike (a GC cycle, a burst of
// sessions) and see a steady climb.
type TrendChecker struct {
	Warmup, MinSpan time.Duration
	// Tolerances by resource name (rss, goroutines, fds): optional,
	// default DefaultTolerances.
	Tolerances map[string]Tolerance

	Checks int
	series map[string]*series
}

type series struct {
	process     string
	incarnation int
	at          []time.Time
	res         []Resources
}

// Sample records one sample of incarnation (0, 1, …) of process.
func (c *TrendChecker) Sample(process string, incarnation int, at time.Time, r Resources) {
	c.Checks++
	if c.series == nil {
		c.series = map[string]*series{}
	}
	key := fmt.Sprintf("%s#%d", process, incarnation)
	s := c.series[key]
	if s == nil {
		s = &series{process: process, incarnation: incarnation}
		c.series[key] = s
	}
	s.at = append(s.at, at)
	s.res = append(s.res, r)
}

// Trend is the verdict on one series.
type Trend struct {
	Process     string
	Incarnation int
	Samples     int
	Span        time.Duration // of the judged part
	Judged      bool          // false: too short after the warm-up
	// First and Last are the medians of the first and last thirds, by
	// resource name (rss, goroutines, fds, threads); absent when unknown.
	First, Last map[string]int64
	// Grew names the judged resources that were not flat.
	Grew []string
}

// Judge returns the verdict on every series, by process and incarnation,
// and a violation per series that was not flat.
func (c *TrendChecker) Judge(now time.Time) ([]Trend, []Violation) {
	tol := c.Tolerances
	if tol == nil {
		tol = DefaultTolerances
	}
	keys := make([]string, 0, len(c.series))
	for k := range c.series {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := c.series[keys[i]], c.series[keys[j]]
		if a.process != b.process {
			return a.process < b.process
		}
		return a.incarnation < b.incarnation
	})
	var trends []Trend
	var viols []Violation
	for _, k := range keys {
		s := c.series[k]
		t := Trend{Process: s.process, Incarnation: s.incarnation, Samples: len(s.at)}
		if len(s.at) == 0 {
			trends = append(trends, t)
			continue
		}
		skip := max(c.Warmup, s.at[len(s.at)-1].Sub(s.at[0])/5)
		start := 0
		for start < len(s.at) && s.at[start].Sub(s.at[0]) < skip {
			start++
		}
		at, res := s.at[start:], s.res[start:]
		if len(at) > 0 {
			t.Span = at[len(at)-1].Sub(at[0])
		}
		if len(at) < 9 || t.Span < c.MinSpan {
			trends = append(trends, t)
			continue
		}
		t.Judged = true
		n := len(res) / 3
		first, last := res[:n], res[len(res)-n:]
		t.First, t.Last = map[string]int64{}, map[string]int64{}
		for _, name := range []string{"rss", "goroutines", "fds", "threads"} {
			m1, ok1 := median(first, name)
			m3, ok3 := median(last, name)
			if !ok1 || !ok3 {
				continue
			}
			t.First[name], t.Last[name] = m1, m3
			tl, judged := tol[name]
			if !judged {
				continue
			}
			if float64(m3) > float64(m1)*(1+tl.Ratio)+float64(tl.Abs) {
				t.Grew = append(t.Grew, name)
				viols = append(viols, Violation{At: now, Check: "resources-flat", Subject: k,
					Detail: fmt.Sprintf("%s grew from a median of %s (first third) to %s (last third) over %v; tolerance +%.0f%% + %s",
						name, fmtResource(name, m1), fmtResource(name, m3), t.Span.Round(time.Second), tl.Ratio*100, fmtResource(name, tl.Abs))})
			}
		}
		trends = append(trends, t)
	}
	return trends, viols
}

// median returns the median of resource name over rs (false when no
// sample knows it).
func median(rs []Resources, name string) (int64, bool) {
	var v []int64
	for _, r := range rs {
		x := int64(-1)
		switch name {
		case "rss":
			x = r.RSS
		case "goroutines":
			x = r.Goroutines
		case "fds":
			x = r.FDs
		case "threads":
			x = r.Threads
		}
		if x >= 0 {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return 0, false
	}
	slices.Sort(v)
	return v[len(v)/2], true
}

func fmtResource(name string, v int64) string {
	if name == "rss" {
		return fmt.Sprintf("%.1f MiB", float64(v)/(1<<20))
	}
	return fmt.Sprint(v)
}

// CSV returns every sample, one line each: process, incarnation, seconds
// since start, RSS bytes, open files, threads, goroutines (-1: unknown).
func (c *TrendChecker) CSV(start time.Time) string {
	var b strings.Builder
	b.WriteString("process,incarnation,seconds,rss_bytes,open_files,threads,goroutines\n")
	keys := make([]string, 0, len(c.series))
	for k := range c.series {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s := c.series[k]
		for i, at := range s.at {
			r := s.res[i]
			fmt.Fprintf(&b, "%q,%d,%.1f,%d,%d,%d,%d\n", s.process, s.incarnation, at.Sub(start).Seconds(), r.RSS, r.FDs, r.Threads, r.Goroutines)
		}
	}
	return b.String()
}
