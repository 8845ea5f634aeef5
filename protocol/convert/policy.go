package convert

import (
	"math"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// A dependency's policy travels to clients once, as its JSON document in a
// DecisionSnapshot's policy_json (Engine.PolicyJSON; read it with
// sharedstate.ParsePolicy): nothing here converts it field by field.

// Mode maps a policy mode to the protocol enum (a DependencyView's mode).
func Mode(m sharedstate.Mode) fuseboxv1.Mode {
	switch m {
	case sharedstate.ModeEnforce:
		return fuseboxv1.Mode_MODE_ENFORCE
	case sharedstate.ModeShadow:
		return fuseboxv1.Mode_MODE_SHADOW
	}
	return fuseboxv1.Mode_MODE_UNSPECIFIED
}

// u32 clamps a policy integer into a uint32 field (valid policies are far
// inside the range).
func u32(v int) uint32 { return uint32(min(max(v, 0), math.MaxUint32)) }

// PolicySnapshot is the snapshot of a dependency under p that no engine
// tracks yet (or of the fleet default, name "_default"): closed, without an
// override, under p.
func PolicySnapshot(name string, p sharedstate.Policy) *sharedstate.Snapshot {
	return &sharedstate.Snapshot{Dependency: name, State: sharedstate.Closed, LocalState: sharedstate.Closed, Policy: &p}
}

// BreakerToProto converts the trip rule and timings of the breaker part of
// a policy, as a DependencyView shows them.
func BreakerToProto(b sharedstate.BreakerPolicy) *fuseboxv1.BreakerSettings {
	return &fuseboxv1.BreakerSettings{
		FailureRateThreshold:  b.FailureRateThreshold,
		SlowCallRateThreshold: b.SlowCallRateThreshold,
		MinimumRequests:       u32(b.MinimumRequests),
		MinFailingNodes:       u32(b.MinFailingNodes),
		Window:                durationpb.New(b.Window.Std()),
		OpenDuration:          durationpb.New(b.OpenDuration.Std()),
		MaxOpenDuration:       durationpb.New(b.MaxOpenDuration.Std()),
		HalfOpenProbes:        u32(b.HalfOpenProbes),
		ProbeSuccessThreshold: u32(b.ProbeSuccessThreshold),
		ProbeTimeout:          durationpb.New(b.ProbeTimeout.Std()),
		Confidence:            &b.Confidence,
		FastPath:              &b.FastPath,
		FleetMaxOpenDuration:  durationpb.New(b.FleetMaxOpenDuration.Std()),
		RampDuration:          durationpb.New(b.RampDuration.Std()),
		RampStart:             b.RampStart,
	}
}
