package convert

import (
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

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

// RetryToProto converts effective retry settings.
func RetryToProto(r sharedstate.RetrySettings) *fuseboxv1.RetrySettings {
	return &fuseboxv1.RetrySettings{
		MaxAttempts:               uint32(max(r.MaxAttempts, 0)),
		PerAttemptTimeout:         durationpb.New(r.PerAttemptTimeout),
		BackoffBase:               durationpb.New(r.BackoffBase),
		BackoffMax:                durationpb.New(r.BackoffMax),
		Jitter:                    Jitter(r.Jitter),
		BudgetRatio:               r.BudgetRatio,
		BudgetMinRetriesPerSecond: r.MinRetriesPerSecond,
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
	}
}

// SnapshotToProto converts a decision snapshot for a client.
//
// The protocol's DecisionSnapshot has one state and a node_local_open flag:
// a closed fleet breaker with this node's own breaker open or half-open is
// sent as state CLOSED with node_local_open set, and probe_permit tells
// whether this node may probe its own half-open breaker. A client deciding
// from the message alone treats node_local_open as open unless it holds a
// probe permit.
func SnapshotToProto(s *sharedstate.Snapshot) *fuseboxv1.DecisionSnapshot {
	if s == nil {
		return nil
	}
	m := &fuseboxv1.DecisionSnapshot{
		Dependency:       s.Dependency,
		State:            BreakerState(s.State),
		Generation:       s.Generation,
		Override:         OverrideState(s.Override),
		OverrideReason:   s.OverrideReason,
		Mode:             Mode(s.Mode),
		NodeLocalOpen:    s.LocalOpen(),
		ProbePermit:      s.ProbePermit,
		Retry:            RetryToProto(s.Retry),
		SlowCallDuration: durationpb.New(s.SlowCallDuration),
	}
	if !s.Since.IsZero() {
		m.Since = timestamppb.New(s.Since)
	}
	return m
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
	}
	return fuseboxv1.RejectReason_REJECT_REASON_NONE
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
