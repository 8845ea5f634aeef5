package sharedstate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// PolicySchema is the only policy schema version this package reads and writes.
const PolicySchema = 1

// ErrInvalidPolicy is matched (errors.Is) by every error that refuses a
// policy: malformed JSON, unknown fields, and *ValidationError.
var ErrInvalidPolicy = errors.New("fusebox: invalid policy")

// Duration is a time.Duration that (un)marshals as a Go duration string
// ("500ms", "2m0s"). Numbers are refused.
type Duration time.Duration

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText encodes d as a Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText parses a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("invalid duration %q: want a Go duration such as \"500ms\" or \"2m\"", b)
	}
	*d = Duration(v)
	return nil
}

// Scope says whose traffic a dependency's breaker and retry budget pool.
type Scope string

const (
	ScopeFleet Scope = "fleet" // one breaker and budget for the whole fleet
	ScopeZone  Scope = "zone"  // one per zone (BreakerRecord.Zone names it)
	ScopeNode  Scope = "node"  // each node on its own, like a classic local breaker
)

// Mode says whether a dependency's breaker and budget reject calls.
type Mode string

const (
	ModeEnforce Mode = "enforce" // reject as decided
	ModeShadow  Mode = "shadow"  // compute and report everything, never reject
)

// Jitter names the backoff jitter clientlib applies between attempts.
type Jitter string

const (
	JitterFull         Jitter = "full"
	JitterEqual        Jitter = "equal"
	JitterDecorrelated Jitter = "decorrelated"
	JitterNone         Jitter = "none"
)

// Policy is one dependency's complete, effective policy (or the fleet default,
// with Dependency "_default"). Its JSON form is the one stored in etcd.
type Policy struct {
	Schema     int           `json:"schema"`
	Dependency string        `json:"dependency"`
	Breaker    BreakerPolicy `json:"breaker"`
	Retry      RetryPolicy   `json:"retry"`
}

// BreakerPolicy configures the breaker and its sliding window.
type BreakerPolicy struct {
	FailureRateThreshold  float64  `json:"failureRateThreshold"`
	SlowCallRateThreshold float64  `json:"slowCallRateThreshold"`
	SlowCallDuration      Duration `json:"slowCallDuration"`
	MinimumRequests       int      `json:"minimumRequests"`
	MinFailingNodes       int      `json:"minFailingNodes"`
	Window                Duration `json:"window"`
	OpenDuration          Duration `json:"openDuration"`
	MaxOpenDuration       Duration `json:"maxOpenDuration"`
	HalfOpenProbes        int      `json:"halfOpenProbes"`
	ProbeSuccessThreshold int      `json:"probeSuccessThreshold"`
	ProbeTimeout          Duration `json:"probeTimeout"`
	Scope                 Scope    `json:"scope"`
	Mode                  Mode     `json:"mode"`
}

// RetryPolicy configures retries: how many, how fast, and the budget.
type RetryPolicy struct {
	MaxAttempts       int           `json:"maxAttempts"`
	PerAttemptTimeout Duration      `json:"perAttemptTimeout"`
	Backoff           BackoffPolicy `json:"backoff"`
	Budget            BudgetPolicy  `json:"budget"`
}

// BackoffPolicy is the wait between attempts: exponential from Base, capped at Max.
type BackoffPolicy struct {
	Base   Duration `json:"base"`
	Max    Duration `json:"max"`
	Jitter Jitter   `json:"jitter"`
}

// BudgetPolicy is the fleet retry budget: over the window, retries may be
// max(MinRetriesPerSecond × window, Ratio × first attempts).
type BudgetPolicy struct {
	Ratio               float64 `json:"ratio"`
	MinRetriesPerSecond float64 `json:"minRetriesPerSecond"`
}

