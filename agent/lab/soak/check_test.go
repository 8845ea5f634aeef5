package soak

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

var (
	closed = Breaker{State: "closed"}
	open   = Breaker{State: "open", Generation: 1}
)

func wantViolations(t *testing.T, what string, got []Violation, n int, contains string) {
	t.Helper()
	if len(got) != n {
		t.Fatalf("%s: %d violations, want %d: %+v", what, len(got), n, got)
	}
	for _, v := range got {
		if !strings.Contains(v.Detail, contains) {
			t.Errorf("%s: violation %q does not say %q", what, v.Detail, contains)
		}
	}
}

func TestHealthyChecker(t *testing.T) {
	c := &HealthyChecker{Dependency: "healthy"}
	wantViolations(t, "closed snapshot", c.Snapshot(at(1), "agent-0", closed), 0, "")
	wantViolations(t, "open snapshot", c.Snapshot(at(2), "agent-0", open), 1, "breaker open")
	wantViolations(t, "the same again", c.Snapshot(at(3), "agent-0", open), 0, "")
	wantViolations(t, "node-local open", c.Snapshot(at(4), "agent-1", Breaker{State: "closed", LocalOpen: true}), 1, "node-local")
	wantViolations(t, "closed again at generation 2", c.Snapshot(at(5), "agent-2", Breaker{State: "closed", Generation: 2}), 1, "generation 2")
	wantViolations(t, "forced open", c.Snapshot(at(6), "agent-3", Breaker{State: "closed", Override: "forced_open"}), 1, "forced open")
	wantViolations(t, "a refused call", c.Refused(at(7), "agent-0", "open", "fleet closed"), 1, "refused (open")
	if c.Refusals != 1 || c.BadSnapshots != 5 {
		t.Errorf("healthy: %d refusals and %d bad snapshots counted, want 1 and 5 (the repeat counts, unreported)", c.Refusals, c.BadSnapshots)
	}
	if got := healthyFigures(c); got != "1 calls refused, 5 snapshots not closed at generation 0" {
		t.Errorf("healthy: the summary's figures say %q", got)
	}
	if got := healthyFigures(&HealthyChecker{}); got != "no refusal, every snapshot closed at generation 0" {
		t.Errorf("a checker that saw nothing wrong: the summary's figures say %q", got)
	}

	ops := &HealthyChecker{Dependency: "ops", AllowForcedOpen: true}
	wantViolations(t, "ops forced open", ops.Snapshot(at(1), "agent-0", Breaker{State: "closed", Override: "forced_open"}), 0, "")
	wantViolations(t, "ops refused forced-open", ops.Refused(at(2), "agent-0", "forced-open", ""), 0, "")
	wantViolations(t, "ops refused open", ops.Refused(at(3), "agent-0", "open", ""), 1, "refused (open")
	wantViolations(t, "ops breaker open", ops.Snapshot(at(4), "agent-0", open), 1, "breaker open")
	if ops.Refusals != 1 || ops.BadSnapshots != 1 {
		t.Errorf("ops: %d refusals and %d bad snapshots counted, want 1 and 1 (forced-open aside)", ops.Refusals, ops.BadSnapshots)
	}
}

