package sharedstate

// PolicyPatch is a policy that may set only some fields: the form of
// policies/<dependency> in etcd. A nil pointer (or an empty Dependency) means
// "inherit from _default". MergePolicy applies it over a complete Policy.
type PolicyPatch struct {
	Schema     *int          `json:"schema,omitempty"`
	Dependency string        `json:"dependency,omitempty"`
	Breaker    *BreakerPatch `json:"breaker,omitempty"`
	Retry      *RetryPatch   `json:"retry,omitempty"`
	// Throttle and Concurrency came after the first release of schema 1: a
	// complete policy (ParsePolicy) may leave them out.
	Throttle    *ThrottlePatch    `json:"throttle,omitempty"`
	Concurrency *ConcurrencyPatch `json:"concurrency,omitempty"`
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
	Confidence            *float64  `json:"confidence,omitempty"`
	FastPath              *bool     `json:"fastPath,omitempty"`
	FleetMaxOpenDuration  *Duration `json:"fleetMaxOpenDuration,omitempty"`
	RampDuration          *Duration `json:"rampDuration,omitempty"`
	RampStart             *float64  `json:"rampStart,omitempty"`
}

// RetryPatch is the optional-field form of RetryPolicy.
type RetryPatch struct {
	MaxAttempts       *int          `json:"maxAttempts,omitempty"`
	PerAttemptTimeout *Duration     `json:"perAttemptTimeout,omitempty"`
	Backoff           *BackoffPatch `json:"backoff,omitempty"`
	Budget            *BudgetPatch  `json:"budget,omitempty"`
	Hedge             *HedgePatch   `json:"hedge,omitempty"`
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

// HedgePatch is the optional-field form of HedgePolicy.
type HedgePatch struct {
	Delay     *Duration `json:"delay,omitempty"`
	MaxHedges *int      `json:"maxHedges,omitempty"`
}

// ThrottlePatch is the optional-field form of ThrottlePolicy.
type ThrottlePatch struct {
	Enabled     *bool    `json:"enabled,omitempty"`
	K           *float64 `json:"k,omitempty"`
	MinRequests *int     `json:"minRequests,omitempty"`
}

// ConcurrencyPatch is the optional-field form of ConcurrencyPolicy.
type ConcurrencyPatch struct {
	MaxInFlight *int `json:"maxInFlight,omitempty"`
}

// ParsePolicyPatch decodes a (possibly partial) policy strictly: unknown
// fields (names are case-sensitive), wrong types, numbers where durations
// belong and a schema other than 1 are refused, every one of them with its
// JSON path in one *ValidationError; JSON that is not well-formed and
// trailing data are refused with an error matching ErrInvalidPolicy. Values
// are not range-checked here: validate the result of MergePolicy, which is
// the policy that takes effect, or use ParsePolicyPatchOver, which does both.
func ParsePolicyPatch(data []byte) (PolicyPatch, error) {
	p, vs, err := decodePolicyPatch(data)
	if err != nil {
		return PolicyPatch{}, err
	}
	if len(vs) > 0 {
		return PolicyPatch{}, &ValidationError{Violations: vs}
	}
	return p, nil
}

// ParsePolicy decodes a complete policy (such as policies/_default) strictly,
// as ParsePolicyPatch does, requires every field to be present (except
// "schema", which defaults to 1, and the fields added since schema 1 was
// first written — breaker.confidence, breaker.fastPath,
// breaker.fleetMaxOpenDuration, breaker.rampDuration, breaker.rampStart and
// the sections
// retry.hedge, throttle and concurrency — which default to DefaultPolicy's
// values) and validates it. Errors match ErrInvalidPolicy; a
// *ValidationError names every field that does not decode, is missing or is
// invalid.
func ParsePolicy(data []byte) (Policy, error) {
	patch, decodeVs, err := decodePolicyPatch(data)
	if err != nil {
		return Policy{}, err
	}
	bad := map[string]bool{}
	for _, v := range decodeVs {
		bad[v.Field] = true
	}
	var missing []Violation
	base, def := Policy{Schema: PolicySchema}, DefaultPolicy().Patch()
	for _, f := range policyFields {
		switch {
		case f.isSet(&patch), bad[f.path]:
		case f.optional:
			f.merge(&base, &def)
		default:
			missing = append(missing, Violation{Field: f.path, Message: "is required"})
		}
	}
	p := MergePolicy(base, patch)
	if patch.Dependency == "" && !bad["dependency"] {
		missing = append([]Violation{{Field: "dependency", Message: "is required"}}, missing...)
	}
	// A missing field also fails its rule; report it once, as missing.
	if verr := mergeViolations(append(decodeVs, missing...), p.validate()); len(verr) > 0 {
		return Policy{}, &ValidationError{Violations: verr}
	}
	return p, nil
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
	for _, f := range policyFields {
		f.merge(&p, &patch)
	}
	return p
}

// Patch returns p as a PolicyPatch that sets every field, so that
// MergePolicy(anything, p.Patch()) == p.
func (p Policy) Patch() PolicyPatch {
	schema := p.Schema
	out := PolicyPatch{Schema: &schema, Dependency: p.Dependency}
	for _, f := range policyFields {
		f.fill(&out, &p)
	}
	return out
}

// clone returns a deep copy of p: it shares no pointer with p.
func (p PolicyPatch) clone() PolicyPatch {
	c := PolicyPatch{Dependency: p.Dependency}
	if p.Schema != nil {
		v := *p.Schema
		c.Schema = &v
	}
	for _, f := range policyFields {
		f.copy(&c, &p)
	}
	return c
}
