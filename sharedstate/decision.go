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

var attemptKindNames = [...]string{FirstAttempt: "first-attempt", Retry: "retry", Probe: "probe"}

func (k AttemptKind) String() string { return enumString(attemptKindNames[:], k, "attempt-kind") }

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

var outcomeNames = [...]string{Success: "success", Failure: "failure", Slow: "slow", SlowFailure: "slow-failure", Rejected: "rejected"}

func (o Outcome) String() string { return enumString(outcomeNames[:], o, "outcome") }

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

var (
	verdictNames  = [...]string{Allow: "allow", AllowProbe: "allow-as-probe", Reject: "reject"}
	verdictLabels = [...]string{Allow: "allow", AllowProbe: "allow_probe", Reject: "reject"}
)

func (v Verdict) String() string { return enumString(verdictNames[:], v, "verdict") }

// LabelValue is v as a Prometheus label value: "allow", "allow_probe",
// "reject", "unknown" for an invalid verdict.
func (v Verdict) LabelValue() string { return enumLabel(verdictLabels[:], v) }

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

var reasonNames = [...]string{
	ReasonNone: "none", ReasonOpen: "open", ReasonForcedOpen: "forced-open",
	ReasonHalfOpenNoPermit: "half-open-no-permit", ReasonBudgetExhausted: "budget-exhausted",
	ReasonThrottled: "throttled", ReasonRamp: "ramp",
}

func (r Reason) String() string { return enumString(reasonNames[:], r, "reason") }

// LabelValue is r as a Prometheus label value: String in snake_case
// ("none", "open", "forced_open", "half_open_no_permit",
// "budget_exhausted", "throttled", "ramp"), "unknown" for an invalid reason.
func (r Reason) LabelValue() string { return enumLabel(reasonNames[:], r) }

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

// enumString is names[v], or kind(v) for a value names does not cover:
// the String of this package's enumerations.
func enumString[T ~uint8](names []string, v T, kind string) string {
	if int(v) < len(names) {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", kind, uint8(v))
}

// enumLabel is names[v] as a Prometheus label value (snake_case), or
// "unknown" for a value names does not cover.
func enumLabel[T ~uint8](names []string, v T) string {
	if int(v) < len(names) {
		return strings.ReplaceAll(names[v], "-", "_")
	}
	return "unknown"
}
