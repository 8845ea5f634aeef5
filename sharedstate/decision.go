package sharedstate

import (
	"fmt"
	"strings"
)

// AttemptKind says what an attempt is to the breaker and the retry budget.
type AttemptKind uint8

const (
	// FirstAttempt is the first call of a caller's request.
	FirstAttempt AttemptKind = iota
	// Retry is any later call of the same request; it needs the retry budget.
	Retry
	// Probe is a call admitted by AcquireProbe while a breaker is half-open.
	Probe
)

func (k AttemptKind) String() string {
	switch k {
	case FirstAttempt:
		return "first-attempt"
	case Retry:
		return "retry"
	case Probe:
		return "probe"
	}
	return fmt.Sprintf("attempt-kind(%d)", uint8(k))
}

// Outcome is how one attempt ended, as reported to Engine.Record.
//
// Counting rule: Success and Failure count one success or one failure. Slow
// is a success that took at least breaker.slowCallDuration: it counts one
// success and one slow call. SlowFailure is a failure that took at least
// slowCallDuration: one failure and one slow call. Rejected counts one
// rejection and no request (the attempt was not made because Fusebox said
// no). The breaker's request count is successes + failures.
type Outcome uint8

const (
	Success Outcome = iota
	Failure
	Slow
	SlowFailure
	Rejected
)

// OutcomeOf is the outcome of a call that failed or not and took at least
// slowCallDuration or not: Success, Failure, Slow or SlowFailure.
func OutcomeOf(failed, slow bool) Outcome {
	switch {
	case failed && slow:
		return SlowFailure
	case failed:
		return Failure
	case slow:
		return Slow
	}
	return Success
}

func (o Outcome) String() string {
	switch o {
	case Success:
		return "success"
	case Failure:
		return "failure"
	case Slow:
		return "slow"
	case SlowFailure:
		return "slow-failure"
	case Rejected:
		return "rejected"
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// Verdict is the answer part of a Decision.
type Verdict uint8

const (
	// Allow: make the call.
	Allow Verdict = iota
	// AllowProbe: the breaker is half-open and this caller may be a probe.
	// From Decide or Snapshot.DecideFirst it means "ask AcquireProbe"; from
	// AcquireProbe it means the probe slot is taken and the caller must
	// report the result with ProbeResult.
	AllowProbe
	// Reject: do not make the call; Reason says why.
	Reject
)

func (v Verdict) String() string {
	switch v {
	case Allow:
		return "allow"
	case AllowProbe:
		return "allow-as-probe"
	case Reject:
		return "reject"
	}
	return fmt.Sprintf("verdict(%d)", uint8(v))
}

// LabelValue is v as a Prometheus label value: "allow", "allow_probe",
// "reject", "unknown" for an invalid verdict.
func (v Verdict) LabelValue() string {
	switch v {
	case Allow:
		return "allow"
	case AllowProbe:
		return "allow_probe"
	case Reject:
		return "reject"
	}
	return "unknown"
}

// Reason explains a rejection. In shadow mode (breaker.mode "shadow") the
// verdict is never Reject, and Reason names the rejection enforce mode would
// have made, so callers can count would-be rejections.
type Reason uint8

const (
	ReasonNone Reason = iota
	// ReasonOpen: the breaker (the fleet's, or this node's own) is open.
	ReasonOpen
	// ReasonForcedOpen: an operator forced the breaker open.
	ReasonForcedOpen
	// ReasonHalfOpenNoPermit: half-open, and this node holds no free probe permit.
	ReasonHalfOpenNoPermit
	// ReasonBudgetExhausted: the retry budget has no room for this node.
	ReasonBudgetExhausted
	// ReasonThrottled: adaptive throttling refused a first attempt.
	ReasonThrottled
	// ReasonRamp: the ramp after a close (breaker.rampDuration) refused a
	// first attempt: the breaker lets the traffic back in gradually.
	ReasonRamp
)

func (r Reason) String() string {
	switch r {
	case ReasonNone:
		return "none"
	case ReasonOpen:
		return "open"
	case ReasonForcedOpen:
		return "forced-open"
	case ReasonHalfOpenNoPermit:
		return "half-open-no-permit"
	case ReasonBudgetExhausted:
		return "budget-exhausted"
	case ReasonThrottled:
		return "throttled"
	case ReasonRamp:
		return "ramp"
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// LabelValue is r as a Prometheus label value: String in snake_case
// ("none", "open", "forced_open", "half_open_no_permit",
// "budget_exhausted", "throttled", "ramp"), "unknown" for an invalid reason.
func (r Reason) LabelValue() string {
	if r > ReasonRamp {
		return "unknown"
	}
	return strings.ReplaceAll(r.String(), "-", "_")
}

// Decision is the engine's answer for one attempt.
type Decision struct {
	Verdict Verdict
	Reason  Reason
}

// Allowed reports whether the call may be made (Allow or AllowProbe).
func (d Decision) Allowed() bool { return d.Verdict != Reject }

// Shadowed reports whether the call is allowed only because the dependency is
// in shadow mode: enforce mode would have rejected it for d.Reason.
func (d Decision) Shadowed() bool { return d.Verdict != Reject && d.Reason != ReasonNone }

func (d Decision) String() string {
	if d.Reason == ReasonNone {
		return d.Verdict.String()
	}
	return d.Verdict.String() + "(" + d.Reason.String() + ")"
}

var (
	allow      = Decision{Verdict: Allow}
	allowProbe = Decision{Verdict: AllowProbe}
)

func reject(r Reason) Decision { return Decision{Verdict: Reject, Reason: r} }
