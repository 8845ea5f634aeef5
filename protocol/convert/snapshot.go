package convert

import (
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// SnapshotToProto converts a decision snapshot for a client. Every field of
// the Snapshot but its Policy travels, so SnapshotFromProto rebuilds it
// exactly (times to the nanosecond, in UTC). The Policy goes in policy_json
// where the sender wants it (the agent's pushes, from Engine.PolicyJSON).
// node_local_open is set when LocalState is not Closed.
func SnapshotToProto(s *sharedstate.Snapshot) *fuseboxv1.DecisionSnapshot {
	if s == nil {
		return nil
	}
	m := &fuseboxv1.DecisionSnapshot{
		Dependency:          s.Dependency,
		Version:             s.Version,
		State:               BreakerState(s.State),
		Generation:          s.Generation,
		OpenCount:           s.OpenCount,
		ProbeRound:          s.ProbeRound,
		ProbePermit:         s.ProbePermit,
		LocalState:          BreakerState(s.LocalState),
		NodeLocalOpen:       s.LocalOpen(),
		Override:            OverrideState(s.Override),
		OverrideReason:      s.OverrideReason,
		ThrottleProbability: s.ThrottleProbability,
		RampProbability:     s.RampProbability,
		ConcurrencyLimit:    u32(s.ConcurrencyLimit),
	}
	if !s.Since.IsZero() {
		m.Since = timestamppb.New(s.Since)
	}
	if !s.OverrideExpires.IsZero() {
		m.OverrideExpires = timestamppb.New(s.OverrideExpires)
	}
	return m
}

// SnapshotFromProto rebuilds a Snapshot from the wire (nil for nil): the
// inverse of SnapshotToProto, so the result, under the policy in the
// message's policy_json (or the one the receiver holds; the result's Policy
// is left nil for the receiver to set), decides (DecideFirst) exactly as
// the agent's. Times come back in UTC without a monotonic reading. An
// unspecified or unknown state is Closed.
func SnapshotFromProto(m *fuseboxv1.DecisionSnapshot) *sharedstate.Snapshot {
	if m == nil {
		return nil
	}
	s := &sharedstate.Snapshot{
		Dependency:       m.GetDependency(),
		Version:          m.GetVersion(),
		State:            snapshotState(m.GetState()),
		Generation:       m.GetGeneration(),
		OpenCount:        m.GetOpenCount(),
		ProbeRound:       m.GetProbeRound(),
		ProbePermit:      m.GetProbePermit(),
		LocalState:       snapshotState(m.GetLocalState()),
		Override:         OverrideStateFromProto(m.GetOverride()),
		OverrideReason:   m.GetOverrideReason(),
		ConcurrencyLimit: int(m.GetConcurrencyLimit()),
	}
	if p := m.GetThrottleProbability(); p > 0 && p <= 1 { // NaN and out-of-range values are dropped
		s.ThrottleProbability = p
	}
	if p := m.GetRampProbability(); p > 0 && p <= s.ThrottleProbability { // likewise, and the ramp is part of it
		s.RampProbability = p
	}
	if t := m.GetSince(); t != nil {
		s.Since = t.AsTime()
	}
	if t := m.GetOverrideExpires(); t != nil {
		s.OverrideExpires = t.AsTime()
	}
	return s
}

func snapshotState(s fuseboxv1.BreakerState) sharedstate.BreakerState {
	st, ok := BreakerStateFromProto(s)
	if !ok {
		return sharedstate.Closed
	}
	return st
}

// Verdict maps an engine verdict to the protocol enum.
func Verdict(v sharedstate.Verdict) fuseboxv1.Verdict {
	switch v {
	case sharedstate.Allow:
		return fuseboxv1.Verdict_VERDICT_ALLOW
	case sharedstate.AllowProbe:
		return fuseboxv1.Verdict_VERDICT_ALLOW_PROBE
	case sharedstate.Reject:
		return fuseboxv1.Verdict_VERDICT_REJECT
	}
	return fuseboxv1.Verdict_VERDICT_UNSPECIFIED
}

// VerdictFromProto maps a protocol verdict; ok is false for unspecified or
// an unknown value.
func VerdictFromProto(v fuseboxv1.Verdict) (sharedstate.Verdict, bool) {
	switch v {
	case fuseboxv1.Verdict_VERDICT_ALLOW:
		return sharedstate.Allow, true
	case fuseboxv1.Verdict_VERDICT_ALLOW_PROBE:
		return sharedstate.AllowProbe, true
	case fuseboxv1.Verdict_VERDICT_REJECT:
		return sharedstate.Reject, true
	}
	return sharedstate.Allow, false
}

// Reason maps an engine reason to the protocol enum.
func Reason(r sharedstate.Reason) fuseboxv1.RejectReason {
	switch r {
	case sharedstate.ReasonOpen:
		return fuseboxv1.RejectReason_REJECT_REASON_OPEN
	case sharedstate.ReasonForcedOpen:
		return fuseboxv1.RejectReason_REJECT_REASON_FORCED_OPEN
	case sharedstate.ReasonHalfOpenNoPermit:
		return fuseboxv1.RejectReason_REJECT_REASON_HALF_OPEN_NO_PERMIT
	case sharedstate.ReasonBudgetExhausted:
		return fuseboxv1.RejectReason_REJECT_REASON_BUDGET_EXHAUSTED
	case sharedstate.ReasonThrottled:
		return fuseboxv1.RejectReason_REJECT_REASON_THROTTLED
	case sharedstate.ReasonRamp:
		return fuseboxv1.RejectReason_REJECT_REASON_RAMP
	}
	return fuseboxv1.RejectReason_REJECT_REASON_NONE
}

// ReasonFromProto maps a protocol reason; none or unknown is ReasonNone.
func ReasonFromProto(r fuseboxv1.RejectReason) sharedstate.Reason {
	switch r {
	case fuseboxv1.RejectReason_REJECT_REASON_OPEN:
		return sharedstate.ReasonOpen
	case fuseboxv1.RejectReason_REJECT_REASON_FORCED_OPEN:
		return sharedstate.ReasonForcedOpen
	case fuseboxv1.RejectReason_REJECT_REASON_HALF_OPEN_NO_PERMIT:
		return sharedstate.ReasonHalfOpenNoPermit
	case fuseboxv1.RejectReason_REJECT_REASON_BUDGET_EXHAUSTED:
		return sharedstate.ReasonBudgetExhausted
	case fuseboxv1.RejectReason_REJECT_REASON_THROTTLED:
		return sharedstate.ReasonThrottled
	case fuseboxv1.RejectReason_REJECT_REASON_RAMP:
		return sharedstate.ReasonRamp
	}
	return sharedstate.ReasonNone
}

// DecisionToProto converts a decision, with the snapshot it was made under.
func DecisionToProto(d sharedstate.Decision, s *sharedstate.Snapshot) *fuseboxv1.Decision {
	return &fuseboxv1.Decision{Verdict: Verdict(d.Verdict), Reason: Reason(d.Reason), Snapshot: SnapshotToProto(s)}
}

// AttemptKind maps a protocol attempt kind; unspecified is a first attempt.
func AttemptKind(k fuseboxv1.AttemptKind) sharedstate.AttemptKind {
	switch k {
	case fuseboxv1.AttemptKind_ATTEMPT_KIND_RETRY:
		return sharedstate.Retry
	case fuseboxv1.AttemptKind_ATTEMPT_KIND_PROBE:
		return sharedstate.Probe
	}
	return sharedstate.FirstAttempt
}

// Outcome maps a protocol outcome; ok is false for OUTCOME_UNSPECIFIED or
// an unknown value. A timeout counts as a slow failure.
func Outcome(o fuseboxv1.Outcome) (sharedstate.Outcome, bool) {
	switch o {
	case fuseboxv1.Outcome_OUTCOME_SUCCESS:
		return sharedstate.Success, true
	case fuseboxv1.Outcome_OUTCOME_FAILURE:
		return sharedstate.Failure, true
	case fuseboxv1.Outcome_OUTCOME_SLOW_SUCCESS:
		return sharedstate.Slow, true
	case fuseboxv1.Outcome_OUTCOME_SLOW_FAILURE, fuseboxv1.Outcome_OUTCOME_TIMEOUT:
		return sharedstate.SlowFailure, true
	case fuseboxv1.Outcome_OUTCOME_REJECTED:
		return sharedstate.Rejected, true
	}
	return 0, false
}
