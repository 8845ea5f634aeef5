package convert

import (
	"time"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// BreakerState maps an engine state to the protocol enum.
func BreakerState(s sharedstate.BreakerState) fuseboxv1.BreakerState {
	switch s {
	case sharedstate.Closed:
		return fuseboxv1.BreakerState_BREAKER_STATE_CLOSED
	case sharedstate.Open:
		return fuseboxv1.BreakerState_BREAKER_STATE_OPEN
	case sharedstate.HalfOpen:
		return fuseboxv1.BreakerState_BREAKER_STATE_HALF_OPEN
	}
	return fuseboxv1.BreakerState_BREAKER_STATE_UNSPECIFIED
}

// BreakerStateFromProto maps a protocol state; ok is false for unspecified
// or an unknown value.
func BreakerStateFromProto(s fuseboxv1.BreakerState) (sharedstate.BreakerState, bool) {
	switch s {
	case fuseboxv1.BreakerState_BREAKER_STATE_CLOSED:
		return sharedstate.Closed, true
	case fuseboxv1.BreakerState_BREAKER_STATE_OPEN:
		return sharedstate.Open, true
	case fuseboxv1.BreakerState_BREAKER_STATE_HALF_OPEN:
		return sharedstate.HalfOpen, true
	}
	return sharedstate.Closed, false
}

// OverrideStateFromProto maps a protocol override; none or unknown is
// OverrideNone.
func OverrideStateFromProto(s fuseboxv1.OverrideState) sharedstate.OverrideState {
	switch s {
	case fuseboxv1.OverrideState_OVERRIDE_STATE_FORCED_OPEN:
		return sharedstate.ForcedOpen
	case fuseboxv1.OverrideState_OVERRIDE_STATE_FORCED_CLOSED:
		return sharedstate.ForcedClosed
	}
	return sharedstate.OverrideNone
}

// OverrideState maps an engine override state to the protocol enum.
func OverrideState(s sharedstate.OverrideState) fuseboxv1.OverrideState {
	switch s {
	case sharedstate.ForcedOpen:
		return fuseboxv1.OverrideState_OVERRIDE_STATE_FORCED_OPEN
	case sharedstate.ForcedClosed:
		return fuseboxv1.OverrideState_OVERRIDE_STATE_FORCED_CLOSED
	}
	return fuseboxv1.OverrideState_OVERRIDE_STATE_NONE
}

// RecordToProto converts a breaker record for the wire.
func RecordToProto(r sharedstate.BreakerRecord) *fuseboxv1.BreakerRecord {
	m := &fuseboxv1.BreakerRecord{
		Dependency: r.Dependency,
		Generation: r.Generation,
		State:      BreakerState(r.State),
		OpenCount:  r.OpenCount,
		Origin:     r.Origin,
		Reason:     r.Reason,
		Zone:       r.Zone,
	}
	if !r.Since.IsZero() {
		m.SinceUnixNano = r.Since.UnixNano()
	}
	if !r.IncidentStart.IsZero() {
		m.IncidentStartUnixNano = r.IncidentStart.UnixNano()
	}
	m.Trip = TripToProto(r.Trip)
	return m
}

// TripToProto converts trip evidence for the wire (nil for nil).
func TripToProto(t *sharedstate.TripEvidence) *fuseboxv1.TripEvidence {
	if t == nil {
		return nil
	}
	return &fuseboxv1.TripEvidence{
		Requests: t.Requests, Failures: t.Failures, SlowCalls: t.SlowCalls, Nodes: t.Nodes, Slow: t.Slow,
		FailureRateThreshold: t.FailureRateThreshold, SlowCallRateThreshold: t.SlowCallRateThreshold,
		MinimumRequests: t.MinimumRequests, MinFailingNodes: t.MinFailingNodes,
		Confidence: t.Confidence, LowerBound: t.LowerBound, HorizonNanos: int64(t.Horizon), FastPath: t.FastPath,
		FailingNodes: t.FailingNodes, FailingNodeCount: t.FailingNodeCount,
	}
}

// TripFromProto converts received trip evidence (nil for nil). It copies
// the names; the record's Validate checks the rest.
func TripFromProto(m *fuseboxv1.TripEvidence) *sharedstate.TripEvidence {
	if m == nil {
		return nil
	}
	return &sharedstate.TripEvidence{
		Requests: m.GetRequests(), Failures: m.GetFailures(), SlowCalls: m.GetSlowCalls(), Nodes: m.GetNodes(), Slow: m.GetSlow(),
		FailureRateThreshold: m.GetFailureRateThreshold(), SlowCallRateThreshold: m.GetSlowCallRateThreshold(),
		MinimumRequests: m.GetMinimumRequests(), MinFailingNodes: m.GetMinFailingNodes(),
		Confidence: m.GetConfidence(), LowerBound: m.GetLowerBound(), Horizon: time.Duration(m.GetHorizonNanos()), FastPath: m.GetFastPath(),
		FailingNodes: append([]string(nil), m.GetFailingNodes()...), FailingNodeCount: m.GetFailingNodeCount(),
	}
}

// RecordFromProto converts a received record. ok is false when the state is
// not closed or open; the record then carries an invalid state (HalfOpen,
// which no record carries), so that the engine, which validates every
// record it merges (Engine.MergeRecord), refuses it like any malformed one.
func RecordFromProto(m *fuseboxv1.BreakerRecord) (r sharedstate.BreakerRecord, ok bool) {
	r = sharedstate.BreakerRecord{
		Dependency: m.GetDependency(),
		Generation: m.GetGeneration(),
		OpenCount:  m.GetOpenCount(),
		Origin:     m.GetOrigin(),
		Reason:     m.GetReason(),
		Zone:       m.GetZone(),
	}
	if ns := m.GetSinceUnixNano(); ns != 0 {
		r.Since = time.Unix(0, ns).UTC()
	}
	if ns := m.GetIncidentStartUnixNano(); ns != 0 {
		r.IncidentStart = time.Unix(0, ns).UTC()
	}
	r.Trip = TripFromProto(m.GetTrip())
	st, ok := BreakerStateFromProto(m.GetState())
	if !ok || st == sharedstate.HalfOpen {
		r.State = sharedstate.HalfOpen
		return r, false
	}
	r.State = st
	return r, true
}
