package sharedstate

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// probeFleet is a few engines on one clock whose breaker tripped, with
// callers at every node making a request every step: from snapshots, as
// clientlib does, probes through AcquireProbe, answered after probeRTT.
// failing says whose calls fail. Rows and records reach every engine at
// each step (RowsToSend, UrgentRows, Tick's records): a fast network.
type probeFleet struct {
	t       tb
	dep     string
	clock   *ManualClock
	nodes   []*Engine
	pol     Policy
	failing func(node int) bool
	rtt     func(node int) time.Duration // nil: probeRTT
	pending []pendingProbe
	records []BreakerRecord // every record proposed, in order
	// refused[i]: how long node i's callers were refused in a row at
	// most, and since when they are now (zero: admitted last).
	longest      []time.Duration
	refusedSince []time.Time
	// permits checks at every step that the engines' permits are
	// ProbeHolders over ProbeCandidates.
	checkPermits bool
}

type pendingProbe struct {
	node int
	at   time.Time
	o    Outcome
}

const (
	probeFleetStep = 50 * time.Millisecond
	probeRTT       = 100 * time.Millisecond
)

func newProbeFleet(t tb, dep string, names []string, pol Policy, failing func(int) bool) *probeFleet {
	f := &probeFleet{t: t, dep: dep, clock: NewManualClock(t0), pol: pol, failing: failing,
		longest: make([]time.Duration, len(names)), refusedSince: make([]time.Time, len(names))}
	var members []Member
	for _, n := range names {
		members = append(members, Member{Node: n})
	}
	for _, n := range names {
		e := newTestEngine(t, n, "", f.clock, func(c *EngineConfig) { c.DefaultPolicy = &f.pol })
		e.SetMembers(members)
		f.nodes = append(f.nodes, e)
	}
	return f
}

// trip opens the fleet's breaker: every node's calls fail until it does.
func (f *probeFleet) trip() BreakerRecord {
	f.t.Helper()
	for _, e := range f.nodes {
		record(f.t, e, f.dep, FirstAttempt, Failure, f.pol.Breaker.MinimumRequests)
	}
	f.exchange()
	for range 10 {
		f.exchange()
		if r := f.nodes[0].Snapshot(f.dep); r != nil && r.State == Open {
			return f.nodes[0].Records()[0]
		}
	}
	f.t.Fatalf("the breaker did not open")
	return BreakerRecord{}
}

// exchange ticks every engine and delivers its records and rows to all.
func (f *probeFleet) exchange() {
	var recs []BreakerRecord
	var rows []NodeWindow
	for _, e := range f.nodes {
		recs = append(recs, e.Tick()...)
		rows = append(rows, e.RowsToSend()...)
		rows = append(rows, e.UrgentRows()...)
	}
	f.deliver(recs, rows)
}

func (f *probeFleet) deliver(recs []BreakerRecord, rows []NodeWindow) {
	for _, r := range recs {
		if len(f.records) == 0 || !SameRecord(f.records[len(f.records)-1], r) {
			f.records = append(f.records, r)
		}
		for _, e := range f.nodes {
			e.ApplyRecord(r)
		}
	}
	for _, r := range rows {
		for _, e := range f.nodes {
			e.ApplyRow(r)
		}
	}
}

