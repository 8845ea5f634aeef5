package soak

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// tally is what every checker keeps: how many checks it ran and what
// broke.
type tally struct {
	Checks     int
	violations []Violation
}

// fail records v and returns it, as the checkers' methods do.
func (t *tally) fail(v Violation) []Violation {
	t.violations = append(t.violations, v)
	return []Violation{v}
}

// Violations returns every violation so far.
func (t *tally) Violations() []Violation { return t.violations }

// Violation is one broken invariant.
type Violation struct {
	At      time.Time
	Check   string
	Subject string // the agent, process or write concerned
	Detail  string
}

// Breaker is what an agent's pushed snapshot (the one clientlib decides
// from) says about one dependency.
type Breaker struct {
	// State is the governing breaker: "closed", "open" or "half_open".
	State string
	// LocalOpen: the agent's node-local breaker is open or half-open.
	LocalOpen bool
	// Override is "", "forced_open" or "forced_closed"; Reason its reason.
	Override, Reason string
	// MinimumRequests is the policy's breaker.minimumRequests.
	MinimumRequests uint32
	// Generation is the breaker record's generation.
	Generation uint64
}

// Refusing reports whether the agent refuses first attempts: the breaker
// open or half-open (probes aside), fleet-wide or node-local, or forced
// open.
func (b Breaker) Refusing() bool {
	if b.Override == "forced_open" {
		return true
	}
	if b.Override == "forced_closed" {
		return false
	}
	return b.State == "open" || b.State == "half_open" || b.LocalOpen
}

// Desired is what etcd holds for the write dependency, as an agent's
// snapshot shows it once applied.
type Desired struct {
	MinimumRequests uint32
	Override        string // "", "forced_open", "forced_closed"
	Reason          string
}

func (d Desired) String() string {
	o := d.Override
	if o == "" {
		o = "no override"
	} else {
		o = fmt.Sprintf("%s %q", o, d.Reason)
	}
	return fmt.Sprintf("minimumRequests %d, %s", d.MinimumRequests, o)
}

// desired reads a snapshot as a Desired.
func (b Breaker) desired() Desired {
	d := Desired{MinimumRequests: b.MinimumRequests, Override: b.Override}
	if b.Override != "" {
		d.Reason = b.Reason
	}
	return d
}

// ---------------------------------------------------------------------------

// HealthyChecker checks a dependency that always answers: no agent ever
// shows its breaker other than closed — neither fleet-wide nor node-local,
// and with generation 0 (no record ever opened it, even between two
// snapshots) — and no call to it is ever refused by Fusebox, whatever the
// faults: a healthy dependency gives no breaker anything to count, so a
// partition, a lost agent or the local fallback cannot open it either.
// With AllowForcedOpen (the dependency the operator writes to) a
// forced-open override, and the refusals with reason "forced-open" it
// causes, are allowed; the breaker's own state must still be closed.
type HealthyChecker struct {
	Dependency      string
	AllowForcedOpen bool

	tally
	// Refusals counts the refused calls, BadSnapshots the snapshots that
	// showed the breaker other than closed (each a violation, though only
	// the first of each agent and state is reported).
	Refusals, BadSnapshots int
	reported               map[string]bool // one violation per agent and state
}

// Snapshot checks one pushed snapshot of agent.
func (c *HealthyChecker) Snapshot(at time.Time, agent string, b Breaker) []Violation {
	c.Checks++
	var bad string
	switch {
	case b.State != "closed":
		bad = "breaker " + b.State
	case b.LocalOpen:
		bad = "node-local breaker open"
	case b.Generation > 0:
		bad = fmt.Sprintf("breaker record at generation %d (it was opened)", b.Generation)
	case b.Override == "forced_open" && !c.AllowForcedOpen:
		bad = "forced open"
	}
	if bad == "" {
		return nil
	}
	c.BadSnapshots++
	key := agent + "/" + bad
	if c.reported == nil {
		c.reported = map[string]bool{}
	}
	if c.reported[key] {
		return nil
	}
	c.reported[key] = true
	v := Violation{At: at, Check: "healthy-never-refused", Subject: agent,
		Detail: fmt.Sprintf("%s: %s at the agent", c.Dependency, bad)}
	return c.fail(v)
}

