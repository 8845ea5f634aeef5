package sharedstate

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// What an operator needs to read an open breaker: what it tripped on and
// when the incident began. The node that trips a breaker writes both into
// the open record it proposes (BreakerRecord.Trip, IncidentStart), and the
// re-opens that follow failed probes carry them on, so they reach every
// member and the coordinator with the record and last until the breaker
// closes. Records proposed by builds without them carry neither.

// Bounds on TripEvidence's node names, so that an open record still fits
// one gossip packet: the nodes that failed most come first, and
// FailingNodeCount says how many there were.
const (
	MaxTripNodes     = 8
	MaxTripNodeBytes = 512
)

// TripEvidence is what the trip rule decided a trip on: the counts it
// pooled over the horizon that tripped (the window, or a fast-path suffix
// of it), the policy's settings it compared them with, and the nodes whose
// own counts met a threshold there. It is immutable once in a record.
type TripEvidence struct {
	// Requests (successes + failures), Failures and SlowCalls pooled over
	// Horizon from Nodes nodes with requests.
	Requests  uint64 `json:"requests"`
	Failures  uint64 `json:"failures"`
	SlowCalls uint64 `json:"slowCalls"`
	Nodes     uint32 `json:"nodes"`
	// Slow: the slow-call rate tripped it, else the failure rate.
	Slow bool `json:"slow,omitempty"`
	// The policy's trip rule at the trip.
	FailureRateThreshold  float64 `json:"failureRateThreshold"`
	SlowCallRateThreshold float64 `json:"slowCallRateThreshold"`
	MinimumRequests       uint32  `json:"minimumRequests"`
	MinFailingNodes       uint32  `json:"minFailingNodes"`
	// Confidence (0: the classic rule, which compares the rate itself) and
	// the lower bound of the rate that tripped, compared in its stead.
	Confidence float64 `json:"confidence,omitempty"`
	LowerBound float64 `json:"lowerBound,omitempty"`
	// Horizon is how much of the window was counted: the window, or the
	// fast path's suffix (FastPath) that tripped.
	Horizon  time.Duration `json:"horizon"`
	FastPath bool          `json:"fastPath,omitempty"`
	// FailingNodes are the nodes whose own counts met a threshold over the
	// horizon, the most failures first (ties by name), at most
	// MaxTripNodes and MaxTripNodeBytes of names; FailingNodeCount counts
	// them all.
	FailingNodes     []string `json:"failingNodes,omitempty"`
	FailingNodeCount uint32   `json:"failingNodeCount"`
}

// FailureRate is Failures / Requests (0 without requests).
func (t *TripEvidence) FailureRate() float64 { return ratio(t.Failures, t.Requests) }

// SlowCallRate is SlowCalls / Requests (0 without requests).
func (t *TripEvidence) SlowCallRate() float64 { return ratio(t.SlowCalls, t.Requests) }

// String is the evidence in a line: "failure rate 0.80 >= 0.50 over 40
// requests (window 10s) from 2 failing node(s): agent-0, agent-1".
func (t *TripEvidence) String() string {
	what, rate, thr := "failure rate", t.FailureRate(), t.FailureRateThreshold
	if t.Slow {
		what, rate, thr = "slow-call rate", t.SlowCallRate(), t.SlowCallRateThreshold
	}
	horizon := "window " + t.Horizon.String()
	if t.FastPath {
		horizon = "fast path, last " + t.Horizon.String()
	}
	s := fmt.Sprintf("%s %.2f >= %.2f over %d requests (%s) from %d failing node(s)", what, rate, thr, t.Requests, horizon, t.FailingNodeCount)
	if t.Confidence > 0 {
		s = fmt.Sprintf("%s %.2f (lower bound %.2f at %g%% confidence) >= %.2f over %d requests (%s) from %d failing node(s)",
			what, rate, t.LowerBound, 100*t.Confidence, thr, t.Requests, horizon, t.FailingNodeCount)
	}
	if len(t.FailingNodes) > 0 {
		s += ": " + strings.Join(t.FailingNodes, ", ")
		if n := int(t.FailingNodeCount) - len(t.FailingNodes); n > 0 {
			s += fmt.Sprintf(" and %d more", n)
		}
	}
	return s
}

// validate lists what is wrong with evidence received from elsewhere.
func (t *TripEvidence) validate() []string {
	var problems []string
	if t.Failures > t.Requests || t.SlowCalls > t.Requests {
		problems = append(problems, fmt.Sprintf("trip: %d failures and %d slow calls of %d requests", t.Failures, t.SlowCalls, t.Requests))
	}
	for _, r := range []struct {
		name string
		v    float64
	}{{"failureRateThreshold", t.FailureRateThreshold}, {"slowCallRateThreshold", t.SlowCallRateThreshold},
		{"confidence", t.Confidence}, {"lowerBound", t.LowerBound}} {
		if math.IsNaN(r.v) || r.v < 0 || r.v > 1 {
			problems = append(problems, fmt.Sprintf("trip: %s %v: want a rate in [0, 1]", r.name, r.v))
		}
	}
	if t.Horizon < 0 {
		problems = append(problems, fmt.Sprintf("trip: horizon %v is negative", t.Horizon))
	}
	if len(t.FailingNodes) > MaxTripNodes || namesBytes(t.FailingNodes) > MaxTripNodeBytes {
		problems = append(problems, fmt.Sprintf("trip: %d failing node names of %d bytes, at most %d and %d", len(t.FailingNodes),
			namesBytes(t.FailingNodes), MaxTripNodes, MaxTripNodeBytes))
	}
	if uint64(t.FailingNodeCount) < uint64(len(t.FailingNodes)) {
		problems = append(problems, fmt.Sprintf("trip: failing node count %d below the %d names", t.FailingNodeCount, len(t.FailingNodes)))
	}
	for _, n := range t.FailingNodes {
		if n == "" || len(n) > MaxNodeNameLen {
			problems = append(problems, fmt.Sprintf("trip: failing node name of %d bytes: want 1 to %d", len(n), MaxNodeNameLen))
			break
		}
	}
	return problems
}