// step moves the clock one step: probe answers due, one request per node,
// an exchange.
func (f *probeFleet) step() {
	now := f.clock.Advance(probeFleetStep)
	rest := f.pending[:0]
	for _, p := range f.pending {
		if p.at.After(now) {
			rest = append(rest, p)
			continue
		}
		e := f.nodes[p.node]
		if err := e.Record(f.dep, Probe, p.o); err != nil {
			f.t.Fatalf("Record: %v", err)
		}
		if r, ok := e.ProbeOutcome(f.dep, p.o); ok {
			f.deliver([]BreakerRecord{r}, nil) // a transition goes straight out
		}
	}
	f.pending = rest
	if f.checkPermits {
		f.assertPermits()
	}
	for i, e := range f.nodes {
		o := Success
		if f.failing(i) {
			o = Failure
		}
		admitted := false
		switch d := e.Snapshot(f.dep).DecideFirst(); d.Verdict {
		case Allow:
			admitted = true
			if err := e.Record(f.dep, FirstAttempt, o); err != nil {
				f.t.Fatalf("Record: %v", err)
			}
		case AllowProbe:
			if p := e.AcquireProbe(f.dep); p.Verdict == AllowProbe {
				admitted = true
				rtt := probeRTT
				if f.rtt != nil {
					rtt = f.rtt(i)
				}
				f.pending = append(f.pending, pendingProbe{node: i, at: now.Add(rtt), o: o})
			}
		default:
			record(f.t, e, f.dep, FirstAttempt, Rejected, 1)
		}
		switch {
		case admitted:
			f.refusedSince[i] = time.Time{}
		case f.refusedSince[i].IsZero():
			f.refusedSince[i] = now
		default:
			f.longest[i] = max(f.longest[i], now.Sub(f.refusedSince[i]))
		}
	}
	f.exchange()
}

func (f *probeFleet) run(d time.Duration) {
	end := f.clock.Now().Add(d)
	for f.clock.Now().Before(end) {
		f.step()
	}
}

// assertPermits checks that every node's probe permit is what ProbeHolders
// over ProbeCandidates says, with the node's own view of who has traffic
// and whose node-local breaker is open.
func (f *probeFleet) assertPermits() {
	f.t.Helper()
	for i, e := range f.nodes {
		s := e.Snapshot(f.dep)
		if s == nil || s.State != HalfOpen {
			continue
		}
		rec := e.Records()[0]
		var traffic []string
		local := map[string]bool{}
		for _, r := range e.Rows(f.dep) {
			if !r.Counts.IsZero() {
				traffic = append(traffic, r.Node)
			}
			local[r.Node] = r.LocalOpen
		}
		holders := ProbeHolders(f.dep, rec.Generation, s.ProbeRound,
			ProbeCandidates(rec, traffic, func(n string) bool { return local[n] }), f.pol.Breaker.HalfOpenProbes)
		d := e.deps.load(f.dep)
		d.mu.Lock()
		_, holds, _, _ := d.probeTurn(e, rec, f.clock.Now())
		d.mu.Unlock()
		if holds != slices.Contains(holders, e.Node()) {
			f.t.Fatalf("%v: node %d holds a permit: %v; ProbeHolders over ProbeCandidates: %v (record %+v)",
				f.clock.Now().Sub(t0), i, holds, holders, rec)
		}
	}
}

// halfOpenPolicy is the default policy with a short round, as the agent
// tests use.
func halfOpenPolicy() Policy {
	return *policyWith(func(p *Policy) {
		p.Breaker.MinimumRequests = 10
		p.Breaker.ProbeTimeout = Duration(2 * time.Second)
		p.Retry.PerAttemptTimeout = Duration(300 * time.Millisecond)
	})
}

// depRankingFirst returns a dependency name for which member ranks first
// for probes of generations 1 to gens, round 0, among members.
func depRankingFirst(t tb, member string, members []string, gens uint64) string {
	t.Helper()
	for i := range 100000 {
		name := fmt.Sprintf("dep-%d", i)
		ok := true
		for g := uint64(1); g <= gens && ok; g++ {
			ok = ProbeHolders(name, g, 0, members, 1)[0] == member
		}
		if ok {
			return name
		}
	}
	t.Fatalf("no dependency name ranks %s first for %d generations", member, gens)
	return ""
}