// Refused checks a call to the dependency that Fusebox refused (an error
// matching clientlib.ErrOpen) with reason (RejectedError.Reason); status
// says what the client saw then.
func (c *HealthyChecker) Refused(at time.Time, agent, reason, status string) []Violation {
	c.Checks++
	if c.AllowForcedOpen && reason == "forced-open" {
		return nil
	}
	c.Refusals++
	v := Violation{At: at, Check: "healthy-never-refused", Subject: agent,
		Detail: fmt.Sprintf("%s: a call was refused (%s; client: %s)", c.Dependency, reason, status)}
	return c.fail(v)
}

// Call counts a call that was not refused.
func (c *HealthyChecker) Call() { c.Checks++ }

// ---------------------------------------------------------------------------

// agentView is what a checker knows of one agent.
type agentView struct {
	up      bool
	upSince time.Time // when the running process was started
	snap    Breaker
	hasSnap bool
	snapAt  time.Time
	// mismatchSince is when a check first saw the agent differ from what
	// etcd held (WriteChecker); a match resets it.
	mismatchSince time.Time
}

// agents is the agent table the bounded checkers share.
type agents map[string]*agentView

func (a *agents) get(name string) *agentView {
	if *a == nil {
		*a = agents{}
	}
	v := (*a)[name]
	if v == nil {
		v = &agentView{}
		(*a)[name] = v
	}
	return v
}

// up records that agent's process was started at at: what was known of
// its predecessor is forgotten.
func (a *agents) up(name string, at time.Time) {
	*a.get(name) = agentView{up: true, upSince: at}
}

// down records that agent's process is gone.
func (a *agents) down(name string) { *a.get(name) = agentView{} }

func (a *agents) snapshot(name string, at time.Time, b Breaker) {
	v := a.get(name)
	if !v.up {
		return
	}
	v.snap, v.hasSnap, v.snapAt = b, true, at
}

