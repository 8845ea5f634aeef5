package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/fusebox-dev/fusebox/coordinator/internal/history"
	"github.com/fusebox-dev/fusebox/coordinator/internal/replay"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// What-if: the fleet history (package history) and the replay of a policy
// over it (package replay), behind the Admin API's SimulatePolicy and
// POST /api/v1/simulate.

const (
	// maxSimulations is how many simulations run at once; more are
	// refused (ResourceExhausted), never queued.
	maxSimulations = 2
	// DefaultSimulateSince is how far back SimulatePolicy replays by default.
	DefaultSimulateSince = time.Hour
)

// errSimulationsBusy: maxSimulations are running.
var errSimulationsBusy = errors.New("coordinator: simulation refused")

// pinned is the history's Config.Pinned: a dependency with a stored policy
// or an override in force keeps its history whatever its traffic.
func (c *Coordinator) pinned(dep string) bool {
	if c.cache == nil {
		return false
	}
	if _, ok := c.cache.storedPolicy(dep); ok {
		return true
	}
	_, ok := c.cache.Override(dep, c.clock.Now())
	return ok
}

// settled is where a replay ends: whole seconds (the coarse slots) before
// which the history no longer changes.
func (c *Coordinator) settled() time.Time {
	return c.clock.Now().Add(-history.Settle).Truncate(history.CoarseStep)
}

// observeRow is the fleet view's OnRow: the row goes into the history.
func (c *Coordinator) observeRow(r sharedstate.NodeWindow, at time.Time) {
	if r.Validate() != nil {
		return
	}
	c.history.ObserveRow(at, r, c.cache.Policy(r.Dependency).Breaker.Window.Std())
}

// seedHistory puts the overrides in force at start into the history (the
// later ones come as events).
func (c *Coordinator) seedHistory() {
	now := c.clock.Now()
	for _, o := range c.cache.overridesInForce(now) {
		c.history.ObserveOverride(now, o.Dependency, o.State, o.Reason, o.Expires)
	}
}

// simulate is SimulatePolicy.
func (c *Coordinator) simulate(ctx context.Context, req *fuseboxv1.SimulatePolicyRequest) (*fuseboxv1.SimulatePolicyResponse, error) {
	data := req.GetPolicyJson()
	var doc struct {
		Dependency string `json:"dependency"`
	}
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: no policy to simulate (policy_json is empty)", ErrInvalidRequest)
	}
	_ = json.Unmarshal(data, &doc) // a document that is not JSON is refused below, with its violations
	dep := req.GetDependency()
	if dep == "" {
		dep = doc.Dependency
	}
	switch dep {
	case "":
		return nil, fmt.Errorf("%w: name the dependency to replay (dependency, or the policy's \"dependency\" field)", ErrInvalidRequest)
	case sharedstate.DefaultPolicyName:
		return nil, fmt.Errorf("%w: a proposed fleet default is replayed over a dependency: name one", ErrInvalidRequest)
	}
	if err := sharedstate.ValidateDependencyName(dep); err != nil {
		return nil, err
	}
	since := DefaultSimulateSince
	if d := req.GetSince(); d != nil {
		if err := d.CheckValid(); err != nil || d.AsDuration() <= 0 {
			return nil, fmt.Errorf("%w: since %v: must be a positive duration", ErrInvalidRequest, d.AsDuration())
		}
		since = d.AsDuration()
	}
	current := c.cache.Policy(dep)
	proposed, err := c.proposedPolicy(dep, doc.Dependency, data)
	if err != nil {
		return nil, err
	}

	select {
	case c.simSem <- struct{}{}:
		defer func() { <-c.simSem }()
	default:
		c.metrics.simulations.WithLabelValues("busy").Inc()
		return nil, fmt.Errorf("%w: %d simulations are running, the most this coordinator runs at once: try again", errSimulationsBusy, maxSimulations)
	}
	start := time.Now()
	resp, err := c.runSimulation(ctx, dep, current, proposed, since)
	c.metrics.simDuration.Observe(time.Since(start).Seconds())
	result := "ok"
	switch {
	case errors.Is(err, history.ErrNoHistory):
		result = "no_history"
	case err != nil:
		result = "error"
	}
	c.metrics.simulations.WithLabelValues(result).Inc()
	return resp, err
}

