package sharedstate

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Violation is one broken rule: the field's JSON path, the offending value as
// text, and what the rule wants.
type Violation struct {
	Field   string `json:"field"`
	Value   string `json:"value,omitempty"`
	Message string `json:"message"`
}

func (v Violation) String() string {
	if v.Value == "" {
		return v.Field + ": " + v.Message
	}
	return v.Field + ": " + v.Message + ", got " + v.Value
}

// ValidationError lists every violation found, in field order. It matches
// ErrInvalidPolicy with errors.Is (ErrInvalidOverride for overrides).
type ValidationError struct {
	Violations []Violation
	kind       error
}

// Error lists the violations, one per line, e.g.
// "breaker.failureRateThreshold: must be in (0,1], got 1.5".
func (e *ValidationError) Error() string {
	lines := make([]string, len(e.Violations))
	for i, v := range e.Violations {
		lines[i] = v.String()
	}
	return strings.Join(lines, "\n")
}

// Is reports whether target is the sentinel for what was validated.
func (e *ValidationError) Is(target error) bool {
	if e.kind == nil {
		return target == ErrInvalidPolicy
	}
	return target == e.kind
}

// Limits enforced by Validate.
const (
	maxWindow          = time.Hour
	minWindow          = time.Second
	maxPolicyDuration  = 24 * time.Hour
	maxMinimumRequests = 1_000_000
	maxNodesSetting    = 100_000
	maxProbes          = 1000
	maxAttemptsLimit   = 100
	maxRetriesPerSec   = 1_000_000
	minConfidence      = 0.5
	maxConfidence      = 0.999999
	maxHedgesLimit     = 10
	maxThrottleK       = 100
	maxInFlightLimit   = 10_000_000
)

// Validate checks every rule and returns nil or a *ValidationError naming
// every violation (field path, offending value, rule). It has no side effects.
func (p Policy) Validate() error {
	if v := p.validate(); len(v) > 0 {
		return &ValidationError{Violations: v}
	}
	return nil
}