// sorted returns the agent names in order.
func (a agents) sorted() []string {
	names := make([]string, 0, len(a))
	for n := range a {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ---------------------------------------------------------------------------

// DeadChecker checks a dependency that fails every call from DeadSince on:
// every running agent refuses first attempts to it (fleet breaker open or
// half-open, or its node-local breaker open) within Bound of the later of
// DeadSince and the agent's start — within FaultBound instead when the
// agent was (re)started after the death, or a fault touched its gossip
// (PathGossip) in between. Every agent's own clients call the dependency,
// so each holds evidence of its own (the node-local rule) even when cut
// off: a fault may slow the trip, never excuse it. Once the bound has
// passed, every snapshot of a running agent must refuse: the breaker may
// go half-open and back (probes fail), never closed.
type DeadChecker struct {
	Dependency        string
	Bound, FaultBound time.Duration

	tally
	deadSince time.Time
	agents    agents
	opened    map[string]time.Duration // per agent incarnation: time to refusing
	reported  map[string]time.Time     // agent → the incarnation reported
	latencies []time.Duration
}

// Dead records that the dependency fails every call from at on.
func (c *DeadChecker) Dead(at time.Time) { c.deadSince = at }

// AgentUp records that agent's process started at at.
func (c *DeadChecker) AgentUp(agent string, at time.Time) { c.agents.up(agent, at) }

// AgentDown records that agent's process is gone.
func (c *DeadChecker) AgentDown(agent string) { c.agents.down(agent) }

// Snapshot records agent's snapshot of the dependency.
func (c *DeadChecker) Snapshot(at time.Time, agent string, b Breaker) {
	c.agents.snapshot(agent, at, b)
	v := c.agents.get(agent)
	if !v.up || c.deadSince.IsZero() || !b.Refusing() {
		return
	}
	if c.opened == nil {
		c.opened = map[string]time.Duration{}
	}
	key := agent + "@" + v.upSince.String()
	if _, ok := c.opened[key]; !ok {
		d := at.Sub(later(c.deadSince, v.upSince))
		c.opened[key] = d
		c.latencies = append(c.latencies, d)
	}
}

// Tick checks every running agent at now.
func (c *DeadChecker) Tick(now time.Time, e *Exposure) []Violation {
	if c.deadSince.IsZero() || now.Before(c.deadSince) {
		return nil
	}
	var out []Violation
	for _, name := range c.agents.sorted() {
		v := c.agents[name]
		if !v.up {
			continue
		}
		c.Checks++
		ref := later(c.deadSince, v.upSince)
		bound := c.Bound
		if v.upSince.After(c.deadSince) || e.Touched(PathGossip, name, ref, now) {
			bound = c.FaultBound
		}
		if now.Sub(ref) <= bound {
			continue
		}
		var why string
		switch {
		case !v.hasSnap:
			why = "no snapshot from its local API"
		case !v.snap.Refusing():
			why = fmt.Sprintf("breaker %s, node-local open %v, generation %d", v.snap.State, v.snap.LocalOpen, v.snap.Generation)
		default:
			continue
		}
		if c.reported == nil {
			c.reported = map[string]time.Time{}
		}
		if r, ok := c.reported[name]; ok && r.Equal(v.upSince) {
			continue // once per incarnation
		}
		c.reported[name] = v.upSince
		viol := Violation{At: now, Check: "dead-open-everywhere", Subject: name,
			Detail: fmt.Sprintf("%s: not refusing %v after %s (bound %v): %s", c.Dependency,
				now.Sub(ref).Round(time.Millisecond), refName(ref, c.deadSince), bound, why)}
		c.fail(viol)
		out = append(out, viol)
	}
	return out
}

// Latencies returns, per agent process that refused, how long after the
// later of the death and its start it first did.
func (c *DeadChecker) Latencies() []time.Duration { return c.latencies }

func refName(ref, dead time.Time) string {
	if ref.Equal(dead) {
		return "the death"
	}
	return "the agent's start"
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// ---------------------------------------------------------------------------

// WriteChecker checks that every agent applies what etcd holds for the
// write dependency (its policy's minimumRequests and its override, read
// from etcd after each write and every second, so a TTL's expiry is a
// change too): a running agent's snapshot must show it within Bound of
// the latest of the first change it has not caught up with, the agent's
// start and the end of the last fault on its etcd path (PathEtcd) — not
// checked while such a fault goes on — and the agent must have differed
// for Bound (an agent may show a change before the soak has read it from
// etcd). The bound runs from the first change the agent missed, not the
// latest: writes coming faster than Bound do not restart its clock, so an
// agent that lags every write, or applies none, is caught. It also checks
// that a write fuseboxctl acknowledged is in etcd (Acked).
type WriteChecker struct {
	Bound time.Duration

	tally
	want      Desired
	wantSince time.Time
	version   int
	since     []time.Time // since[v-1]: when version v was read from etcd
	agents    agents
	applied   map[string]int // agent → the version its snapshot matched last
	reported  map[string]int // agent → the version reported
	latencies []time.Duration
}

// Expect records what etcd holds, read at at. It returns whether that is
// a change.
func (c *WriteChecker) Expect(at time.Time, d Desired) bool {
	if c.version > 0 && d == c.want {
		return false
	}
	c.want, c.wantSince = d, at
	c.version++
	c.since = append(c.since, at)
	// Agents that show it already applied it before the soak saw it in
	// etcd (latency 0).
	for _, name := range c.agents.sorted() {
		if v := c.agents[name]; v.up && v.hasSnap && v.snap.desired() == d {
			if c.applied == nil {
				c.applied = map[string]int{}
			}
			c.applied[name] = c.version
			c.latencies = append(c.latencies, 0)
		}
	}
	return true
}

// AgentUp records that agent's process started at at.
func (c *WriteChecker) AgentUp(agent string, at time.Time) { c.agents.up(agent, at) }

// AgentDown records that agent's process is gone.
func (c *WriteChecker) AgentDown(agent string) { c.agents.down(agent) }

// Snapshot records agent's snapshot of the write dependency.
func (c *WriteChecker) Snapshot(at time.Time, agent string, b Breaker) {
	c.agents.snapshot(agent, at, b)
	v := c.agents.get(agent)
	if !v.up || c.version == 0 || b.desired() != c.want {
		return
	}
	if c.applied == nil {
		c.applied = map[string]int{}
	}
	if c.applied[agent] != c.version {
		c.applied[agent] = c.version
		c.latencies = append(c.latencies, at.Sub(later(c.wantSince, v.upSince)))
	}
}

// Tick checks every running agent at now.
func (c *WriteChecker) Tick(now time.Time, e *Exposure) []Violation {
	if c.version == 0 {
		return nil
	}
	var out []Violation
	for _, name := range c.agents.sorted() {
		v := c.agents[name]
		if !v.up {
			continue
		}
		c.Checks++
		if v.hasSnap && v.snap.desired() == c.want {
			v.mismatchSince = time.Time{}
			continue
		}
		// The bound runs from the first change the agent has not caught
		// up with (a later one does not restart it), its start or the
		// fault's end, and the mismatch must also have lasted that long:
		// an agent may be ahead of the soak, showing a change the soak
		// has not read from etcd yet.
		if v.mismatchSince.IsZero() {
			v.mismatchSince = now
		}
		missed := c.since[min(c.applied[name]+1, c.version)-1]
		ref, active := e.Settled(PathEtcd, name, later(missed, v.upSince), now)
		if active || now.Sub(ref) <= c.Bound || now.Sub(v.mismatchSince) <= c.Bound {
			continue
		}
		if c.reported == nil {
			c.reported = map[string]int{}
		}
		if c.reported[name] == c.version {
			continue
		}
		c.reported[name] = c.version
		got := "no snapshot from its local API"
		if v.hasSnap {
			got = v.snap.desired().String()
		}
		viol := Violation{At: now, Check: "writes-reach-every-agent", Subject: name,
			Detail: fmt.Sprintf("etcd holds %s since %v ago (the agent has missed the changes of the last %v); the agent shows %s (bound %v after the first change it missed, the agent's start or the last fault on its etcd path)",
				c.want, now.Sub(c.wantSince).Round(time.Millisecond), now.Sub(missed).Round(time.Millisecond), got, c.Bound)}
		c.fail(viol)
		out = append(out, viol)
	}
	return out
}

// Acked checks that a write fuseboxctl reported done is what etcd held
// right after it.
func (c *WriteChecker) Acked(at time.Time, w Write, inEtcd Desired) []Violation {
	c.Checks++
	ok := false
	switch w.Op {
	case WritePolicy:
		ok = inEtcd.MinimumRequests == w.MinimumRequests
	case WriteForceOpen:
		ok = inEtcd.Override == "forced_open" && inEtcd.Reason == w.Reason
	case WriteForceClosed:
		ok = inEtcd.Override == "forced_closed" && inEtcd.Reason == w.Reason
	case WriteClear:
		ok = inEtcd.Override == ""
	}
	if ok {
		return nil
	}
	v := Violation{At: at, Check: "acknowledged-write-in-etcd", Subject: string(w.Op),
		Detail: fmt.Sprintf("fuseboxctl acknowledged %s; etcd then held %s", w.Describe(), inEtcd)}
	return c.fail(v)
}

// Latencies returns how long each agent took to apply each change (from
// the later of the change and its start).
func (c *WriteChecker) Latencies() []time.Duration { return c.latencies }

// Changes returns how many distinct states etcd went through.
func (c *WriteChecker) Changes() int { return c.version }

// ---------------------------------------------------------------------------

// WritePathChecker checks that an operator write is refused only while a
// fault is on its path (PathControl): a coordinator restart (until Bound
// after it is back), an etcd member kill (until a leader serves), loss at
// the coordinator or an etcd member.
type WritePathChecker struct {
	Bound time.Duration

	tally
}

// Failed checks a write that failed (its exit code and output).
func (c *WritePathChecker) Failed(at time.Time, w Write, exit int, out string, e *Exposure) []Violation {
	c.Checks++
	ref, active := e.Settled(PathControl, Control, at.Add(-c.Bound), at)
	if active || at.Sub(ref) < c.Bound {
		return nil
	}
	v := Violation{At: at, Check: "writes-succeed-without-faults", Subject: string(w.Op),
		Detail: fmt.Sprintf("%s failed (exit %d) with no fault on the write path for %v: %s", w.Describe(), exit, c.Bound, out)}
	return c.fail(v)
}

// Succeeded counts a write that succeeded.
func (c *WritePathChecker) Succeeded() { c.Checks++ }

// ---------------------------------------------------------------------------

// MembershipChecker checks that gossip heals: once no fault has touched
// any agent's gossip for Bound (no partition, no loss anywhere, no agent
// kill), every running agent counts N agents alive.
type MembershipChecker struct {
	N     int
	Bound time.Duration

	tally
	reported map[string]bool
}

// Members checks agent's count of alive agents, sampled at at.
func (c *MembershipChecker) Members(at time.Time, agent string, alive int, e *Exposure) []Violation {
	if e.Touched(PathMembership, Fleet, at.Add(-c.Bound), at) {
		return nil
	}
	c.Checks++
	if alive == c.N {
		delete(c.reported, agent)
		return nil
	}
	if c.reported == nil {
		c.reported = map[string]bool{}
	}
	if c.reported[agent] {
		return nil
	}
	c.reported[agent] = true
	v := Violation{At: at, Check: "membership-heals", Subject: agent,
		Detail: fmt.Sprintf("counts %d agents alive, not %d, with no gossip fault for %v", alive, c.N, c.Bound)}
	return c.fail(v)
}

// ---------------------------------------------------------------------------

// DeadlineChecker checks that no client call outlives its deadline by
// more than Slack (scheduling on a loaded machine).
type DeadlineChecker struct {
	Slack time.Duration

	tally
	Max        time.Duration // the largest overshoot seen (negative: none)
	MaxSubject string
	started    bool
}

// Call checks one call: its deadline and how long it took.
func (c *DeadlineChecker) Call(at time.Time, subject string, deadline, took time.Duration) []Violation {
	c.Checks++
	over := took - deadline
	if !c.started || over > c.Max {
		c.Max, c.MaxSubject, c.started = over, subject, true
	}
	if over <= c.Slack {
		return nil
	}
	v := Violation{At: at, Check: "no-deadline-miss", Subject: subject,
		Detail: fmt.Sprintf("a call with a %v deadline returned after %v (slack %v)", deadline, took.Round(time.Millisecond), c.Slack)}
	return c.fail(v)
}

// ---------------------------------------------------------------------------

// ProcessChecker checks that no process exits unless the soak stopped it.
type ProcessChecker struct {
	tally
}

// Exited records that a process exited; expected says the soak stopped it.
func (c *ProcessChecker) Exited(at time.Time, name string, expected bool, detail string) []Violation {
	c.Checks++
	if expected {
		return nil
	}
	v := Violation{At: at, Check: "no-unexpected-exit", Subject: name, Detail: detail}
	return c.fail(v)
}

// sortViolations orders violations by time.
func sortViolations(vs []Violation) {
	slices.SortStableFunc(vs, func(a, b Violation) int { return a.At.Compare(b.At) })
}