// TestOneFailingProberDoesNotHoldTheBreakerOpen: in a fleet whose breaker
// tripped, one node's calls keep failing (its network, or a local process
// reporting failures under the dependency's name) while the others' all
// succeed, and the failing node ranks first for the probes of every
// generation. Its failed probe reopens the breaker once; the next
// generation's permits go to the others, whose probes close it. The
// healthy nodes are refused for at most one open duration and one probe
// round after that reopen, and the failing node's own breaker opens
// instead.
func TestOneFailingProberDoesNotHoldTheBreakerOpen(t *testing.T) {
	names := []string{"x", "h1", "h2", "h3"}
	pol := halfOpenPolicy()
	f := newProbeFleet(t, depRankingFirst(t, "x", names, 8), names, pol, func(i int) bool { return i == 0 })
	f.checkPermits = true
	trip := f.trip()
	f.run(20 * time.Second)
	t.Logf("records of %s: %s", f.dep, describeRecords(f.records))
	b := pol.Breaker
	var reopen, closed BreakerRecord
	for _, r := range f.records {
		switch {
		case r.State == Open && r.OpenCount >= 2 && reopen.Generation == 0:
			reopen = r
		case r.State == Closed && closed.Generation == 0:
			closed = r
		}
	}
	if reopen.Origin != "x" || reopen.Generation != trip.Generation+1 {
		t.Fatalf("the first reopen is %+v: want the failing node's, right after the trip (the test exercises nothing)", reopen)
	}
	if closed.Generation != reopen.Generation+1 {
		t.Fatalf("closed at generation %d (%+v): want right after the failing node's reopen %d", closed.Generation, closed, reopen.Generation)
	}
	bound := b.FleetOpenDurationFor(reopen.OpenCount) + b.ProbeTimeout.Std()
	if took := closed.Since.Sub(reopen.Since); took > bound {
		t.Errorf("closed %v after the failing node's reopen, want at most one open duration and one probe round (%v)", took, bound)
	}
	for i := 1; i < len(names); i++ {
		// Refused from the trip's round to the reopen, then until the close.
		if limit := b.FleetOpenDurationFor(1) + b.ProbeTimeout.Std() + bound; f.longest[i] > limit {
			t.Errorf("healthy node %s refused for %v in a row, want at most %v", names[i], f.longest[i], limit)
		}
		if s := f.nodes[i].Snapshot(f.dep); !fullyAdmits(s) {
			t.Errorf("healthy node %s at the end: %+v, want every first attempt admitted", names[i], s)
		}
	}
	if s := f.nodes[0].Snapshot(f.dep); s.State != Closed || s.LocalState == Closed {
		t.Errorf("the failing node at the end: fleet %v, its own breaker %v: want the fleet's closed and its own open", s.State, s.LocalState)
	}
}

// TestFailedProbeAmongSuccessesOpensOnlyItsNode: once another node's probe
// succeeded, a node whose probe fails opens its own breaker and leaves the
// fleet's half-open; it holds no permit while its own breaker is open, and
// its own breaker stays open when the others' probes close the fleet's.
// A second node's failed probe reopens the fleet's breaker: the dependency
// fails for more than one node.
func TestFailedProbeAmongSuccessesOpensOnlyItsNode(t *testing.T) {
	names := []string{"h1", "x", "h2"}
	pol := halfOpenPolicy()
	pol.Breaker.ProbeSuccessThreshold = 6 // h1 alone needs a while: the others probe meanwhile
	for _, tc := range []struct {
		name       string
		failing    []int
		wantClosed bool
	}{
		{"one failing node", []int{1}, true},
		{"two failing nodes", []int{1, 2}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// h1 ranks first: its success is known before the others probe.
			f := newProbeFleet(t, depRankingFirst(t, "h1", names, 1), names, pol, func(i int) bool { return slices.Contains(tc.failing, i) })
			f.checkPermits = true
			// h2's probes answer later than x's: its failure comes after
			// x's reached every node.
			f.rtt = func(i int) time.Duration { return time.Duration(1+i) * probeRTT }
			trip := f.trip()
			f.clock.Set(trip.HalfOpenAt(pol.Breaker))
			for range 40 {
				f.step()
				if f.records[len(f.records)-1].Generation > trip.Generation {
					break
				}
			}
			t.Logf("records of %s: %s", f.dep, describeRecords(f.records))
			next := f.records[len(f.records)-1]
			if next.Generation != trip.Generation+1 {
				t.Fatalf("no transition after the trip: %s", describeRecords(f.records))
			}
			if got := next.State == Closed; got != tc.wantClosed {
				t.Fatalf("after the trip: %+v, want closed %v", next, tc.wantClosed)
			}
			x := f.nodes[1].Snapshot(f.dep)
			if tc.wantClosed && (x.LocalState == Closed || next.Origin == "x") {
				t.Errorf("the failing node: own breaker %v, the close proposed by %s: want its own open, the close not its", x.LocalState, next.Origin)
			}
			if !tc.wantClosed && next.OpenCount != trip.OpenCount+1 {
				t.Errorf("reopen %+v: want open count %d", next, trip.OpenCount+1)
			}
		})
	}
}