// DefaultPolicy returns the values of DESIGN.md's example, as the fleet
// default (Dependency "_default").
func DefaultPolicy() Policy {
	return Policy{
		Schema:     PolicySchema,
		Dependency: DefaultPolicyName,
		Breaker: BreakerPolicy{
			FailureRateThreshold:  0.5,
			SlowCallRateThreshold: 1.0,
			SlowCallDuration:      Duration(2 * time.Second),
			MinimumRequests:       20,
			MinFailingNodes:       2,
			Window:                Duration(10 * time.Second),
			OpenDuration:          Duration(5 * time.Second),
			MaxOpenDuration:       Duration(2 * time.Minute),
			HalfOpenProbes:        3,
			ProbeSuccessThreshold: 3,
			ProbeTimeout:          Duration(5 * time.Second),
			Scope:                 ScopeFleet,
			Mode:                  ModeEnforce,
		},
		Retry: RetryPolicy{
			MaxAttempts:       3,
			PerAttemptTimeout: Duration(500 * time.Millisecond),
			Backoff: BackoffPolicy{
				Base:   Duration(100 * time.Millisecond),
				Max:    Duration(5 * time.Second),
				Jitter: JitterFull,
			},
			Budget: BudgetPolicy{Ratio: 0.1, MinRetriesPerSecond: 10},
		},
	}
}

// OpenDurationFor is how long a breaker that has opened openCount times in a
// row stays open before it turns half-open: openDuration × 2^(openCount-1),
// capped at maxOpenDuration. openCount 0 is treated as 1.
func (b BreakerPolicy) OpenDurationFor(openCount uint32) time.Duration {
	d := b.OpenDuration.Std()
	max := b.MaxOpenDuration.Std()
	for i := uint32(1); i < openCount && d < max; i++ {
		d *= 2
	}
	if d > max && max > 0 {
		d = max
	}
	return d
}

// PolicyPatch is a policy that may set only some fields: the form of
// policies/<dependency> in etcd. A nil pointer (or an empty Dependency) means
// "inherit from _default". MergePolicy applies it over a complete Policy.
type PolicyPatch struct {
	Schema     *int          `json:"schema,omitempty"`
	Dependency string        `json:"dependency,omitempty"`
	Breaker    *BreakerPatch `json:"breaker,omitempty"`
	Retry      *RetryPatch   `json:"retry,omitempty"`
}

// BreakerPatch is the optional-field form of BreakerPolicy.
type BreakerPatch struct {
	FailureRateThreshold  *float64  `json:"failureRateThreshold,omitempty"`
	SlowCallRateThreshold *float64  `json:"slowCallRateThreshold,omitempty"`
	SlowCallDuration      *Duration `json:"slowCallDuration,omitempty"`
	MinimumRequests       *int      `json:"minimumRequests,omitempty"`
	MinFailingNodes       *int      `json:"minFailingNodes,omitempty"`
	Window                *Duration `json:"window,omitempty"`
	OpenDuration          *Duration `json:"openDuration,omitempty"`
	MaxOpenDuration       *Duration `json:"maxOpenDuration,omitempty"`
	HalfOpenProbes        *int      `json:"halfOpenProbes,omitempty"`
	ProbeSuccessThreshold *int      `json:"probeSuccessThreshold,omitempty"`
	ProbeTimeout          *Duration `json:"probeTimeout,omitempty"`
	Scope                 *Scope    `json:"scope,omitempty"`
	Mode                  *Mode     `json:"mode,omitempty"`
}

// RetryPatch is the optional-field form of RetryPolicy.
type RetryPatch struct {
	MaxAttempts       *int          `json:"maxAttempts,omitempty"`
	PerAttemptTimeout *Duration     `json:"perAttemptTimeout,omitempty"`
	Backoff           *BackoffPatch `json:"backoff,omitempty"`
	Budget            *BudgetPatch  `json:"budget,omitempty"`
}

// BackoffPatch is the optional-field form of BackoffPolicy.
type BackoffPatch struct {
	Base   *Duration `json:"base,omitempty"`
	Max    *Duration `json:"max,omitempty"`
	Jitter *Jitter   `json:"jitter,omitempty"`
}

// BudgetPatch is the optional-field form of BudgetPolicy.
type BudgetPatch struct {
	Ratio               *float64 `json:"ratio,omitempty"`
	MinRetriesPerSecond *float64 `json:"minRetriesPerSecond,omitempty"`
}