func namesBytes(names []string) int {
	n := 0
	for _, s := range names {
		n += len(s)
	}
	return n
}

// tripNode is a node whose own counts met a threshold, with its failures
// (or slow calls) over the horizon.
type tripNode struct {
	name   string
	failed uint64
}

// setFailingNodes keeps the nodes that failed most, within the bounds.
func (t *TripEvidence) setFailingNodes(nodes []tripNode) {
	slices.SortFunc(nodes, func(a, b tripNode) int {
		return cmp.Or(cmp.Compare(b.failed, a.failed), strings.Compare(a.name, b.name))
	})
	t.FailingNodeCount = uint32(min(len(nodes), math.MaxUint32))
	t.FailingNodes = nil
	used := 0
	for _, n := range nodes {
		if len(t.FailingNodes) == MaxTripNodes || used+len(n.name) > MaxTripNodeBytes {
			break
		}
		t.FailingNodes = append(t.FailingNodes, n.name)
		used += len(n.name)
	}
}

// carryIncident fills what an open record p proposed over cur carries on:
// a trip starts an incident (IncidentStart is its since, Trip the evidence
// of what the last trips found), and a re-open after a failed probe keeps
// the incident's start and evidence. A close carries neither.
func (d *depState) carryIncident(e *Engine, now time.Time, p *BreakerRecord, cur BreakerRecord) {
	found := d.found
	d.found = tripFound{}
	if p.State != Open {
		return
	}
	if cur.State != Open {
		p.IncidentStart = p.Since
		if found.why != "" {
			p.Trip = d.evidence(e, now.UnixNano(), found, cur.Generation)
		}
		return
	}
	p.IncidentStart, p.Trip = cur.IncidentStart, cur.Trip
	if p.IncidentStart.IsZero() && cur.OpenCount == 1 {
		p.IncidentStart = cur.Since // proposed by a build without it: that open was the trip
	}
}

// evidence is the TripEvidence of what trips found at now, for the rows
// of generation minGen or newer that it pooled (this node's own included):
// the nodes that met a threshold over the horizon that tripped.
func (d *depState) evidence(e *Engine, now int64, f tripFound, minGen uint64) *TripEvidence {
	b := &d.pol.Breaker
	ev := &TripEvidence{
		Requests: f.c.Requests(), Failures: f.c.Failures, SlowCalls: f.c.SlowCalls, Nodes: uint32(max(0, f.nodes)), Slow: f.slow,
		FailureRateThreshold: b.FailureRateThreshold, SlowCallRateThreshold: b.SlowCallRateThreshold,
		MinimumRequests: uint32(max(0, b.MinimumRequests)), MinFailingNodes: uint32(max(0, b.MinFailingNodes)),
		Horizon: b.Window.Std(),
	}
	if d.z.whole > 0 {
		ev.Confidence, ev.LowerBound = b.Confidence, min(1, max(0, f.compared))
	}
	failed := func(c Counts) uint64 {
		if f.slow {
			return c.SlowCalls
		}
		return c.Failures
	}
	var nodes []tripNode
	stale := 2 * int64(b.Window)
	if f.k < 0 {
		if own := d.ownTotals(now); nodeFailing(b, own) {
			nodes = append(nodes, tripNode{e.node, failed(own)})
		}
		for i := range d.rows {
			if r := &d.rows[i]; now-r.received < stale && d.inScope(r, minGen) && r.failing {
				nodes = append(nodes, tripNode{r.Node, failed(r.Counts)})
			}
		}
	} else {
		fw := d.fine.width
		ev.FastPath, ev.Horizon = true, time.Duration((int64(1)<<f.k)*fw)
		suffix := func(name string, r *Recent, age int64, bits uint8) {
			if j, ok := suffixFor(f.k, age, fw); ok && bits>>j&1 != 0 {
				c := r[j]
				nodes = append(nodes, tripNode{name, failed(Counts{Failures: uint64(c.Failures), SlowCalls: uint64(c.SlowCalls)})})
			}
		}
		suffix(e.node, &d.fine.recent, 0, fastFailingBits(b, &d.fine.recent))
		for i := range d.rows {
			if r := &d.rows[i]; now-r.received < stale && d.inScope(r, minGen) {
				suffix(r.Node, &r.Recent, now-r.received, r.fastFailing)
			}
		}
	}
	ev.setFailingNodes(nodes)
	return ev
}
