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
	return m
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
	st, ok := BreakerStateFromProto(m.GetState())
	if !ok || st == sharedstate.HalfOpen {
		r.State = sharedstate.HalfOpen
		return r, false
	}
	r.State = st
	return r, true
}