// ParsePolicyPatch decodes a (possibly partial) policy strictly: unknown
// fields, trailing data, numbers where durations belong and a schema other
// than 1 are refused. Values are not range-checked here: validate the result
// of MergePolicy, which is the policy that takes effect.
func ParsePolicyPatch(data []byte) (PolicyPatch, error) {
	var p PolicyPatch
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return PolicyPatch{}, fmt.Errorf("%w: %v", ErrInvalidPolicy, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return PolicyPatch{}, fmt.Errorf("%w: trailing data after the policy object", ErrInvalidPolicy)
	}
	if p.Schema != nil && *p.Schema != PolicySchema {
		return PolicyPatch{}, &ValidationError{Violations: []Violation{{
			Field: "schema", Value: strconv.Itoa(*p.Schema), Message: "must be 1",
		}}}
	}
	return p, nil
}

// ParsePolicy decodes a complete policy (such as policies/_default) strictly,
// as ParsePolicyPatch does, requires every field to be present (except
// "schema", which defaults to 1) and validates it. Errors match
// ErrInvalidPolicy; a *ValidationError names every missing or invalid field.
func ParsePolicy(data []byte) (Policy, error) {
	patch, err := ParsePolicyPatch(data)
	if err != nil {
		return Policy{}, err
	}
	var missing []Violation
	patch.walk(func(field string, set bool) {
		if !set && field != "schema" {
			missing = append(missing, Violation{Field: field, Message: "is required"})
		}
	})
	p := MergePolicy(Policy{Schema: PolicySchema}, patch)
	if patch.Dependency == "" {
		missing = append([]Violation{{Field: "dependency", Message: "is required"}}, missing...)
	}
	verr := p.validate()
	if len(missing) > 0 {
		// A missing field also fails its range check; report it once, as missing.
		skip := map[string]bool{}
		for _, m := range missing {
			skip[m.Field] = true
		}
		all := missing
		for _, v := range verr {
			if !skip[v.Field] {
				all = append(all, v)
			}
		}
		verr = all
	}
	if len(verr) > 0 {
		return Policy{}, &ValidationError{Violations: verr}
	}
	return p, nil
}

// walk calls fn for every leaf field of the policy, with its JSON path and
// whether the patch sets it.
func (p PolicyPatch) walk(fn func(field string, set bool)) {
	fn("schema", p.Schema != nil)
	b := p.Breaker
	if b == nil {
		b = &BreakerPatch{}
	}
	fn("breaker.failureRateThreshold", b.FailureRateThreshold != nil)
	fn("breaker.slowCallRateThreshold", b.SlowCallRateThreshold != nil)
	fn("breaker.slowCallDuration", b.SlowCallDuration != nil)
	fn("breaker.minimumRequests", b.MinimumRequests != nil)
	fn("breaker.minFailingNodes", b.MinFailingNodes != nil)
	fn("breaker.window", b.Window != nil)
	fn("breaker.openDuration", b.OpenDuration != nil)
	fn("breaker.maxOpenDuration", b.MaxOpenDuration != nil)
	fn("breaker.halfOpenProbes", b.HalfOpenProbes != nil)
	fn("breaker.probeSuccessThreshold", b.ProbeSuccessThreshold != nil)
	fn("breaker.probeTimeout", b.ProbeTimeout != nil)
	fn("breaker.scope", b.Scope != nil)
	fn("breaker.mode", b.Mode != nil)
	r := p.Retry
	if r == nil {
		r = &RetryPatch{}
	}
	fn("retry.maxAttempts", r.MaxAttempts != nil)
	fn("retry.perAttemptTimeout", r.PerAttemptTimeout != nil)
	bo := r.Backoff
	if bo == nil {
		bo = &BackoffPatch{}
	}
	fn("retry.backoff.base", bo.Base != nil)
	fn("retry.backoff.max", bo.Max != nil)
	fn("retry.backoff.jitter", bo.Jitter != nil)
	bu := r.Budget
	if bu == nil {
		bu = &BudgetPatch{}
	}
	fn("retry.budget.ratio", bu.Ratio != nil)
	fn("retry.budget.minRetriesPerSecond", bu.MinRetriesPerSecond != nil)
}

