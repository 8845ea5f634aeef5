package demo

import (
	"fmt"
	"io"
	"maps"
	"math"
	"os/exec"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Summary is what the demo did: traffic per dependency and per phase,
// breaker transitions, probes.
type Summary struct {
	// Elapsed is the time from the first phase's start to the end of the
	// traffic (or to now, while it runs).
	Elapsed       time.Duration
	PhaseDuration time.Duration
	Dependencies  []DependencySummary
	Phases        []PhaseSummary
	Transitions   []Transition
	// AgentFallbacks counts the synchronous questions to an agent that the
	// clients decided locally (by call: acquire_retry, acquire_probe, check).
	AgentFallbacks map[string]uint64
}

// DependencySummary is the whole run's traffic to one dependency.
type DependencySummary struct {
	Name string
	Counts
	// Probes is what the dependency saw of half-open probes.
	ProbeStats ProbeStats
	// Transitions counts transitions by agent.
	Transitions map[string]int
}

// PhaseSummary is one phase's traffic, per dependency.
type PhaseSummary struct {
	PhaseWindow
	// Complete is false for the phase the demo stopped in.
	Complete bool
	Counts   map[string]Counts
	Probes   map[string]ProbeStats
}

// Summary returns what the demo did so far.
func (d *Demo) Summary() Summary {
	d.mu.Lock()
	end := d.end
	marks := slices.Clone(d.marks)
	s := Summary{PhaseDuration: d.cfg.PhaseDuration, Transitions: slices.Clone(d.transitions)}
	d.mu.Unlock()
	if end.IsZero() {
		end = time.Now()
	}
	s.Elapsed = end.Sub(d.sched.start)
	now := make([]Counts, len(d.ctrs))
	for i, c := range d.ctrs {
		now[i] = c.load()
	}
	for i, dep := range d.deps {
		ds := DependencySummary{Name: dep.name, Counts: now[i], ProbeStats: dep.probeStats(), Transitions: map[string]int{}}
		for _, t := range s.Transitions {
			if t.Dependency == dep.name {
				ds.Transitions[t.Agent]++
			}
		}
		s.Dependencies = append(s.Dependencies, ds)
	}
	// Phases: between consecutive marks, then the running one up to now.
	marks = append(marks, mark{phase: -1, counts: now})
	for j := 0; j+1 < len(marks); j++ {
		m, next := marks[j], marks[j+1]
		k := m.phase
		ps := PhaseSummary{
			PhaseWindow: d.sched.window(k/int(numPhases), Phase(k%int(numPhases))),
			Complete:    next.phase >= 0,
			Counts:      map[string]Counts{},
			Probes:      map[string]ProbeStats{},
		}
		for i, dep := range d.deps {
			ps.Counts[dep.name] = next.counts[i].Minus(m.counts[i])
			ps.Probes[dep.name] = dep.probeStatsIn(k)
		}
		s.Phases = append(s.Phases, ps)
	}
	s.AgentFallbacks = d.AgentFallbacks()
	return s
}

// Dependency returns the summary of one dependency.
func (s Summary) Dependency(name string) (DependencySummary, bool) {
	for _, d := range s.Dependencies {
		if d.Name == name {
			return d, true
		}
	}
	return DependencySummary{}, false
}

// WriteTo prints the summary as a few tables.
func (s Summary) WriteTo(w io.Writer) (int64, error) {
	var b strings.Builder
	cycles := s.Elapsed.Seconds() / (4 * s.PhaseDuration.Seconds())
	fmt.Fprintf(&b, "\nSummary: %.1fs of traffic, %.2f cycles of 4 phases of %v\n\n", s.Elapsed.Seconds(), cycles, s.PhaseDuration)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "dependency\tcalls\tok\tfailed\trejected\tattempts\tfirst\tretries\tprobes\tbudget-denied\ttransitions\t")
	for _, d := range s.Dependencies {
		n := 0
		for _, c := range d.Transitions {
			n += c
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", d.Name, d.Calls, d.Succeeded, d.Failed, d.Rejected,
			d.Attempts(), d.FirstAttempts, d.Retries, d.Probes, d.BudgetDenied, n)
	}
	_ = tw.Flush()

	fmt.Fprintf(&b, "\nPer phase (%s):\n", ShippingAPI)
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "cycle\tphase\tcalls\tok\tfailed\trejected\tfirst\tretries\tprobes\tmax probes at once\t")
	for _, p := range s.Phases {
		c := p.Counts[ShippingAPI]
		name := p.Phase.String()
		if !p.Complete {
			name += " (cut)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", p.Cycle+1, name, c.Calls, c.Succeeded, c.Failed, c.Rejected,
			c.FirstAttempts, c.Retries, c.Probes, p.Probes[ShippingAPI].MaxConcurrent)
	}
	_ = tw.Flush()

	fmt.Fprintln(&b, "\nTransitions by agent:")
	for _, d := range s.Dependencies {
		if len(d.Transitions) == 0 {
			fmt.Fprintf(&b, "  %s: none\n", d.Name)
			continue
		}
		var parts []string
		for _, a := range slices.Sorted(maps.Keys(d.Transitions)) {
			parts = append(parts, fmt.Sprintf("%s %d", a, d.Transitions[a]))
		}
		fmt.Fprintf(&b, "  %s: %s\n", d.Name, strings.Join(parts, ", "))
	}
	if d, ok := s.Dependency(ShippingAPI); ok {
		fmt.Fprintf(&b, "\nHalf-open probes at %s: %d, at most %d at once.\n", ShippingAPI, d.ProbeStats.Requests, d.ProbeStats.MaxConcurrent)
	}
	var fb []string
	for _, call := range []string{"acquire_retry", "acquire_probe", "check"} {
		if n := s.AgentFallbacks[call]; n > 0 {
			fb = append(fb, fmt.Sprintf("%s %d", call, n))
		}
	}
	if len(fb) > 0 {
		fmt.Fprintf(&b, "Decided locally because an agent was slow to answer: %s.\n", strings.Join(fb, ", "))
	}
	n, err := io.WriteString(w, b.String())
	return int64(n), err
}

