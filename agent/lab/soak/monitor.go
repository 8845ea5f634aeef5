package soak

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// The soak's bounds (deploy/README.md, "Soak under faults", states them
// with their reasons).
const (
	// DeadBound: a dead dependency is refused at every agent this long
	// after its death: detection (the fast path trips within a second on
	// the fleet's pooled counts) plus the gossip spread (a round trip), with
	// room for a loaded 2-core machine.
	DeadBound = 15 * time.Second
	// DeadFaultBound replaces DeadBound for an agent started after the
	// death or whose gossip a fault touched meanwhile: its clients
	// reconnect (clientlib backs off up to 5 s), it joins and receives the
	// record by push-pull, or, cut off, its node-local breaker needs
	// minimumRequests (20) of its own calls within the 10 s window.
	DeadFaultBound = 30 * time.Second
	// WriteBound: every running agent shows what etcd holds this long
	// after the change, its start, or the end of the last fault on its
	// etcd path: a watch resumes within the store's reconnect backoff (at
	// most 5 s) plus the agent's watch retry backoff (at most 10 s).
	WriteBound = 20 * time.Second
	// EtcdFailover is how long an etcd member's kill counts as a fault on
	// every agent's etcd path: until the etcd client has noticed a silent
	// member (keep-alive every 10 s, 5 s timeout).
	EtcdFailover = 15 * time.Second
	// ElectionBound is how long an etcd member's kill counts as a fault on
	// the write path: a new leader is elected within a few election
	// timeouts (1 s each).
	ElectionBound = 10 * time.Second
	// WritePathBound: writes succeed again this long after the end of the
	// last fault on their path (the coordinator back and serving).
	WritePathBound = 15 * time.Second
	// MembershipBound: every agent counts every agent alive this long
	// after the last gossip fault (rejoin every 2 s, dead-node reaping).
	MembershipBound = 30 * time.Second
	// DeadlineSlack is how far past its deadline a client call may return:
	// scheduling on a loaded machine.
	DeadlineSlack = 250 * time.Millisecond
	// TrendWarmup and TrendMinSpan: what TrendChecker leaves out at the
	// start of a series, and the shortest judged part.
	TrendWarmup  = 2 * time.Minute
	TrendMinSpan = 5 * time.Minute
)

// The soak's dependencies.
const (
	DepHealthy = "healthy"
	DepDead    = "dead"
	DepOps     = "ops"
)

// monitor holds every checker and the exposure of the run; the soak's
// goroutines feed it. Its methods are safe for concurrent use.
type monitor struct {
	mu    sync.Mutex
	start time.Time
	out   io.Writer // violations are printed as they happen

	exposure   Exposure
	healthy    HealthyChecker
	ops        HealthyChecker
	dead       DeadChecker
	writes     WriteChecker
	writePath  WritePathChecker
	membership MembershipChecker
	deadline   DeadlineChecker
	processes  ProcessChecker
	trends     TrendChecker

	violations []Violation
	calls      map[string]*callStats // by dependency
	faults     map[Kind]*faultStats
	writeRuns  map[string]int // fuseboxctl outcomes: "ok", "exit 4", …
	agentInc   map[string]int // the incarnation each agent's snapshots must come from
	writing    time.Time      // when the write in flight started (zero: none)
	errors     []string       // injection errors (not violations: the soak's own trouble)
}

type callStats struct {
	calls, ok, refused, failed int
	failures                   map[string]int // by errorKind, at most maxFailureKinds
}

// maxFailureKinds bounds the failure tally of a dependency.
const maxFailureKinds = 20

type faultStats struct {
	n     int
	total time.Duration
}

func newMonitor(start time.Time, out io.Writer, agents int) *monitor {
	return &monitor{
		start: start, out: out,
		healthy:    HealthyChecker{Dependency: DepHealthy},
		ops:        HealthyChecker{Dependency: DepOps, AllowForcedOpen: true},
		dead:       DeadChecker{Dependency: DepDead, Bound: DeadBound, FaultBound: DeadFaultBound},
		writes:     WriteChecker{Bound: WriteBound},
		writePath:  WritePathChecker{Bound: WritePathBound},
		membership: MembershipChecker{N: agents, Bound: MembershipBound},
		deadline:   DeadlineChecker{Slack: DeadlineSlack},
		trends:     TrendChecker{Warmup: TrendWarmup, MinSpan: TrendMinSpan},
		calls:      map[string]*callStats{},
		faults:     map[Kind]*faultStats{},
		writeRuns:  map[string]int{},
		agentInc:   map[string]int{},
	}
}

// report records and prints violations; mu is held.
func (m *monitor) report(vs []Violation) {
	for _, v := range vs {
		m.violations = append(m.violations, v)
		fmt.Fprintf(m.out, "VIOLATION %s %s %s: %s\n", fmtOffset(v.At.Sub(m.start)), v.Check, v.Subject, v.Detail)
	}
}