func TestDeadChecker(t *testing.T) {
	e := &Exposure{}
	c := &DeadChecker{Dependency: "dead", Bound: 10 * time.Second, FaultBound: 30 * time.Second}
	c.AgentUp("agent-0", at(0))
	c.AgentUp("agent-1", at(0))
	c.Snapshot(at(1), "agent-0", closed)
	c.Snapshot(at(1), "agent-1", closed)
	wantViolations(t, "before the death", c.Tick(at(100), e), 0, "")

	c.Dead(at(100))
	c.Snapshot(at(103), "agent-0", open)
	wantViolations(t, "within the bound", c.Tick(at(109), e), 0, "")
	wantViolations(t, "agent-1 still closed after the bound", c.Tick(at(111), e), 1, "not refusing")
	wantViolations(t, "reported once", c.Tick(at(112), e), 0, "")

	// A restart gets FaultBound from its start, and is reported afresh.
	c.AgentDown("agent-1")
	wantViolations(t, "down agents are not checked", c.Tick(at(113), e), 0, "")
	c.AgentUp("agent-1", at(120))
	wantViolations(t, "no snapshot yet, within FaultBound", c.Tick(at(140), e), 0, "")
	wantViolations(t, "no snapshot after FaultBound", c.Tick(at(151), e), 1, "no snapshot")
	c.Snapshot(at(152), "agent-1", Breaker{State: "half_open", Generation: 3})
	c.Snapshot(at(152), "agent-0", Breaker{State: "closed", LocalOpen: true})
	wantViolations(t, "half-open and node-local open refuse", c.Tick(at(153), e), 0, "")
	// Closing while still dead is a violation.
	c.Snapshot(at(160), "agent-0", Breaker{State: "closed", Generation: 3})
	wantViolations(t, "closed again while dead", c.Tick(at(161), e), 1, "breaker closed")

	// A gossip fault touching an agent stretches its bound to FaultBound.
	e2 := &Exposure{}
	c2 := &DeadChecker{Dependency: "dead", Bound: 10 * time.Second, FaultBound: 30 * time.Second}
	c2.AgentUp("agent-0", at(0))
	c2.AgentUp("agent-1", at(0))
	c2.Dead(at(100))
	e2.Window(PathGossip, []string{"agent-0"}, at(95), at(105))
	wantViolations(t, "touched agent-0 within FaultBound, agent-1 not", c2.Tick(at(115), e2), 1, "")
	if v := c2.Violations(); v[0].Subject != "agent-1" {
		t.Errorf("violation names %s, want agent-1", v[0].Subject)
	}
	wantViolations(t, "agent-0 past FaultBound", c2.Tick(at(131), e2), 1, "bound 30s")
	c.Snapshot(at(170), "agent-1", open)
	if n := len(c.Latencies()); n != 2 {
		t.Errorf("%d open latencies, want 2 (agent-0 and agent-1's second incarnation)", n)
	}
}

func TestWriteChecker(t *testing.T) {
	e := &Exposure{}
	c := &WriteChecker{Bound: 10 * time.Second}
	// until ticks every second, as the soak does, up to s, and returns the
	// violations.
	last := 0.0
	until := func(s float64) []Violation {
		var out []Violation
		for ; last+1 <= s; last++ {
			out = append(out, c.Tick(at(last+1), e)...)
		}
		return out
	}
	c.AgentUp("agent-0", at(0))
	c.AgentUp("agent-1", at(0))
	want := Desired{MinimumRequests: 20}
	if !c.Expect(at(10), want) || c.Expect(at(11), want) {
		t.Fatal("Expect does not tell a change from a repeat")
	}
	c.Snapshot(at(11), "agent-0", Breaker{State: "closed", MinimumRequests: 20})
	c.Snapshot(at(11), "agent-1", Breaker{State: "closed", MinimumRequests: 15})
	wantViolations(t, "within the bound", until(20), 0, "")
	wantViolations(t, "agent-1 behind after the bound", until(22), 1, "minimumRequests 15")
	wantViolations(t, "reported once", until(29), 0, "")

	// An override: agent-1 cut from etcd until 62 gets the bound from 62.
	c.Expect(at(30), Desired{MinimumRequests: 20, Override: "forced_open", Reason: "w1"})
	id := e.Begin(PathEtcd, []string{"agent-1"}, at(25))
	c.Snapshot(at(31), "agent-0", Breaker{State: "closed", MinimumRequests: 20, Override: "forced_open", Reason: "w1"})
	wantViolations(t, "agent-1 exempt while its fault lasts", until(60), 0, "")
	e.End(id, at(62))
	wantViolations(t, "agent-1 within the bound after the heal", until(72), 0, "")
	wantViolations(t, "agent-1 past the bound after the heal", until(73), 1, `forced_open "w1"`)
	// The wrong reason is not the right override.
	c.Snapshot(at(74), "agent-1", Breaker{State: "closed", MinimumRequests: 20, Override: "forced_open", Reason: "w0"})
	c.Expect(at(80), Desired{MinimumRequests: 20, Override: "forced_open", Reason: "w2"})
	c.Snapshot(at(81), "agent-0", Breaker{State: "closed", MinimumRequests: 20, Override: "forced_open", Reason: "w2"})
	wantViolations(t, "an old reason", until(92), 1, `shows minimumRequests 20, forced_open "w0"`)
	if n := len(c.Latencies()); n != 3 {
		t.Errorf("%d latencies, want 3 (agent-0's three)", n)
	}

	// An agent ahead of the soak (it applied a change the soak has not
	// read from etcd yet, a TTL's expiry or a write not yet acknowledged)
	// is not late: the bound runs from the change, and the agent must
	// also have differed that long.
	c.Snapshot(at(92.5), "agent-1", Breaker{State: "closed", MinimumRequests: 20, Override: "forced_open", Reason: "w2"})
	wantViolations(t, "both agents in step", until(100), 0, "")
	c.Expect(at(100), Desired{MinimumRequests: 20})
	c.Snapshot(at(100.5), "agent-0", Breaker{State: "closed", MinimumRequests: 20})
	c.Snapshot(at(100.5), "agent-1", Breaker{State: "closed", MinimumRequests: 20})
	wantViolations(t, "in step again", until(110), 0, "")
	c.Snapshot(at(110), "agent-0", Breaker{State: "closed", MinimumRequests: 50})
	c.Snapshot(at(110), "agent-1", Breaker{State: "closed", MinimumRequests: 50})
	wantViolations(t, "agents ahead of the soak", until(113), 0, "")
	c.Expect(at(113.5), Desired{MinimumRequests: 50}) // the soak read it late
	wantViolations(t, "the soak caught up", until(130), 0, "")

	// Writes faster than the bound: an agent that applies none of them
	// is late Bound after the first it missed, though each write is
	// younger than Bound when the next comes.
	for i := range 6 {
		d := Desired{MinimumRequests: uint32(60 + i)}
		s := 130 + 5*float64(i)
		c.Expect(at(s), d)
		c.Snapshot(at(s+0.5), "agent-0", Breaker{State: "closed", MinimumRequests: d.MinimumRequests})
		got := until(s + 5)
		if s+5 <= 141 {
			wantViolations(t, fmt.Sprintf("agent-1 missing writes for %vs", s+5-130), got, 0, "")
		} else if s+5 == 145 {
			wantViolations(t, "agent-1 missing writes for 15s, each younger than the bound", got, 1, "missed the changes of the last 1")
		}
	}

	// Acked writes must be in etcd.
	w := Write{Op: WriteForceOpen, Reason: "w9"}
	wantViolations(t, "acked and in etcd", c.Acked(at(100), w, Desired{Override: "forced_open", Reason: "w9"}), 0, "")
	wantViolations(t, "acked, not in etcd", c.Acked(at(100), w, Desired{Override: "forced_open", Reason: "w8"}), 1, "acknowledged")
	wantViolations(t, "clear acked, not in etcd", c.Acked(at(100), Write{Op: WriteClear}, Desired{Override: "forced_closed"}), 1, "acknowledged")
	wantViolations(t, "policy acked", c.Acked(at(100), Write{Op: WritePolicy, MinimumRequests: 30}, Desired{MinimumRequests: 30}), 0, "")
}

