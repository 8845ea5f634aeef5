package sharedstate

import "encoding/json"

// policyField is one leaf of a policy (every field but "schema" and
// "dependency"): its JSON path and how to reach it in a Policy and in a
// PolicyPatch. policyFields is the one list of them: MergePolicy,
// Policy.Patch, PolicyPatch.clone and ParsePolicy's completeness check are
// derived from it,
// and TestPolicyFieldTable fails when it disagrees with the structs' JSON
// tags, with DefaultPolicy or with Policy.Validate.
//
// Adding a policy field: the field in the Policy struct and in its patch
// struct, its default in DefaultPolicy, its rule in Policy.validate, one line
// here.
type policyField struct {
	path string
	// optional: a complete policy (ParsePolicy) may leave the field out and
	// gets DefaultPolicy's value, so that documents written before the field
	// existed stay valid.
	optional bool
	isSet    func(src *PolicyPatch) bool
	merge    func(dst *Policy, src *PolicyPatch)      // dst's field = src's, if src sets it
	fill     func(dst *PolicyPatch, src *Policy)      // dst sets the field to src's value
	copy     func(dst *PolicyPatch, src *PolicyPatch) // dst sets the field to a copy of src's, if set
	// decode sets the field from its JSON value (not null), or says what is
	// wrong with the value, without the path (policy_decode.go adds it).
	decode func(dst *PolicyPatch, raw json.RawMessage) *Violation
}

func optional(f policyField) policyField {
	f.optional = true
	return f
}

// leaf builds a policyField from the field's address in a Policy and in a
// PolicyPatch (nil when the patch lacks the enclosing section and alloc is
// false; alloc creates the section).
func leaf[T any](path string, pol func(*Policy) *T, pat func(p *PolicyPatch, alloc bool) **T) policyField {
	get := func(p *PolicyPatch) *T {
		if pp := pat(p, false); pp != nil {
			return *pp
		}
		return nil
	}
	put := func(p *PolicyPatch, v T) { *pat(p, true) = &v }
	return policyField{
		path:  path,
		isSet: func(src *PolicyPatch) bool { return get(src) != nil },
		merge: func(dst *Policy, src *PolicyPatch) {
			if v := get(src); v != nil {
				*pol(dst) = *v
			}
		},
		fill: func(dst *PolicyPatch, src *Policy) { put(dst, *pol(src)) },
		copy: func(dst *PolicyPatch, src *PolicyPatch) {
			if v := get(src); v != nil {
				put(dst, *v)
			}
		},
		decode: func(dst *PolicyPatch, raw json.RawMessage) *Violation {
			var v T
			if err := json.Unmarshal(raw, &v); err != nil {
				return decodeViolation(path, raw, any(&v), err)
			}
			put(dst, v)
			return nil
		},
	}
}

// section builds the policyField of a field in one section of the policy.
func section[S, P, T any](path string, polSec func(*Policy) *S, patSec func(p *PolicyPatch, alloc bool) *P,
	pol func(*S) *T, pat func(*P) **T) policyField {
	return leaf(path, func(p *Policy) *T { return pol(polSec(p)) }, func(p *PolicyPatch, alloc bool) **T {
		if s := patSec(p, alloc); s != nil {
			return pat(s)
		}
		return nil
	})
}

func breakerField[T any](name string, pol func(*BreakerPolicy) *T, pat func(*BreakerPatch) **T) policyField {
	return section("breaker."+name, func(p *Policy) *BreakerPolicy { return &p.Breaker }, (*PolicyPatch).breaker, pol, pat)
}

func retryField[T any](name string, pol func(*RetryPolicy) *T, pat func(*RetryPatch) **T) policyField {
	return section("retry."+name, func(p *Policy) *RetryPolicy { return &p.Retry }, (*PolicyPatch).retry, pol, pat)
}

func backoffField[T any](name string, pol func(*BackoffPolicy) *T, pat func(*BackoffPatch) **T) policyField {
	return section("retry.backoff."+name, func(p *Policy) *BackoffPolicy { return &p.Retry.Backoff }, (*PolicyPatch).backoff, pol, pat)
}

func budgetField[T any](name string, pol func(*BudgetPolicy) *T, pat func(*BudgetPatch) **T) policyField {
	return section("retry.budget."+name, func(p *Policy) *BudgetPolicy { return &p.Retry.Budget }, (*PolicyPatch).budget, pol, pat)
}