// proposedPolicy is the effective policy data proposes for dep: a document
// read over the fleet default, or a new fleet default (docDep "_default")
// with dep's own document read over it.
func (c *Coordinator) proposedPolicy(dep, docDep string, data []byte) (sharedstate.Policy, error) {
	if docDep == sharedstate.DefaultPolicyName {
		def, err := sharedstate.ParsePolicy(data)
		if err != nil {
			return sharedstate.Policy{}, err
		}
		entry, ok := c.cache.storedPolicy(dep)
		if !ok {
			def.Dependency = dep
			return def, nil
		}
		p, err := sharedstate.ParsePolicyOver(def, dep, entry.Value)
		if err != nil {
			return sharedstate.Policy{}, fmt.Errorf("%w: %s's own policy over the proposed default: %w", ErrInvalidRequest, dep, err)
		}
		return p, nil
	}
	if docDep != "" && docDep != dep {
		return sharedstate.Policy{}, &sharedstate.ValidationError{Violations: []sharedstate.Violation{{Field: "dependency", Value: docDep,
			Message: "must match the dependency simulated (" + dep + ")"}}}
	}
	p, err := sharedstate.ParsePolicyOver(c.cache.defaultPolicy(), dep, data)
	return p, err
}

func (c *Coordinator) runSimulation(ctx context.Context, dep string, current, proposed sharedstate.Policy, since time.Duration) (*fuseboxv1.SimulatePolicyResponse, error) {
	coarse := c.history.Config().CoarseHorizon
	var notes []string
	if since > coarse {
		notes = append(notes, fmt.Sprintf("asked for %v: the history keeps %v (--history-coarse)", since, coarse))
		since = coarse
	}
	to := c.settled()
	from := to.Add(-since)
	warm := max(current.Breaker.Window.Std(), proposed.Breaker.Window.Std())
	segs, err := c.history.Range(dep, from.Add(-warm), to)
	if err != nil {
		return nil, err
	}
	recs := c.history.Records(dep, from.Add(-warm), to)
	if len(segs) > 0 && segs[0].From.After(from) {
		notes = append(notes, "the history of "+dep+" begins at "+segs[0].From.UTC().Format(time.RFC3339)+": nothing before is replayed")
	}
	in := replay.Input{Dependency: dep, Fleet: &current, Segments: segs, Records: recs, From: from, To: to}
	in.Policy = current
	cur, err := replay.Run(in)
	if err != nil {
		return nil, fmt.Errorf("coordinator: replaying the current policy: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	in.Policy = proposed
	prop, err := replay.Run(in)
	if err != nil {
		return nil, fmt.Errorf("coordinator: replaying the proposed policy: %w", err)
	}
	reality := replay.Reality(recs, current.Breaker, from, to)
	cmp := replay.Compare(current, reality, replay.FleetTransitions(recs), cur, prop, current, proposed)

	notes = append(notes, simulationNotes(segs, recs, current, proposed, from)...)
	resp := &fuseboxv1.SimulatePolicyResponse{
		Dependency: dep, From: timestamppb.New(from), To: timestamppb.New(to),
		Resolution: durationpb.New(c.history.FineStep(dep)),
		Current:    simulatedPolicy(current, cur), Proposed: simulatedPolicy(proposed, prop),
		FleetStates: intervalsProto(reality), FleetTotals: totalsProto(cmp.Fleet),
		Notes: notes,
	}
	if n := len(segs); n > 0 {
		// The last segment is the fine one.
		resp.FineFrom = timestamppb.New(history.Later(segs[n-1].From, from))
	}
	if e, ok := c.cache.storedPolicy(dep); ok {
		resp.CurrentRevision = e.ModRevision
	}
	for _, inc := range cmp.Incidents {
		resp.Incidents = append(resp.Incidents, &fuseboxv1.SimulatedIncident{From: timestamppb.New(inc.From), To: timestamppb.New(inc.To),
			Fleet: sideProto(inc.Fleet), Current: sideProto(inc.Current), Proposed: sideProto(inc.Proposed)})
	}
	return resp, nil
}

// simulationNotes are the limits that apply to this replay.
func simulationNotes(segs []history.Segment, recs []history.Record, current, proposed sharedstate.Policy, from time.Time) []string {
	var notes []string
	var nodes uint64
	for _, s := range segs {
		for _, sl := range s.Slots {
			nodes |= sl.ActiveNodes
		}
	}
	if n := bits.OnesCount64(nodes); n > replay.MaxVirtualNodes {
		notes = append(notes, fmt.Sprintf("%d nodes had traffic: the replay runs them as %d virtual nodes, each probing for several", n, replay.MaxVirtualNodes))
	}
	for _, p := range []sharedstate.Policy{current, proposed} {
		switch p.Breaker.Scope {
		case sharedstate.ScopeZone:
			notes = append(notes, "scope zone is replayed as one fleet-wide breaker")
		case sharedstate.ScopeNode:
			notes = append(notes, "scope node is replayed as each virtual node's own breaker; the state shown is the worst of them")
		}
	}
	for _, r := range recs {
		if r.Kind == history.KindPolicy && !r.At.Before(from) {
			notes = append(notes, fmt.Sprintf("%s at %s: the replay of the current policy uses today's for the whole range", r.Reason, r.At.UTC().Format(time.RFC3339)))
		}
	}
	notes = append(notes, "node-local breakers are not replayed as the fleet's nodes had them; probes answer at once, with the outcome of the fleet's nearest calls")
	slices.Sort(notes)
	return slices.Compact(notes)
}

func simulatedPolicy(p sharedstate.Policy, r *replay.Result) *fuseboxv1.SimulatedPolicy {
	b, _ := json.Marshal(p)
	return &fuseboxv1.SimulatedPolicy{PolicyJson: b, States: intervalsProto(r.States), Totals: totalsProto(r.Totals)}
}

func intervalsProto(ivs []replay.Interval) []*fuseboxv1.SimulatedInterval {
	out := make([]*fuseboxv1.SimulatedInterval, 0, len(ivs))
	for _, iv := range ivs {
		out = append(out, &fuseboxv1.SimulatedInterval{State: iv.State, From: timestamppb.New(iv.From), To: timestamppb.New(iv.To),
			Generation: iv.Generation, OpenCount: iv.OpenCount, Reason: iv.Reason})
	}
	return out
}

func totalsProto(t replay.Totals) *fuseboxv1.SimulatedTotals {
	return &fuseboxv1.SimulatedTotals{Demand: t.Demand, Refused: t.Refused, RefusedWouldFail: t.RefusedWouldFail,
		FailedLetThrough: t.FailedLetThrough, RetriesAllowed: t.RetriesAllowed, RetriesRefused: t.RetriesRefused,
		Probes: t.Probes, ShadowRefused: t.ShadowRefused, Opens: uint32(min(max(t.Opens, 0), 1<<31))}
}

func sideProto(s replay.Side) *fuseboxv1.SimulatedSide {
	out := &fuseboxv1.SimulatedSide{Opens: uint32(min(max(s.Opens, 0), 1<<31)), Totals: totalsProto(s.Totals)}
	if !s.Opened.IsZero() {
		out.Opened = timestamppb.New(s.Opened)
	}
	if !s.Closed.IsZero() {
		out.Closed = timestamppb.New(s.Closed)
	}
	if !s.OverThreshold.IsZero() {
		out.OverThreshold = timestamppb.New(s.OverThreshold)
	}
	if s.HasSecondsToOpen {
		v := s.SecondsToOpen
		out.SecondsToOpen = &v
	}
	return out
}