func TestWritePathChecker(t *testing.T) {
	e := &Exposure{}
	c := &WritePathChecker{Bound: 10 * time.Second}
	w := Write{Op: WriteClear}
	e.Window(PathControl, []string{Control}, at(10), at(20))
	wantViolations(t, "during the fault", c.Failed(at(15), w, 4, "unreachable", e), 0, "")
	wantViolations(t, "within the bound after it", c.Failed(at(25), w, 4, "unreachable", e), 0, "")
	wantViolations(t, "long after it", c.Failed(at(40), w, 4, "unreachable", e), 1, "exit 4")
}

func TestMembershipChecker(t *testing.T) {
	e := &Exposure{}
	c := &MembershipChecker{N: 3, Bound: 30 * time.Second}
	e.Window(PathMembership, []string{Fleet}, at(0), at(10))
	wantViolations(t, "right after a fault", c.Members(at(20), "agent-0", 2, e), 0, "")
	wantViolations(t, "quiet and complete", c.Members(at(41), "agent-0", 3, e), 0, "")
	wantViolations(t, "quiet and short of one", c.Members(at(42), "agent-1", 2, e), 1, "counts 2 agents")
	wantViolations(t, "reported once", c.Members(at(43), "agent-1", 2, e), 0, "")
	wantViolations(t, "healed, then short again", append(c.Members(at(44), "agent-1", 3, e), c.Members(at(45), "agent-1", 2, e)...), 1, "counts 2")
}