// MergePolicy returns defaults with every field the patch sets replaced by the
// patch's value, field by field (a patch that sets only
// breaker.minimumRequests keeps every other default). Dependency is the
// patch's when set. Schema is always 1. The result is not validated.
func MergePolicy(defaults Policy, patch PolicyPatch) Policy {
	p := defaults
	p.Schema = PolicySchema
	if patch.Dependency != "" {
		p.Dependency = patch.Dependency
	}
	if b := patch.Breaker; b != nil {
		set(&p.Breaker.FailureRateThreshold, b.FailureRateThreshold)
		set(&p.Breaker.SlowCallRateThreshold, b.SlowCallRateThreshold)
		set(&p.Breaker.SlowCallDuration, b.SlowCallDuration)
		set(&p.Breaker.MinimumRequests, b.MinimumRequests)
		set(&p.Breaker.MinFailingNodes, b.MinFailingNodes)
		set(&p.Breaker.Window, b.Window)
		set(&p.Breaker.OpenDuration, b.OpenDuration)
		set(&p.Breaker.MaxOpenDuration, b.MaxOpenDuration)
		set(&p.Breaker.HalfOpenProbes, b.HalfOpenProbes)
		set(&p.Breaker.ProbeSuccessThreshold, b.ProbeSuccessThreshold)
		set(&p.Breaker.ProbeTimeout, b.ProbeTimeout)
		set(&p.Breaker.Scope, b.Scope)
		set(&p.Breaker.Mode, b.Mode)
	}
	if r := patch.Retry; r != nil {
		set(&p.Retry.MaxAttempts, r.MaxAttempts)
		set(&p.Retry.PerAttemptTimeout, r.PerAttemptTimeout)
		if bo := r.Backoff; bo != nil {
			set(&p.Retry.Backoff.Base, bo.Base)
			set(&p.Retry.Backoff.Max, bo.Max)
			set(&p.Retry.Backoff.Jitter, bo.Jitter)
		}
		if bu := r.Budget; bu != nil {
			set(&p.Retry.Budget.Ratio, bu.Ratio)
			set(&p.Retry.Budget.MinRetriesPerSecond, bu.MinRetriesPerSecond)
		}
	}
	return p
}

func set[T any](dst *T, src *T) {
	if src != nil {
		*dst = *src
	}
}

// Patch returns p as a PolicyPatch that sets every field, so that
// MergePolicy(anything, p.Patch()) == p.
func (p Policy) Patch() PolicyPatch {
	schema := p.Schema
	b, r := p.Breaker, p.Retry
	return PolicyPatch{
		Schema:     &schema,
		Dependency: p.Dependency,
		Breaker: &BreakerPatch{
			FailureRateThreshold:  &b.FailureRateThreshold,
			SlowCallRateThreshold: &b.SlowCallRateThreshold,
			SlowCallDuration:      &b.SlowCallDuration,
			MinimumRequests:       &b.MinimumRequests,
			MinFailingNodes:       &b.MinFailingNodes,
			Window:                &b.Window,
			OpenDuration:          &b.OpenDuration,
			MaxOpenDuration:       &b.MaxOpenDuration,
			HalfOpenProbes:        &b.HalfOpenProbes,
			ProbeSuccessThreshold: &b.ProbeSuccessThreshold,
			ProbeTimeout:          &b.ProbeTimeout,
			Scope:                 &b.Scope,
			Mode:                  &b.Mode,
		},
		Retry: &RetryPatch{
			MaxAttempts:       &r.MaxAttempts,
			PerAttemptTimeout: &r.PerAttemptTimeout,
			Backoff:           &BackoffPatch{Base: &r.Backoff.Base, Max: &r.Backoff.Max, Jitter: &r.Backoff.Jitter},
			Budget:            &BudgetPatch{Ratio: &r.Budget.Ratio, MinRetriesPerSecond: &r.Budget.MinRetriesPerSecond},
		},
	}
}

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
	if p.Dependency == "" {
		add("dependency", `""`, "must be _default or a dependency name (1–128 characters of [A-Za-z0-9._:/-])")
	} else if p.Dependency != DefaultPolicyName && ValidateDependencyName(p.Dependency) != nil {
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
	return vs
}