func (p Policy) validate() []Violation {
	var vs []Violation
	add := func(field, value, msg string) {
		vs = append(vs, Violation{Field: field, Value: value, Message: msg})
	}
	if p.Schema != PolicySchema {
		add("schema", strconv.Itoa(p.Schema), "must be 1")
	}
	if p.Dependency != DefaultPolicyName && ValidateDependencyName(p.Dependency) != nil { // "" too
		add("dependency", strconv.Quote(p.Dependency), "must be _default or a dependency name (1–128 characters of [A-Za-z0-9._:/-])")
	}

	b := p.Breaker
	rate := func(field string, v float64) {
		if !(v > 0 && v <= 1) { // also catches NaN
			add(field, fmtFloat(v), "must be in (0,1]")
		}
	}
	rate("breaker.failureRateThreshold", b.FailureRateThreshold)
	rate("breaker.slowCallRateThreshold", b.SlowCallRateThreshold)
	posDur := func(field string, d Duration, max time.Duration) {
		switch {
		case d <= 0:
			add(field, d.String(), "must be positive")
		case d.Std() > max:
			add(field, d.String(), "must be at most "+max.String())
		}
	}
	intRange := func(field string, v, lo, hi int) {
		if v < lo || v > hi {
			add(field, strconv.Itoa(v), fmt.Sprintf("must be between %d and %d", lo, hi))
		}
	}
	posDur("breaker.slowCallDuration", b.SlowCallDuration, maxPolicyDuration)
	intRange("breaker.minimumRequests", b.MinimumRequests, 1, maxMinimumRequests)
	intRange("breaker.minFailingNodes", b.MinFailingNodes, 1, maxNodesSetting)
	if b.Window.Std() < minWindow || b.Window.Std() > maxWindow {
		add("breaker.window", b.Window.String(), "must be between "+minWindow.String()+" and "+maxWindow.String())
	}
	posDur("breaker.openDuration", b.OpenDuration, maxPolicyDuration)
	posDur("breaker.maxOpenDuration", b.MaxOpenDuration, maxPolicyDuration)
	if b.OpenDuration > 0 && b.MaxOpenDuration > 0 && b.MaxOpenDuration < b.OpenDuration {
		add("breaker.maxOpenDuration", b.MaxOpenDuration.String(), "must be at least breaker.openDuration ("+b.OpenDuration.String()+")")
	}
	intRange("breaker.halfOpenProbes", b.HalfOpenProbes, 1, maxProbes)
	intRange("breaker.probeSuccessThreshold", b.ProbeSuccessThreshold, 1, maxProbes)
	posDur("breaker.probeTimeout", b.ProbeTimeout, maxWindow)
	if b.ProbeTimeout > 0 && p.Retry.PerAttemptTimeout > 0 && b.ProbeTimeout < p.Retry.PerAttemptTimeout {
		add("breaker.probeTimeout", b.ProbeTimeout.String(),
			"must be at least retry.perAttemptTimeout ("+p.Retry.PerAttemptTimeout.String()+"), or no probe fits in a probe round")
	}
	switch b.Scope {
	case ScopeFleet, ScopeZone, ScopeNode:
	default:
		add("breaker.scope", strconv.Quote(string(b.Scope)), "must be one of fleet, zone, node")
	}
	switch b.Mode {
	case ModeEnforce, ModeShadow:
	default:
		add("breaker.mode", strconv.Quote(string(b.Mode)), "must be one of enforce, shadow")
	}

	if c := b.Confidence; !(c == 0 || c >= minConfidence && c <= maxConfidence) {
		add("breaker.confidence", fmtFloat(c), fmt.Sprintf("must be 0 (the classic rule) or between %g and %g", minConfidence, maxConfidence))
	}
	posDur("breaker.fleetMaxOpenDuration", b.FleetMaxOpenDuration, maxPolicyDuration)
	if b.RampDuration < 0 || b.RampDuration.Std() > maxWindow {
		add("breaker.rampDuration", b.RampDuration.String(), "must be between 0s (no ramp) and "+maxWindow.String())
	}
	rate("breaker.rampStart", b.RampStart)

	r := p.Retry
	intRange("retry.maxAttempts", r.MaxAttempts, 1, maxAttemptsLimit)
	posDur("retry.perAttemptTimeout", r.PerAttemptTimeout, maxWindow)
	if r.Backoff.Base < 0 || r.Backoff.Base.Std() > maxWindow {
		add("retry.backoff.base", r.Backoff.Base.String(), "must be between 0s and "+maxWindow.String())
	}
	if r.Backoff.Max < r.Backoff.Base || r.Backoff.Max.Std() > maxWindow {
		add("retry.backoff.max", r.Backoff.Max.String(), "must be between retry.backoff.base ("+r.Backoff.Base.String()+") and "+maxWindow.String())
	}
	switch r.Backoff.Jitter {
	case JitterFull, JitterEqual, JitterDecorrelated, JitterNone:
	default:
		add("retry.backoff.jitter", strconv.Quote(string(r.Backoff.Jitter)), "must be one of full, equal, decorrelated, none")
	}
	if !(r.Budget.Ratio >= 0 && r.Budget.Ratio <= 1) {
		add("retry.budget.ratio", fmtFloat(r.Budget.Ratio), "must be in [0,1]")
	}
	if !(r.Budget.MinRetriesPerSecond >= 0 && r.Budget.MinRetriesPerSecond <= maxRetriesPerSec) {
		add("retry.budget.minRetriesPerSecond", fmtFloat(r.Budget.MinRetriesPerSecond),
			fmt.Sprintf("must be between 0 and %d", maxRetriesPerSec))
	}
	h := r.Hedge
	if h.Delay < 0 || h.Delay.Std() > maxWindow {
		add("retry.hedge.delay", h.Delay.String(), "must be between 0s and "+maxWindow.String())
	} else if h.MaxHedges > 0 && h.Delay == 0 {
		add("retry.hedge.delay", h.Delay.String(), "must be positive when retry.hedge.maxHedges is set")
	}
	intRange("retry.hedge.maxHedges", h.MaxHedges, 0, maxHedgesLimit)

	t := p.Throttle
	if !(t.K >= 1 && t.K <= maxThrottleK) {
		add("throttle.k", fmtFloat(t.K), fmt.Sprintf("must be between 1 and %d (below 1 it refuses a healthy dependency's traffic)", maxThrottleK))
	}
	intRange("throttle.minRequests", t.MinRequests, 0, maxMinimumRequests)
	intRange("concurrency.maxInFlight", p.Concurrency.MaxInFlight, 0, maxInFlightLimit)
	return vs
}

func fmtFloat(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Sprint(v)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