func TestDeadlineChecker(t *testing.T) {
	c := &DeadlineChecker{Slack: 100 * time.Millisecond}
	wantViolations(t, "early", c.Call(at(1), "agent-0/healthy", time.Second, 300*time.Millisecond), 0, "")
	wantViolations(t, "within the slack", c.Call(at(1), "agent-0/dead", time.Second, 1050*time.Millisecond), 0, "")
	wantViolations(t, "past the slack", c.Call(at(1), "agent-1/dead", time.Second, 1200*time.Millisecond), 1, "after 1.2s")
	if c.Max != 200*time.Millisecond || c.MaxSubject != "agent-1/dead" {
		t.Errorf("max overshoot %v at %s, want 200ms at agent-1/dead", c.Max, c.MaxSubject)
	}
}

func TestProcessChecker(t *testing.T) {
	c := &ProcessChecker{}
	wantViolations(t, "stopped by the soak", c.Exited(at(1), "agent-3", true, ""), 0, "")
	wantViolations(t, "died by itself", c.Exited(at(2), "agent-4", false, "exit status 2"), 1, "exit status 2")
}

func TestTrendChecker(t *testing.T) {
	c := &TrendChecker{Warmup: time.Minute, MinSpan: 5 * time.Minute}
	for i := range 60 { // 10 minutes, a sample every 10 s
		ts := at(float64(i * 10))
		// Flat with noise and a spike; leaking goroutines and files;
		// RSS that grows only in the warm-up.
		rss := int64(30 << 20)
		if i < 6 {
			rss = int64(10<<20) + int64(i)<<20
		}
		if i == 40 {
			rss = 200 << 20
		}
		c.Sample("agent-0", 0, ts, Resources{RSS: rss + int64(i%3)<<10, FDs: 20, Threads: 10, Goroutines: 50})
		c.Sample("agent-1", 0, ts, Resources{RSS: 30 << 20, FDs: 20 + int64(i), Threads: 10, Goroutines: 50 + int64(i)})
		c.Sample("etcd-0", 0, ts, Resources{RSS: int64(30<<20) + int64(i)<<20, FDs: 20, Threads: 10, Goroutines: -1})
		if i < 20 {
			c.Sample("agent-2", 1, ts, Resources{RSS: int64(i) << 24, FDs: 20, Goroutines: 50})
		}
	}
	trends, viols := c.Judge(at(600))
	byKey := map[string]Trend{}
	for _, tr := range trends {
		byKey[tr.Process] = tr
	}
	if tr := byKey["agent-0"]; !tr.Judged || len(tr.Grew) != 0 {
		t.Errorf("agent-0 (flat after its warm-up, one spike): judged %v, grew %v", tr.Judged, tr.Grew)
	}
	if tr := byKey["agent-1"]; !tr.Judged || strings.Join(tr.Grew, ",") != "goroutines,fds" {
		t.Errorf("agent-1 (leaks goroutines and files): grew %v, want goroutines,fds", tr.Grew)
	}
	if tr := byKey["etcd-0"]; strings.Join(tr.Grew, ",") != "rss" {
		t.Errorf("etcd-0 (RSS +1 MiB per sample): grew %v, want rss", tr.Grew)
	}
	if tr := byKey["agent-2"]; tr.Judged {
		t.Errorf("agent-2's 200 s series was judged (MinSpan 5m)")
	}
	if len(viols) != 3 {
		t.Errorf("%d violations, want 3: %+v", len(viols), viols)
	}
}

func TestExposureSettled(t *testing.T) {
	e := &Exposure{}
	id := e.Begin(PathEtcd, []string{"agent-0", "agent-1"}, at(10))
	if _, active := e.Settled(PathEtcd, "agent-0", at(0), at(12)); !active {
		t.Error("an ongoing fault is not active")
	}
	if _, active := e.Settled(PathGossip, "agent-0", at(0), at(12)); active {
		t.Error("a fault on another path is active")
	}
	e.End(id, at(20))
	e.End(id, at(30)) // keeps the first end
	if ref, active := e.Settled(PathEtcd, "agent-1", at(5), at(40)); active || !ref.Equal(at(20)) {
		t.Errorf("settled at %v (active %v), want %v", ref, active, at(20))
	}
	if ref, _ := e.Settled(PathEtcd, "agent-1", at(25), at(40)); !ref.Equal(at(25)) {
		t.Errorf("a fault before since moved ref to %v", ref)
	}
	if !e.Touched(PathEtcd, "agent-0", at(19), at(19)) || e.Touched(PathEtcd, "agent-0", at(21), at(40)) {
		t.Error("Touched is wrong at the fault's edges")
	}
}