func fmtFloat(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Sprint(v)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// WorstCaseBackoff is the longest total wait between the attempts of one
// request: the sum, over its maxAttempts-1 retries, of the largest wait the
// jitter allows before retry k (k = 1, 2, ...): min(max, base × 2^(k-1)) for
// none, full and equal jitter, and min(max, base × 3^(k-1)) for decorrelated
// jitter (each wait at most three times the previous one).
func (r RetryPolicy) WorstCaseBackoff() time.Duration {
	growth := time.Duration(2)
	if r.Backoff.Jitter == JitterDecorrelated {
		growth = 3
	}
	var total time.Duration
	w, max := r.Backoff.Base.Std(), r.Backoff.Max.Std()
	for k := 1; k < r.MaxAttempts; k++ {
		if w > max {
			w = max
		}
		total += w
		if w < max {
			w *= growth
		}
	}
	return total
}

// Lint returns warnings about settings that are valid but cannot work as
// intended; nil means nothing to say. With a positive deadline (the caller's
// overall timeout) it checks that maxAttempts × perAttemptTimeout plus the
// worst-case backoff fits in it. Lint assumes p is valid.
func (p Policy) Lint(deadline time.Duration) []string {
	var ws []string
	r := p.Retry
	if deadline > 0 {
		backoff := r.WorstCaseBackoff()
		total := time.Duration(r.MaxAttempts)*r.PerAttemptTimeout.Std() + backoff
		if r.PerAttemptTimeout.Std() > deadline {
			ws = append(ws, fmt.Sprintf("retry.perAttemptTimeout: %s is longer than the deadline %s: a single attempt can outlive its caller",
				r.PerAttemptTimeout, deadline))
		}
		if total > deadline {
			ws = append(ws, fmt.Sprintf("retry: maxAttempts × perAttemptTimeout + backoff = %d × %s + %s = %s exceeds the deadline %s; only %d attempt(s) fit",
				r.MaxAttempts, r.PerAttemptTimeout, backoff, total, deadline, attemptsThatFit(r, deadline)))
		}
	}
	if r.MaxAttempts > 1 && r.Budget.Ratio == 0 && r.Budget.MinRetriesPerSecond == 0 {
		ws = append(ws, fmt.Sprintf("retry.budget: ratio and minRetriesPerSecond are both 0, so no retry is ever admitted although maxAttempts is %d",
			r.MaxAttempts))
	}
	if p.Breaker.Mode == ModeShadow {
		ws = append(ws, "breaker.mode: shadow: transitions are computed and reported, but no call is ever rejected")
	}
	return ws
}

func attemptsThatFit(r RetryPolicy, deadline time.Duration) int {
	for n := r.MaxAttempts; n > 0; n-- {
		q := r
		q.MaxAttempts = n
		if time.Duration(n)*r.PerAttemptTimeout.Std()+q.WorstCaseBackoff() <= deadline {
			return n
		}
	}
	return 0
}

// CheckPolicyDocument validates a policy document the way a write does (a
// dependency's partial policy merged over def; the fleet default, named
// DefaultPolicyName, as a complete policy) and, when there is no violation,
// lints it against deadline (ignored when not positive). The coordinator's
// ValidatePolicy and `fuseboxctl policy lint` both call it.
func CheckPolicyDocument(data []byte, def Policy, deadline time.Duration) (violations []Violation, warnings []string) {
	asViolations := func(err error) []Violation {
		var verr *ValidationError
		if errors.As(err, &verr) {
			return verr.Violations
		}
		return []Violation{{Message: err.Error()}}
	}
	patch, err := ParsePolicyPatch(data)
	if err != nil {
		return asViolations(err), nil
	}
	var p Policy
	if patch.Dependency == DefaultPolicyName {
		p, err = ParsePolicy(data)
	} else {
		p = MergePolicy(def, patch)
		err = p.Validate()
	}
	if err != nil {
		return asViolations(err), nil
	}
	return nil, p.Lint(deadline)
}
