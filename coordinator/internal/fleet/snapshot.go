package fleet

import (
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/fusebox-dev/fusebox/protocol/convert"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// Tick does the view's periodic work at now: it drops rows older than
// 2×window (of each dependency's policy) and departed members past
// DepartedRetention, and derives half-open states (reporting transitions).
// The coordinator calls it about once a second; tests call it with a moved
// clock.
func (v *View) Tick(now time.Time, src Source) {
	var transitions []Transition
	v.mu.Lock()
	for dep, byNode := range v.rows {
		maxAge := 2 * src.Policy(dep).Breaker.Window.Std()
		for node, r := range byNode {
			if now.Sub(r.received) > maxAge {
				delete(byNode, node)
				v.nrows--
			}
		}
		if len(byNode) == 0 {
			delete(v.rows, dep)
		}
	}
	for dep, byZone := range v.records {
		b := src.Policy(dep).Breaker
		for zone, rec := range byZone {
			if t, changed := v.deriveLocked(recKey{dep, zone}, rec, rec.StateAt(b, now), now); changed {
				transitions = append(transitions, t)
			}
		}
	}
	v.trimDepartedLocked(now)
	v.mu.Unlock()
	v.emit(transitions)
}

// namesLocked returns every dependency the view knows of, from gossip and
// from etcd, sorted.
func (v *View) namesLocked(src Source) []string {
	set := make(map[string]struct{}, len(v.rows)+len(v.records))
	for dep := range v.rows {
		set[dep] = struct{}{}
	}
	for dep := range v.records {
		set[dep] = struct{}{}
	}
	for _, dep := range src.Dependencies() {
		if sharedstate.ValidateDependencyName(dep) == nil {
			set[dep] = struct{}{}
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// Snapshot returns the fleet at now: every dependency (or only the one
// named, when only is not empty; none when the view does not know it) and
// the members.
func (v *View) Snapshot(now time.Time, src Source, only string) *fuseboxv1.FleetSnapshot {
	v.mu.Lock()
	defer v.mu.Unlock()
	snap := &fuseboxv1.FleetSnapshot{At: timestamppb.New(now), Members: v.membersLocked()}
	names := v.namesLocked(src)
	if only != "" {
		if _, found := slices.BinarySearch(names, only); !found {
			return snap
		}
		names = []string{only}
	}
	for _, dep := range names {
		d := v.dependencyLocked(dep, now, src)
		snap.Dependencies = append(snap.Dependencies, d)
	}
	return snap
}

// dependencyLocked builds the view of one dependency. State is the
// breaker's own state as the gossip says (half-open derived with the
// policy); an override, which beats it, is reported beside it. With scope
// "zone" (one record per zone) it shows the most severe zone's record,
// its reason prefixed with the zone, and the probers of every half-open
// zone.
func (v *View) dependencyLocked(dep string, now time.Time, src Source) *fuseboxv1.DependencyView {
	pol := src.Policy(dep)
	window := pol.Breaker.Window.Std()
	d := &fuseboxv1.DependencyView{
		Dependency: dep,
		State:      fuseboxv1.BreakerState_BREAKER_STATE_CLOSED,
		Mode:       convert.Mode(pol.Breaker.Mode),
	}
	d.Breaker = convert.BreakerToProto(pol.Breaker)
	if rec, state, ok := shownRecord(v.records[dep], pol.Breaker, now); ok {
		d.State = convert.BreakerState(state)
		d.Generation = rec.Generation
		d.OpenCount = rec.OpenCount
		d.Reason = rec.Reason
		if rec.Zone != "" {
			d.Reason = "zone " + rec.Zone + ": " + rec.Reason
		}
		if !rec.Since.IsZero() && rec.Since.Unix() > 0 {
			d.Since = timestamppb.New(rec.Since)
		}
		if state != sharedstate.Closed {
			if !rec.IncidentStart.IsZero() && rec.IncidentStart.Unix() > 0 {
				d.IncidentStart = timestamppb.New(rec.IncidentStart)
			}
			d.Trip = convert.TripToProto(rec.Trip)
		} else if p, until, ok := ramp(rec, pol.Breaker, now); ok {
			d.RampProbability, d.RampUntil = p, timestamppb.New(until)
		}
	}
	if o, ok := src.Override(dep, now); ok {
		d.Override = convert.OverrideState(o.State)
		d.OverrideReason = o.Reason
		d.OverrideActor = o.Actor
		if !o.Created.IsZero() {
			d.OverrideCreated = timestamppb.New(o.Created)
		}
		if !o.Expires.IsZero() {
			d.OverrideExpires = timestamppb.New(o.Expires)
		}
	}

	var (
		fleet    sharedstate.Counts
		inFlight uint64
	)
	zones := map[string]sharedstate.Counts{}
	traffic := map[string][]string{} // zone → nodes with live rows and traffic: probers are drawn from them
	localOpen := map[string]bool{}   // nodes whose node-local breaker is open
	nodes := make([]*fuseboxv1.NodeView, 0, len(v.rows[dep]))
	for node, r := range v.rows[dep] {
		if now.Sub(r.received) > 2*window {
			continue
		}
		fleet = fleet.Plus(r.counts)
		if inFlight += r.inFlight; inFlight < r.inFlight {
			inFlight = ^uint64(0) // saturate
		}
		zones[r.zone] = zones[r.zone].Plus(r.counts)
		if !r.counts.IsZero() {
			traffic[r.zone] = append(traffic[r.zone], node)
		}
		if r.local {
			d.NodeLocalOpen = append(d.NodeLocalOpen, node)
			localOpen[node] = true
		}
		nodes = append(nodes, &fuseboxv1.NodeView{Node: node, Zone: r.zone, Counts: convert.CountsToProto(r.counts),
			NodeLocalOpen: r.local, InFlight: r.inFlight})
	}
	slices.Sort(d.NodeLocalOpen)
	d.Fleet = convert.CountsToProto(fleet)
	d.FailureRate = fleet.FailureRate()
	d.SlowRate = fleet.SlowCallRate()
	d.RetryBudget = retryBudget(pol, fleet)
	d.BudgetUsed = budgetUsed(pol, fleet)
	// Throttling and the concurrency limit over the fleet's rows (for scope
	// zone the agents apply them per zone; this is the fleet-wide figure).
	d.ThrottleEnabled = pol.Throttle.Enabled
	if pol.Throttle.Enabled {
		d.ThrottleProbability = pol.Throttle.ThrottleProbability(fleet)
	}
	d.InFlight = inFlight
	d.MaxInFlight = uint32(min(max(pol.Concurrency.MaxInFlight, 0), 1<<31))
	for zone, rec := range v.records[dep] {
		if rec.StateAt(pol.Breaker, now) != sharedstate.HalfOpen {
			continue
		}
		var withTraffic []string
		for z, nodes := range traffic {
			if zone == "" || z == zone {
				withTraffic = append(withTraffic, nodes...)
			}
		}
		d.Probers = append(d.Probers, Probers(dep, rec, pol.Breaker, now, withTraffic, func(n string) bool { return localOpen[n] })...)
	}
	slices.Sort(d.Probers)
	probers := map[string]bool{}
	for _, p := range d.Probers {
		probers[p] = true
	}
	for _, n := range nodes {
		n.Prober = probers[n.Node]
	}
	slices.SortFunc(nodes, func(a, b *fuseboxv1.NodeView) int { return strings.Compare(a.Node, b.Node) })
	d.Nodes = nodes
	for _, z := range slices.Sorted(maps.Keys(zones)) {
		d.Zones = append(d.Zones, &fuseboxv1.ZoneView{Zone: z, Counts: convert.CountsToProto(zones[z])})
	}
	return d
}

// shownRecord picks the record a dependency's view shows: the most severe
// state (open, then half-open, then closed), then the higher generation,
// then the fleet-wide record before a zone's, then the lower zone.
func shownRecord(byZone map[string]sharedstate.BreakerRecord, b sharedstate.BreakerPolicy, now time.Time) (sharedstate.BreakerRecord, sharedstate.BreakerState, bool) {
	severity := map[sharedstate.BreakerState]int{sharedstate.Closed: 0, sharedstate.HalfOpen: 1, sharedstate.Open: 2}
	var (
		best      sharedstate.BreakerRecord
		bestState sharedstate.BreakerState
		found     bool
	)
	for _, rec := range byZone {
		st := rec.StateAt(b, now)
		if found {
			if sb, sr := severity[bestState], severity[st]; sr < sb ||
				(sr == sb && (rec.Generation < best.Generation ||
					(rec.Generation == best.Generation && rec.Zone > best.Zone))) {
				continue
			}
		}
		best, bestState, found = rec, st, true
	}
	return best, bestState, found
}

// retryBudget is the fleet's retry budget over the window, in retries:
// max(minRetriesPerSecond × window, ratio × firstAttempts).
func retryBudget(p sharedstate.Policy, c sharedstate.Counts) float64 {
	b := p.Retry.Budget
	return max(b.MinRetriesPerSecond*p.Breaker.Window.Std().Seconds(), b.Ratio*float64(c.FirstAttempts))
}

// budgetUsed is the fleet's retries over the window divided by the fleet
// retry budget (retryBudget). It exceeds 1 when the fleet retried more than
// the budget the coordinator computes from its own view of the window:
// each agent admits retries by its own share of what it saw.
func budgetUsed(p sharedstate.Policy, c sharedstate.Counts) float64 {
	budget := retryBudget(p, c)
	if budget <= 0 {
		if c.Retries > 0 {
			return 1
		}
		return 0
	}
	return float64(c.Retries) / budget
}

// ramp is the ramp after a close as the agents apply it: for
// breaker.rampDuration after the close of a record (generation > 0), the
// share of first attempts refused (BreakerPolicy.RampRefusal) and when the
// ramp ends. Each agent ramps from when it learned of the close, a gossip
// round or so after the record's since.
func ramp(rec sharedstate.BreakerRecord, b sharedstate.BreakerPolicy, now time.Time) (float64, time.Time, bool) {
	if rec.State != sharedstate.Closed || rec.Generation == 0 || rec.Since.IsZero() {
		return 0, time.Time{}, false
	}
	elapsed := now.Sub(rec.Since)
	p := b.RampRefusal(max(0, elapsed))
	if p <= 0 {
		return 0, time.Time{}, false
	}
	return p, rec.Since.Add(b.RampDuration.Std()), true
}

// Probers returns the members holding probe permits of a half-open
// breaker at now, as the agents compute them: the top halfOpenProbes by
// rendezvous hash of (dependency, generation, probe round) among the
// candidates sharedstate.ProbeCandidates draws from withTraffic (the
// members with traffic in the record's scope): not the node whose failed
// probe reopened the breaker, nor a node whose own breaker is open
// (isLocalOpen; nil: none), while another node with traffic is left. The
// round advances every probeTimeout since the breaker turned half-open.
func Probers(dep string, rec sharedstate.BreakerRecord, b sharedstate.BreakerPolicy, now time.Time,
	withTraffic []string, isLocalOpen func(node string) bool) []string {
	at := rec.HalfOpenAt(b)
	if now.Before(at) || len(withTraffic) == 0 {
		return nil
	}
	var round uint64
	if pt := b.ProbeTimeout.Std(); pt > 0 {
		round = uint64(now.Sub(at) / pt)
	}
	return sharedstate.ProbeHolders(dep, rec.Generation, round, sharedstate.ProbeCandidates(rec, withTraffic, isLocalOpen), b.HalfOpenProbes)
}