func describeRecords(rs []BreakerRecord) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "\n  gen %d %s origin %s openCount %d at %v: %s", r.Generation, r.State, r.Origin, r.OpenCount, r.Since.Sub(t0), r.Reason)
	}
	return b.String()
}

// TestPropOneFailingProberReopensAtMostOnceInARow: whatever the fleet (2 to
// 6 nodes), the node whose calls fail, the dependency's name (which ranks
// the probers), the probe round and the moment the dependency recovers for
// the others: every node's permit is ProbeHolders over ProbeCandidates; the
// failing node never reopens the breaker twice in a row; once the others'
// calls succeed (and the probes sent before have failed) the breaker
// closes within two generations, and no healthy node is refused longer
// than two open durations and probe rounds, and the ramp, after the
// recovery.
func TestPropOneFailingProberReopensAtMostOnceInARow(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(2, 6).Draw(rt, "nodes")
		var names []string
		for i := range n {
			names = append(names, fmt.Sprintf("n%d", i))
		}
		bad := rapid.IntRange(0, n-1).Draw(rt, "failing")
		name := fmt.Sprintf("dep-%d", rapid.IntRange(0, 1000).Draw(rt, "dependency"))
		pol := halfOpenPolicy()
		pol.Breaker.HalfOpenProbes = rapid.IntRange(1, 3).Draw(rt, "halfOpenProbes")
		pol.Breaker.ProbeSuccessThreshold = rapid.IntRange(1, 3).Draw(rt, "probeSuccessThreshold")
		recovered := false
		f := newProbeFleet(rt, name, names, pol, func(i int) bool { return i == bad || !recovered })
		f.checkPermits = true
		trip := f.trip()
		f.run(time.Duration(rapid.IntRange(0, 200).Draw(rt, "steps dead")) * probeFleetStep)
		recovered = true
		upAt := f.clock.Now()
		f.longest = make([]time.Duration, n)
		for i := range f.refusedSince {
			if !f.refusedSince[i].IsZero() {
				f.refusedSince[i] = upAt // count from the recovery
			}
		}
		f.run(probeRTT) // probes sent before the recovery fail
		from := len(f.records)
		f.run(30 * time.Second)
		after := f.records[from:]
		for i := 1; i < len(f.records); i++ {
			a, b := f.records[i-1], f.records[i]
			if b.Generation > trip.Generation && failedProber(a) == names[bad] && failedProber(b) == names[bad] {
				rt.Fatalf("the failing node reopened twice in a row: %s", describeRecords(f.records))
			}
		}
		closedAt := -1
		for i, r := range after {
			if r.State == Closed {
				closedAt = i
				break
			}
		}
		if closedAt < 0 || closedAt > 1 {
			rt.Fatalf("after the recovery at %v: %s; want a close within two generations", upAt.Sub(t0), describeRecords(after))
		}
		b := pol.Breaker
		limit := 2*(b.FleetOpenDurationFor(2)+b.ProbeTimeout.Std()) + b.RampDuration.Std() + probeRTT + 2*probeFleetStep
		for i := range n {
			if i != bad && f.longest[i] > limit {
				rt.Fatalf("healthy node %s refused %v in a row after the recovery, want at most %v: %s", names[i], f.longest[i], limit, describeRecords(f.records))
			}
		}
	})
}