func hedgeField[T any](name string, pol func(*HedgePolicy) *T, pat func(*HedgePatch) **T) policyField {
	f := section("retry.hedge."+name, func(p *Policy) *HedgePolicy { return &p.Retry.Hedge }, (*PolicyPatch).hedge, pol, pat)
	f.optional = true
	return f
}

func throttleField[T any](name string, pol func(*ThrottlePolicy) *T, pat func(*ThrottlePatch) **T) policyField {
	f := section("throttle."+name, func(p *Policy) *ThrottlePolicy { return &p.Throttle }, (*PolicyPatch).throttle, pol, pat)
	f.optional = true
	return f
}

func concurrencyField[T any](name string, pol func(*ConcurrencyPolicy) *T, pat func(*ConcurrencyPatch) **T) policyField {
	f := section("concurrency."+name, func(p *Policy) *ConcurrencyPolicy { return &p.Concurrency }, (*PolicyPatch).concurrency, pol, pat)
	f.optional = true
	return f
}

// The sections of a patch; alloc creates a missing one.

func (p *PolicyPatch) breaker(alloc bool) *BreakerPatch {
	if p.Breaker == nil && alloc {
		p.Breaker = &BreakerPatch{}
	}
	return p.Breaker
}

func (p *PolicyPatch) retry(alloc bool) *RetryPatch {
	if p.Retry == nil && alloc {
		p.Retry = &RetryPatch{}
	}
	return p.Retry
}

func (p *PolicyPatch) backoff(alloc bool) *BackoffPatch {
	r := p.retry(alloc)
	if r != nil && r.Backoff == nil && alloc {
		r.Backoff = &BackoffPatch{}
	}
	if r == nil {
		return nil
	}
	return r.Backoff
}

func (p *PolicyPatch) budget(alloc bool) *BudgetPatch {
	r := p.retry(alloc)
	if r != nil && r.Budget == nil && alloc {
		r.Budget = &BudgetPatch{}
	}
	if r == nil {
		return nil
	}
	return r.Budget
}

func (p *PolicyPatch) hedge(alloc bool) *HedgePatch {
	r := p.retry(alloc)
	if r != nil && r.Hedge == nil && alloc {
		r.Hedge = &HedgePatch{}
	}
	if r == nil {
		return nil
	}
	return r.Hedge
}

func (p *PolicyPatch) throttle(alloc bool) *ThrottlePatch {
	if p.Throttle == nil && alloc {
		p.Throttle = &ThrottlePatch{}
	}
	return p.Throttle
}

func (p *PolicyPatch) concurrency(alloc bool) *ConcurrencyPatch {
	if p.Concurrency == nil && alloc {
		p.Concurrency = &ConcurrencyPatch{}
	}
	return p.Concurrency
}