// shellWord quotes s for a POSIX shell when it holds anything but letters,
// digits and -_./:=@%+, (a path with a blank stays one word).
func shellWord(s string) string {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=@%+,", r)) {
			return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
		}
	}
	return s
}

// ctlHint says how to get fuseboxctl when the banner names it as a command
// that is not on PATH ("" otherwise).
func ctlHint(ctl string) string {
	if strings.ContainsRune(ctl, '/') {
		return ""
	}
	if _, err := exec.LookPath(ctl); err == nil {
		return ""
	}
	return ctl + " is not on PATH: make build puts it in bin/, or pass --fuseboxctl PATH"
}

// formatCounts is one dependency's traffic on one log line.
func formatCounts(dep string, c Counts) string {
	return fmt.Sprintf("%-13s %5d calls: %5d ok %5d failed %5d rejected | %5d first attempts, %4d retries, %3d probes",
		dep, c.Calls, c.Succeeded, c.Failed, c.Rejected, c.FirstAttempts, c.Retries, c.Probes)
}

// printBanner prints the dashboard URL and how to poke the fleet (one line
// when headless).
func (d *Demo) printBanner() {
	if d.cfg.Agent != "" {
		d.printExternalBanner()
		return
	}
	url := d.DashboardURL()
	if d.cfg.Headless {
		d.printf("fusebox-demo: dashboard %s  admin API %s  token %s\n", url, d.GRPCAddr(), d.token)
		return
	}
	ctl := shellWord(d.cfg.Fuseboxctl)
	var b strings.Builder
	fmt.Fprintf(&b, "\nFusebox demo fleet: etcd, a coordinator, 3 agents (zones a, b, c), 3 services.\n\n")
	fmt.Fprintf(&b, "  Dashboard      %s\n", url)
	fmt.Fprintf(&b, "  Admin token    %s   (type it into the dashboard's Token box: it shows nothing without one)\n", d.token)
	fmt.Fprintf(&b, "  fuseboxctl     FUSEBOX_TOKEN=%s %s --coordinator %s status\n", d.token, ctl, d.GRPCAddr())
	fmt.Fprintf(&b, "  Force open     FUSEBOX_TOKEN=%s %s --coordinator %s force-open %s --reason demo\n",
		d.token, ctl, d.GRPCAddr(), CatalogAPI)
	if hint := ctlHint(d.cfg.Fuseboxctl); hint != "" {
		fmt.Fprintf(&b, "                 (%s)\n", hint)
	}
	for i, a := range d.agents {
		label := ""
		if i == 0 {
			label = "Agents"
		}
		fmt.Fprintf(&b, "  %-14s %s (%s)  FUSEBOX_AGENT=%s\n", label, a.Name(), agentZones[i], shellWord("unix://"+a.SocketPath()))
	}
	fmt.Fprintf(&b, "                 (a service of yours that links clientlib runs with one of these FUSEBOX_AGENT=… set)\n")
	for i, a := range d.agents {
		if serviceNames[i] == proxiedService {
			fmt.Fprintf(&b, "  Egress proxy   %s's: http_proxy=http://%s HTTP_PROXY=http://%s\n", a.Name(), a.ProxyAddr(), a.ProxyAddr())
		}
	}
	for _, l := range ProxyClients {
		fmt.Fprintf(&b, "                 %s\n", l)
	}
	fmt.Fprintf(&b, "  Metrics        http://%s/metrics (coordinator)", d.HTTPAddr())
	for _, a := range d.agents {
		fmt.Fprintf(&b, ", http://%s/metrics (%s)", a.HTTPAddr(), a.Name())
	}
	fmt.Fprintf(&b, "\n\n  %s cycles every %v: healthy -> failing -> slow -> recovering (%v each);\n",
		ShippingAPI, 4*d.cfg.PhaseDuration, d.cfg.PhaseDuration)
	fmt.Fprintf(&b, "  %s stays healthy. Services: checkout@agent-a, orders@agent-b (clientlib), %s@agent-c\n", CatalogAPI, proxiedService)
	fmt.Fprintf(&b, "  (no clientlib: through its agent's egress proxy, as a service in another language would).\n")
	b2 := d.policy.Breaker
	r := d.policy.Retry
	fmt.Fprintf(&b, "  Policy: window %v, trips at %d requests with %.0f%% failures or %.0f%% calls over %v from %d nodes;\n",
		b2.Window, b2.MinimumRequests, 100*b2.FailureRateThreshold, 100*b2.SlowCallRateThreshold, b2.SlowCallDuration, b2.MinFailingNodes)
	fmt.Fprintf(&b, "  open %v (reopens up to %v), %d probes fleet-wide, %d fast successes close, %v ramp; %d attempts of %v, retries <= %.0f%% + %g/s.\n",
		b2.OpenDuration, b2.FleetOpenDurationFor(math.MaxUint32), b2.HalfOpenProbes, b2.ProbeSuccessThreshold, b2.RampDuration,
		r.MaxAttempts, r.PerAttemptTimeout, 100*r.Budget.Ratio, r.Budget.MinRetriesPerSecond)
	fmt.Fprintf(&b, "  Transitions are logged per agent; local-open means the agent's own traffic tripped before the fleet's.\n")
	fmt.Fprintf(&b, "  Ctrl-C stops the demo and prints a summary.\n\n")
	d.printf("%s", b.String())
}