func (m *monitor) agentUp(agent string, incarnation int, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.agentInc[agent] = incarnation
	m.dead.AgentUp(agent, at)
	m.writes.AgentUp(agent, at)
}

func (m *monitor) agentDown(agent string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.agentInc[agent] = -1
	m.dead.AgentDown(agent)
	m.writes.AgentDown(agent)
}

// snapshot feeds one pushed snapshot of agent's incarnation.
func (m *monitor) snapshot(at time.Time, agent string, incarnation int, dep string, b Breaker) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.agentInc[agent] != incarnation {
		return // a late snapshot of a process that is gone
	}
	switch dep {
	case DepHealthy:
		m.report(m.healthy.Snapshot(at, agent, b))
	case DepOps:
		m.report(m.ops.Snapshot(at, agent, b))
		m.writes.Snapshot(at, agent, b)
	case DepDead:
		m.dead.Snapshot(at, agent, b)
	}
}

// call feeds one client call's outcome: refusedReason when Fusebox
// refused it, failure (errorKind) when it failed otherwise.
func (m *monitor) call(at time.Time, agent, dep string, deadline, took time.Duration, refusedReason, failure, status string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.calls[dep]
	if s == nil {
		s = &callStats{}
		m.calls[dep] = s
	}
	s.calls++
	switch {
	case refusedReason != "":
		s.refused++
	case failure != "":
		s.failed++
		if s.failures == nil {
			s.failures = map[string]int{}
		}
		if _, ok := s.failures[failure]; ok || len(s.failures) < maxFailureKinds {
			s.failures[failure]++
		}
	default:
		s.ok++
	}
	m.report(m.deadline.Call(at, agent+"/"+dep, deadline, took))
	var c *HealthyChecker
	switch dep {
	case DepHealthy:
		c = &m.healthy
	case DepOps:
		c = &m.ops
	default:
		return
	}
	if refusedReason != "" {
		m.report(c.Refused(at, agent, refusedReason, status))
	} else {
		c.Call()
	}
}

// members feeds one agent's count of alive agents.
func (m *monitor) members(at time.Time, agent string, alive int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.report(m.membership.Members(at, agent, alive, &m.exposure))
}

// tick runs the time-driven checks.
func (m *monitor) tick(now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.report(m.dead.Tick(now, &m.exposure))
	m.report(m.writes.Tick(now, &m.exposure))
}

func (m *monitor) deadAt(at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dead.Dead(at)
}

// expect feeds what etcd holds for the write dependency, read at at. A
// change seen while a write is in flight dates from the write's start: it
// may have happened any time after.
func (m *monitor) expect(at time.Time, d Desired) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.writing.IsZero() {
		at = m.writing
	}
	m.writes.Expect(at, d)
}

// writeStarts and writeEnds bracket a write (fuseboxctl and the read of
// etcd after it).
func (m *monitor) writeStarts(at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writing = at
}

func (m *monitor) writeEnds() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writing = time.Time{}
}

func (m *monitor) writeDone(at time.Time, w Write, exit int, out string, inEtcd *Desired) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if exit == 0 {
		m.writeRuns["ok"]++
		m.writePath.Succeeded()
		if inEtcd != nil {
			m.report(m.writes.Acked(at, w, *inEtcd))
		}
		return
	}
	m.writeRuns[fmt.Sprintf("exit %d", exit)]++
	m.report(m.writePath.Failed(at, w, exit, out, &m.exposure))
}

func (m *monitor) exited(at time.Time, name string, expected bool, detail string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.report(m.processes.Exited(at, name, expected, detail))
}

func (m *monitor) sample(process string, incarnation int, at time.Time, r Resources) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.trends.Sample(process, incarnation, at, r)
}

// begin records a fault touching subjects on path; end ends it.
func (m *monitor) begin(path Path, subjects []string, at time.Time) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.exposure.Begin(path, subjects, at)
}

func (m *monitor) end(id int, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.exposure.End(id, at)
}

func (m *monitor) window(path Path, subjects []string, from, to time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.exposure.Window(path, subjects, from, to)
}

func (m *monitor) injected(k Kind, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.faults[k]
	if s == nil {
		s = &faultStats{}
		m.faults[k] = s
	}
	s.n++
	s.total += d
}

// trouble records a failure of the soak itself (an nft rule it could not
// install, a process it could not restart): the run's result is then in
// doubt, and the soak exits non-zero.
func (m *monitor) trouble(at time.Time, format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	msg := fmt.Sprintf("%s %s", fmtOffset(at.Sub(m.start)), fmt.Sprintf(format, args...))
	m.errors = append(m.errors, msg)
	fmt.Fprintln(m.out, "SOAK ERROR", msg)
}
