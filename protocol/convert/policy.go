package convert

import (
	"math"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// Jitter maps a policy jitter to the protocol enum.
func Jitter(j sharedstate.Jitter) fuseboxv1.Jitter {
	switch j {
	case sharedstate.JitterFull:
		return fuseboxv1.Jitter_JITTER_FULL
	case sharedstate.JitterEqual:
		return fuseboxv1.Jitter_JITTER_EQUAL
	case sharedstate.JitterDecorrelated:
		return fuseboxv1.Jitter_JITTER_DECORRELATED
	case sharedstate.JitterNone:
		return fuseboxv1.Jitter_JITTER_NONE
	}
	return fuseboxv1.Jitter_JITTER_UNSPECIFIED
}

// JitterFromProto maps a protocol jitter; unspecified or unknown is "".
func JitterFromProto(j fuseboxv1.Jitter) sharedstate.Jitter {
	switch j {
	case fuseboxv1.Jitter_JITTER_FULL:
		return sharedstate.JitterFull
	case fuseboxv1.Jitter_JITTER_EQUAL:
		return sharedstate.JitterEqual
	case fuseboxv1.Jitter_JITTER_DECORRELATED:
		return sharedstate.JitterDecorrelated
	case fuseboxv1.Jitter_JITTER_NONE:
		return sharedstate.JitterNone
	}
	return ""
}

// Mode maps a policy mode to the protocol enum.
func Mode(m sharedstate.Mode) fuseboxv1.Mode {
	switch m {
	case sharedstate.ModeEnforce:
		return fuseboxv1.Mode_MODE_ENFORCE
	case sharedstate.ModeShadow:
		return fuseboxv1.Mode_MODE_SHADOW
	}
	return fuseboxv1.Mode_MODE_UNSPECIFIED
}

// ModeFromProto maps a protocol mode; unspecified or unknown is "" (which
// decides as enforce).
func ModeFromProto(m fuseboxv1.Mode) sharedstate.Mode {
	switch m {
	case fuseboxv1.Mode_MODE_ENFORCE:
		return sharedstate.ModeEnforce
	case fuseboxv1.Mode_MODE_SHADOW:
		return sharedstate.ModeShadow
	}
	return ""
}

// Scope maps a policy scope to the protocol enum.
func Scope(s sharedstate.Scope) fuseboxv1.Scope {
	switch s {
	case sharedstate.ScopeFleet:
		return fuseboxv1.Scope_SCOPE_FLEET
	case sharedstate.ScopeZone:
		return fuseboxv1.Scope_SCOPE_ZONE
	case sharedstate.ScopeNode:
		return fuseboxv1.Scope_SCOPE_NODE
	}
	return fuseboxv1.Scope_SCOPE_UNSPECIFIED
}

// ScopeFromProto maps a protocol scope; unspecified or unknown is "".
func ScopeFromProto(s fuseboxv1.Scope) sharedstate.Scope {
	switch s {
	case fuseboxv1.Scope_SCOPE_FLEET:
		return sharedstate.ScopeFleet
	case fuseboxv1.Scope_SCOPE_ZONE:
		return sharedstate.ScopeZone
	case fuseboxv1.Scope_SCOPE_NODE:
		return sharedstate.ScopeNode
	}
	return ""
}

// u32 clamps a policy integer into a uint32 field (valid policies are far
// inside the range).
func u32(v int) uint32 { return uint32(min(max(v, 0), math.MaxUint32)) }

// RetryToProto converts effective retry settings.
func RetryToProto(r sharedstate.RetrySettings) *fuseboxv1.RetrySettings {
	return &fuseboxv1.RetrySettings{
		MaxAttempts:               u32(r.MaxAttempts),
		PerAttemptTimeout:         durationpb.New(r.PerAttemptTimeout),
		BackoffBase:               durationpb.New(r.BackoffBase),
		BackoffMax:                durationpb.New(r.BackoffMax),
		Jitter:                    Jitter(r.Jitter),
		BudgetRatio:               r.BudgetRatio,
		BudgetMinRetriesPerSecond: r.MinRetriesPerSecond,
		HedgeDelay:                durationpb.New(r.HedgeDelay),
		MaxHedges:                 u32(r.MaxHedges),
	}
}

// RetryFromProto converts retry settings back; it inverts RetryToProto for
// every non-negative MaxAttempts. nil is the zero value.
func RetryFromProto(m *fuseboxv1.RetrySettings) sharedstate.RetrySettings {
	return sharedstate.RetrySettings{
		MaxAttempts:         int(m.GetMaxAttempts()),
		PerAttemptTimeout:   duration(m.GetPerAttemptTimeout()),
		BackoffBase:         duration(m.GetBackoffBase()),
		BackoffMax:          duration(m.GetBackoffMax()),
		Jitter:              JitterFromProto(m.GetJitter()),
		BudgetRatio:         m.GetBudgetRatio(),
		MinRetriesPerSecond: m.GetBudgetMinRetriesPerSecond(),
		HedgeDelay:          duration(m.GetHedgeDelay()),
		MaxHedges:           int(m.GetMaxHedges()),
	}
}

// RetryFromPolicy returns the retry settings of a policy.
func RetryFromPolicy(p sharedstate.Policy) sharedstate.RetrySettings {
	return sharedstate.RetrySettings{
		MaxAttempts:         p.Retry.MaxAttempts,
		PerAttemptTimeout:   p.Retry.PerAttemptTimeout.Std(),
		BackoffBase:         p.Retry.Backoff.Base.Std(),
		BackoffMax:          p.Retry.Backoff.Max.Std(),
		Jitter:              p.Retry.Backoff.Jitter,
		BudgetRatio:         p.Retry.Budget.Ratio,
		MinRetriesPerSecond: p.Retry.Budget.MinRetriesPerSecond,
		HedgeDelay:          p.Retry.Hedge.Delay.Std(),
		MaxHedges:           p.Retry.Hedge.MaxHedges,
	}
}

// RetryPolicyFrom returns the retry part of a policy that gives r: the
// inverse of RetryFromPolicy.
func RetryPolicyFrom(r sharedstate.RetrySettings) sharedstate.RetryPolicy {
	return sharedstate.RetryPolicy{
		MaxAttempts:       r.MaxAttempts,
		PerAttemptTimeout: sharedstate.Duration(r.PerAttemptTimeout),
		Backoff: sharedstate.BackoffPolicy{Base: sharedstate.Duration(r.BackoffBase),
			Max: sharedstate.Duration(r.BackoffMax), Jitter: r.Jitter},
		Budget: sharedstate.BudgetPolicy{Ratio: r.BudgetRatio, MinRetriesPerSecond: r.MinRetriesPerSecond},
		Hedge:  sharedstate.HedgePolicy{Delay: sharedstate.Duration(r.HedgeDelay), MaxHedges: r.MaxHedges},
	}
}

// PolicySnapshot is the snapshot of a dependency under p that no engine
// tracks yet (or of the fleet default, name "_default"): closed, without an
// override, with p's mode, scope, slow-call duration and retry settings.
func PolicySnapshot(name string, p sharedstate.Policy) *sharedstate.Snapshot {
	return &sharedstate.Snapshot{
		Dependency: name, State: sharedstate.Closed, LocalState: sharedstate.Closed,
		Mode: p.Breaker.Mode, Scope: p.Breaker.Scope, SlowCallDuration: p.Breaker.SlowCallDuration.Std(),
		Retry: RetryFromPolicy(p),
	}
}

// BreakerToProto converts the breaker part of a policy but its mode, scope
// and slow-call duration, which a DecisionSnapshot carries itself.
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

// PolicyWithBreaker returns p with every breaker setting m carries (all
// but mode, scope and slow-call duration): a zero (or unset) field is one m
// does not carry, since no valid setting is zero, except confidence,
// fast_path and ramp_duration, which are carried when present. With a nil m
// it returns p. The result is not validated.
func PolicyWithBreaker(p sharedstate.Policy, m *fuseboxv1.BreakerSettings) sharedstate.Policy {
	if m == nil {
		return p
	}
	b := &p.Breaker
	setFloat(&b.FailureRateThreshold, m.GetFailureRateThreshold())
	setFloat(&b.SlowCallRateThreshold, m.GetSlowCallRateThreshold())
	setInt(&b.MinimumRequests, m.GetMinimumRequests())
	setInt(&b.MinFailingNodes, m.GetMinFailingNodes())
	setDuration(&b.Window, m.GetWindow())
	setDuration(&b.OpenDuration, m.GetOpenDuration())
	setDuration(&b.MaxOpenDuration, m.GetMaxOpenDuration())
	setInt(&b.HalfOpenProbes, m.GetHalfOpenProbes())
	setInt(&b.ProbeSuccessThreshold, m.GetProbeSuccessThreshold())
	setDuration(&b.ProbeTimeout, m.GetProbeTimeout())
	if m.Confidence != nil {
		b.Confidence = m.GetConfidence()
	}
	if m.FastPath != nil {
		b.FastPath = m.GetFastPath()
	}
	setDuration(&b.FleetMaxOpenDuration, m.GetFleetMaxOpenDuration())
	if d := m.GetRampDuration(); d != nil {
		b.RampDuration = sharedstate.Duration(d.AsDuration())
	}
	setFloat(&b.RampStart, m.GetRampStart())
	return p
}

func duration(d *durationpb.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return d.AsDuration()
}

func setFloat(dst *float64, v float64) {
	if v != 0 {
		*dst = v
	}
}

func setInt(dst *int, v uint32) {
	if v != 0 {
		*dst = int(v)
	}
}

func setDuration(dst *sharedstate.Duration, d *durationpb.Duration) {
	if d != nil && d.AsDuration() != 0 {
		*dst = sharedstate.Duration(d.AsDuration())
	}
}
