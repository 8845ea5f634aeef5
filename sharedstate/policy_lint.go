package sharedstate

import (
	"errors"
	"fmt"
	"time"
)

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
	w, ceiling := r.Backoff.Base.Std(), r.Backoff.Max.Std()
	for k := 1; k < r.MaxAttempts; k++ {
		w = min(w, ceiling)
		total += w
		if w < ceiling {
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
	if p.Breaker.FastPath && p.Breaker.Confidence == 0 {
		ws = append(ws, "breaker.fastPath: has no effect with breaker.confidence 0 (the classic rule): the fast path trips only on a confidence bound")
	}
	if p.Breaker.Mode == ModeShadow {
		ws = append(ws, "breaker.mode: shadow: transitions are computed and reported, but no call is ever rejected")
	}
	if h := r.Hedge; h.Enabled() {
		if h.Delay >= r.PerAttemptTimeout {
			ws = append(ws, fmt.Sprintf("retry.hedge.delay: %s is not shorter than retry.perAttemptTimeout %s: an attempt times out before its hedge would start",
				h.Delay, r.PerAttemptTimeout))
		}
		if r.Budget.Ratio == 0 && r.Budget.MinRetriesPerSecond == 0 {
			ws = append(ws, "retry.hedge: the retry budget (ratio and minRetriesPerSecond) is 0, so no hedge is ever started")
		}
	}
	if p.Throttle.Enabled && p.Throttle.K < 1.1 {
		ws = append(ws, fmt.Sprintf("throttle.k: %s refuses traffic as soon as a few requests fail; 1.5 to 2 leaves room for normal errors",
			fmtFloat(p.Throttle.K)))
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
// dependency's document read over def; the fleet default, named
// DefaultPolicyName, as a complete policy) and, when there is no violation,
// lints it against deadline (ignored when not positive). `fuseboxctl policy
// lint` calls it; the coordinator's ValidatePolicy calls
// CheckPolicyDocumentAs.
func CheckPolicyDocument(data []byte, def Policy, deadline time.Duration) (violations []Violation, warnings []string) {
	return CheckPolicyDocumentAs("", data, def, deadline)
}

// CheckPolicyDocumentAs is CheckPolicyDocument for a document to be written
// under name (a dependency or DefaultPolicyName; "": the one its
// "dependency" field names), checked as the write checks it: name must be
// one, the document's "dependency" field (when set) must agree with it
// (PolicyNameViolation), and under DefaultPolicyName the document must be a
// complete policy.
func CheckPolicyDocumentAs(name string, data []byte, def Policy, deadline time.Duration) (violations []Violation, warnings []string) {
	asViolations := func(err error) []Violation {
		var verr *ValidationError
		if errors.As(err, &verr) {
			return verr.Violations
		}
		return []Violation{{Message: err.Error()}}
	}
	if name != "" && name != DefaultPolicyName {
		if err := ValidateDependencyName(name); err != nil {
			return []Violation{{Field: "dependency", Value: fmt.Sprintf("%q", name), Message: err.Error()}}, nil
		}
	}
	own, _, _, err := decodePolicy(Policy{}, data)
	if err != nil {
		return asViolations(err), nil
	}
	var named []Violation
	var p Policy
	if name == DefaultPolicyName || name == "" && own.Dependency == DefaultPolicyName {
		if v := PolicyNameViolation(name, own.Dependency); v != nil {
			named = append(named, *v)
		}
		p, err = ParsePolicy(data)
	} else {
		// Decoding problems, the name and the rules of the fields that decoded, together.
		p, err = ParsePolicyOver(def, name, data)
	}
	if err != nil || len(named) > 0 {
		vs := named
		if err != nil {
			vs = mergeViolations(named, asViolations(err))
		}
		return vs, nil
	}
	return nil, p.Lint(deadline)
}

// PolicyNameViolation is the violation of a policy document written under
// name whose "dependency" field says docDependency, or nil when they agree
// (or either is empty).
func PolicyNameViolation(name, docDependency string) *Violation {
	if name == "" || docDependency == "" || name == docDependency {
		return nil
	}
	return &Violation{Field: "dependency", Value: fmt.Sprintf("%q", docDependency), Message: "must be " + name + " in policies/" + name}
}
