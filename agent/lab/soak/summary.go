package soak

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/fusebox-dev/fusebox/agent/lab/scale"
)

// maxListed bounds the violations the summary lists one by one.
const maxListed = 50

// summary formats the run's summary: faults, calls, checks, violations,
// resource trends.
func (r *soakRun) summary(end time.Time, deps map[string]*depServer) string {
	m := r.m
	m.mu.Lock()
	defer m.mu.Unlock()
	trends, tv := m.trends.Judge(end)
	m.report(tv)
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	cfg := r.cfg
	p("\n## Soak summary\n\n")
	ran := end.Sub(m.start)
	p("Seed %d (`SEED=%d` reproduces the schedule); ran %v of %v on %s; %d agents (%d never killed), %d etcd members, 1 coordinator; "+
		"%.0f calls/s per agent per dependency, %v deadline each.\n\n",
		cfg.Seed, cfg.Seed, ran.Round(time.Second), cfg.Duration, scale.Machine(), cfg.Agents, cfg.Sentinels, etcdMembers,
		cfg.Rate, cfg.CallDeadline)
	self, children := cpuTimes()
	p("Load average (1, 5, 15 min) at the start %s, at the end %s. CPU: the soak's callers and checks %v (%.2f cores), "+
		"the agents, etcd members, coordinator and fuseboxctl runs %v (%.2f cores).\n\n",
		r.loadStart, scale.LoadAvg(), self.Round(time.Second), self.Seconds()/ran.Seconds(),
		children.Round(time.Second), children.Seconds()/ran.Seconds())

	p("| fault | injected | scheduled | total time |\n| --- | --- | --- | --- |\n")
	for _, k := range Kinds {
		s := m.faults[k]
		if s == nil {
			s = &faultStats{}
		}
		p("| %s | %d | %d | %v |\n", k, s.n, r.sched.Count(k), s.total.Round(time.Second))
	}
	var outcomes []string
	for k, n := range m.writeRuns {
		outcomes = append(outcomes, fmt.Sprintf("%s: %d", k, n))
	}
	sort.Strings(outcomes)
	p("| operator writes (fuseboxctl) | %d | %d | %s |\n\n", sumValues(m.writeRuns), len(r.sched.Writes), strings.Join(outcomes, ", "))

	p("| dependency | calls | succeeded | refused by Fusebox | failed (why) | reached the server |\n| --- | --- | --- | --- | --- | --- |\n")
	for _, name := range []string{DepHealthy, DepDead, DepOps} {
		s := m.calls[name]
		if s == nil {
			s = &callStats{}
		}
		var why []string
		for k, n := range s.failures {
			why = append(why, fmt.Sprintf("%s: %d", k, n))
		}
		sort.Strings(why)
		failed := fmt.Sprint(s.failed)
		if len(why) > 0 {
			failed += " (" + strings.Join(why, ", ") + ")"
		}
		p("| %s | %d | %d | %d | %s | %d |\n", name, s.calls, s.ok, s.refused, failed, deps[name].hits.Load())
	}
	p("\n")

	count := func(check string) int {
		n := 0
		for _, v := range m.violations {
			if v.Check == check {
				n++
			}
		}
		return n
	}
	pct := func(d []time.Duration) string {
		if len(d) == 0 {
			return "none"
		}
		return fmt.Sprintf("p50 %v, p99 %v, max %v (%d)", scale.Percentile(d, 0.5).Round(time.Millisecond),
			scale.Percentile(d, 0.99).Round(time.Millisecond), scale.Percentile(d, 1).Round(time.Millisecond), len(d))
	}
	judged := 0
	for _, t := range trends {
		if t.Judged {
			judged++
		}
	}
	p("| invariant | checks | violations | figures |\n| --- | --- | --- | --- |\n")
	p("| healthy-never-refused (%s) | %d | %d | %s |\n", DepHealthy, m.healthy.Checks, countDep(m.violations, "healthy-never-refused", DepHealthy), healthyFigures(&m.healthy))
	p("| healthy-never-refused (%s, forced-open allowed) | %d | %d | %s |\n", DepOps, m.ops.Checks, countDep(m.violations, "healthy-never-refused", DepOps), healthyFigures(&m.ops))
	p("| dead-open-everywhere (bound %v, %v after a start or a gossip fault) | %d | %d | refusing after the death or the agent's start: %s |\n",
		DeadBound, DeadFaultBound, m.dead.Checks, count("dead-open-everywhere"), pct(m.dead.Latencies()))
	p("| writes-reach-every-agent (bound %v) | %d | %d | %d states in etcd; applied: %s |\n",
		WriteBound, m.writes.Checks, count("writes-reach-every-agent"), m.writes.Changes(), pct(m.writes.Latencies()))
	p("| acknowledged-write-in-etcd | %d | %d | |\n", sumValues(m.writeRuns), count("acknowledged-write-in-etcd"))
	p("| writes-succeed-without-faults (bound %v) | %d | %d | |\n", WritePathBound, m.writePath.Checks, count("writes-succeed-without-faults"))
	p("| membership-heals (bound %v) | %d | %d | |\n", MembershipBound, m.membership.Checks, count("membership-heals"))
	p("| no-deadline-miss (slack %v) | %d | %d | largest overshoot %v (%s) |\n", DeadlineSlack, m.deadline.Checks, count("no-deadline-miss"),
		m.deadline.Max.Round(time.Millisecond), m.deadline.MaxSubject)
	p("| no-unexpected-exit | %d | %d | |\n", m.processes.Checks, count("no-unexpected-exit"))
	p("| resources-flat | %d samples, %d series judged | %d | |\n\n", m.trends.Checks, judged, count("resources-flat"))

	vs := slices.Clone(m.violations)
	sortViolations(vs)
	p("Violations: %d\n", len(vs))
	for i, v := range vs {
		if i == maxListed {
			p("- … and %d more (every one was printed as it happened)\n", len(vs)-maxListed)
			break
		}
		p("- %s %s %s: %s\n", fmtOffset(v.At.Sub(m.start)), v.Check, v.Subject, v.Detail)
	}
	if len(m.errors) > 0 {
		p("\nSoak errors (the soak's own trouble: the result is in doubt): %d\n", len(m.errors))
		for _, e := range m.errors {
			p("- %s\n", e)
		}
	}

	p("\nResources (medians of the first → last third of each judged series, after its warm-up):\n\n")
	p("| process | incarnation | span | RSS | goroutines | open files | threads | verdict |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	short := 0
	for _, t := range trends {
		if !t.Judged {
			short++
			continue
		}
		verdict := "flat"
		if len(t.Grew) > 0 {
			verdict = "GREW: " + strings.Join(t.Grew, ", ")
		}
		p("| %s | %d | %v | %s | %s | %s | %s | %s |\n", t.Process, t.Incarnation, t.Span.Round(time.Second),
			trendCell(t, "rss"), trendCell(t, "goroutines"), trendCell(t, "fds"), trendCell(t, "threads"), verdict)
	}
	p("\n%d shorter series (restarted processes) not judged: less than %v after their warm-up.\n", short, TrendMinSpan)
	return b.String()
}

// healthyFigures says what c saw: its refused calls and the snapshots
// that were not closed at generation 0.
func healthyFigures(c *HealthyChecker) string {
	if c.Refusals == 0 && c.BadSnapshots == 0 {
		return "no refusal, every snapshot closed at generation 0"
	}
	return fmt.Sprintf("%d calls refused, %d snapshots not closed at generation 0", c.Refusals, c.BadSnapshots)
}

func trendCell(t Trend, name string) string {
	f, ok1 := t.First[name]
	l, ok2 := t.Last[name]
	if !ok1 || !ok2 {
		return "–"
	}
	return fmtResource(name, f) + " → " + fmtResource(name, l)
}

func countDep(vs []Violation, check, dep string) int {
	n := 0
	for _, v := range vs {
		if v.Check == check && strings.HasPrefix(v.Detail, dep+":") {
			n++
		}
	}
	return n
}

func sumValues(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// cpuTimes returns the CPU time (user + system) of this process and of
// its children that have exited and been waited for (every process of the
// run, once stopAll has stopped them).
func cpuTimes() (self, children time.Duration) {
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		self = tv(ru.Utime) + tv(ru.Stime)
	}
	if syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru) == nil {
		children = tv(ru.Utime) + tv(ru.Stime)
	}
	return self, children
}