// policyFields lists every leaf of a policy, in the order of the structs.
var policyFields = []policyField{
	breakerField("failureRateThreshold", func(b *BreakerPolicy) *float64 { return &b.FailureRateThreshold }, func(b *BreakerPatch) **float64 { return &b.FailureRateThreshold }),
	breakerField("slowCallRateThreshold", func(b *BreakerPolicy) *float64 { return &b.SlowCallRateThreshold }, func(b *BreakerPatch) **float64 { return &b.SlowCallRateThreshold }),
	breakerField("slowCallDuration", func(b *BreakerPolicy) *Duration { return &b.SlowCallDuration }, func(b *BreakerPatch) **Duration { return &b.SlowCallDuration }),
	breakerField("minimumRequests", func(b *BreakerPolicy) *int { return &b.MinimumRequests }, func(b *BreakerPatch) **int { return &b.MinimumRequests }),
	breakerField("minFailingNodes", func(b *BreakerPolicy) *int { return &b.MinFailingNodes }, func(b *BreakerPatch) **int { return &b.MinFailingNodes }),
	breakerField("window", func(b *BreakerPolicy) *Duration { return &b.Window }, func(b *BreakerPatch) **Duration { return &b.Window }),
	breakerField("openDuration", func(b *BreakerPolicy) *Duration { return &b.OpenDuration }, func(b *BreakerPatch) **Duration { return &b.OpenDuration }),
	breakerField("maxOpenDuration", func(b *BreakerPolicy) *Duration { return &b.MaxOpenDuration }, func(b *BreakerPatch) **Duration { return &b.MaxOpenDuration }),
	breakerField("halfOpenProbes", func(b *BreakerPolicy) *int { return &b.HalfOpenProbes }, func(b *BreakerPatch) **int { return &b.HalfOpenProbes }),
	breakerField("probeSuccessThreshold", func(b *BreakerPolicy) *int { return &b.ProbeSuccessThreshold }, func(b *BreakerPatch) **int { return &b.ProbeSuccessThreshold }),
	breakerField("probeTimeout", func(b *BreakerPolicy) *Duration { return &b.ProbeTimeout }, func(b *BreakerPatch) **Duration { return &b.ProbeTimeout }),
	breakerField("scope", func(b *BreakerPolicy) *Scope { return &b.Scope }, func(b *BreakerPatch) **Scope { return &b.Scope }),
	breakerField("mode", func(b *BreakerPolicy) *Mode { return &b.Mode }, func(b *BreakerPatch) **Mode { return &b.Mode }),
	optional(breakerField("confidence", func(b *BreakerPolicy) *float64 { return &b.Confidence }, func(b *BreakerPatch) **float64 { return &b.Confidence })),
	optional(breakerField("fastPath", func(b *BreakerPolicy) *bool { return &b.FastPath }, func(b *BreakerPatch) **bool { return &b.FastPath })),
	optional(breakerField("fleetMaxOpenDuration", func(b *BreakerPolicy) *Duration { return &b.FleetMaxOpenDuration }, func(b *BreakerPatch) **Duration { return &b.FleetMaxOpenDuration })),
	optional(breakerField("rampDuration", func(b *BreakerPolicy) *Duration { return &b.RampDuration }, func(b *BreakerPatch) **Duration { return &b.RampDuration })),
	optional(breakerField("rampStart", func(b *BreakerPolicy) *float64 { return &b.RampStart }, func(b *BreakerPatch) **float64 { return &b.RampStart })),
	retryField("maxAttempts", func(b *RetryPolicy) *int { return &b.MaxAttempts }, func(b *RetryPatch) **int { return &b.MaxAttempts }),
	retryField("perAttemptTimeout", func(b *RetryPolicy) *Duration { return &b.PerAttemptTimeout }, func(b *RetryPatch) **Duration { return &b.PerAttemptTimeout }),
	backoffField("base", func(b *BackoffPolicy) *Duration { return &b.Base }, func(b *BackoffPatch) **Duration { return &b.Base }),
	backoffField("max", func(b *BackoffPolicy) *Duration { return &b.Max }, func(b *BackoffPatch) **Duration { return &b.Max }),
	backoffField("jitter", func(b *BackoffPolicy) *Jitter { return &b.Jitter }, func(b *BackoffPatch) **Jitter { return &b.Jitter }),
	budgetField("ratio", func(b *BudgetPolicy) *float64 { return &b.Ratio }, func(b *BudgetPatch) **float64 { return &b.Ratio }),
	budgetField("minRetriesPerSecond", func(b *BudgetPolicy) *float64 { return &b.MinRetriesPerSecond }, func(b *BudgetPatch) **float64 { return &b.MinRetriesPerSecond }),
	hedgeField("delay", func(b *HedgePolicy) *Duration { return &b.Delay }, func(b *HedgePatch) **Duration { return &b.Delay }),
	hedgeField("maxHedges", func(b *HedgePolicy) *int { return &b.MaxHedges }, func(b *HedgePatch) **int { return &b.MaxHedges }),
	throttleField("enabled", func(b *ThrottlePolicy) *bool { return &b.Enabled }, func(b *ThrottlePatch) **bool { return &b.Enabled }),
	throttleField("k", func(b *ThrottlePolicy) *float64 { return &b.K }, func(b *ThrottlePatch) **float64 { return &b.K }),
	throttleField("minRequests", func(b *ThrottlePolicy) *int { return &b.MinRequests }, func(b *ThrottlePatch) **int { return &b.MinRequests }),
	concurrencyField("maxInFlight", func(b *ConcurrencyPolicy) *int { return &b.MaxInFlight }, func(b *ConcurrencyPatch) **int { return &b.MaxInFlight }),
}
