package sharedstate

import (
	"errors"
	"fmt"
)

// Policy returns the effective policy of dep (the default for an untracked one).
func (e *Engine) Policy(dep string) Policy {
	if d := e.lookup(dep); d != nil {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.pol
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.effective(dep, nil)
}

// SetDefaultPolicy replaces the fleet default (policies/_default) and
// re-merges every dependency's policy over it. p must be valid. A dependency
// whose merged policy would be invalid keeps its previous policy; the
// returned error names each such dependency, and the default is set anyway.
func (e *Engine) SetDefaultPolicy(p Policy) error {
	p.Dependency = DefaultPolicyName
	if err := p.Validate(); err != nil {
		return err
	}
	now := e.now()
	e.mu.Lock()
	e.def = p
	var errs []error
	var changed []string
	for _, d := range e.sortedDeps() {
		d.mu.Lock()
		eff := e.effective(d.name, d.patch)
		if err := eff.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("dependency %s keeps its previous policy: %w", d.name, err))
		} else {
			d.setPolicy(e, eff, e.rnd.Uint64())
			if d.refresh(e, now) {
				changed = append(changed, d.name)
			}
		}
		d.mu.Unlock()
	}
	e.mu.Unlock()
	for _, dep := range changed {
		e.notify(dep)
	}
	return errors.Join(errs...)
}

// SetPolicy sets dep's complete policy; the default no longer matters to it.
// p.Dependency is ignored. The policy must be valid.
func (e *Engine) SetPolicy(dep string, p Policy) error {
	p.Dependency = dep
	return e.SetPolicyPatch(dep, p.Patch())
}

// SetPolicyPatch sets dep's partial policy (policies/<dep>): the effective
// policy is the patch merged over the current default, and is re-merged when
// the default changes. The merged policy must be valid, else nothing changes
// and the *ValidationError is returned. A different window length starts the
// dependency's window afresh.
func (e *Engine) SetPolicyPatch(dep string, patch PolicyPatch) error {
	if patch.Dependency != "" && patch.Dependency != dep {
		return &ValidationError{Violations: []Violation{{Field: "dependency", Value: patch.Dependency,
			Message: "must match the dependency the policy is stored for (" + dep + ")"}}}
	}
	d, err := e.state(dep)
	if err != nil {
		return err
	}
	patch = patch.clone()
	now := e.now()
	e.mu.Lock()
	eff := e.effective(dep, &patch)
	if err := eff.Validate(); err != nil {
		e.mu.Unlock()
		return err
	}
	d.mu.Lock()
	d.patch = &patch
	d.setPolicy(e, eff, e.rnd.Uint64())
	changed := d.refresh(e, now)
	d.mu.Unlock()
	e.mu.Unlock()
	if changed {
		e.notify(dep)
	}
	return nil
}

// RemovePolicy drops dep's own policy: it follows the default again.
func (e *Engine) RemovePolicy(dep string) {
	d := e.lookup(dep)
	if d == nil {
		return
	}
	now := e.now()
	e.mu.Lock()
	d.mu.Lock()
	d.patch = nil
	d.setPolicy(e, e.effective(dep, nil), e.rnd.Uint64())
	changed := d.refresh(e, now)
	d.mu.Unlock()
	e.mu.Unlock()
	if changed {
		e.notify(dep)
	}
}

// SetOverride sets (or, with nil, clears) the operator override of dep. An
// override beats every computed state until it expires or is cleared.
func (e *Engine) SetOverride(dep string, o *Override) error {
	if o != nil {
		if err := o.Validate(); err != nil {
			return err
		}
		c := *o
		o = &c
	}
	var d *depState
	if o == nil {
		if d = e.lookup(dep); d == nil {
			return nil
		}
	} else {
		var err error
		if d, err = e.state(dep); err != nil {
			return err
		}
	}
	now := e.now()
	d.mu.Lock()
	d.override = o
	changed := d.refresh(e, now)
	d.mu.Unlock()
	if changed {
		e.notify(dep)
	}
	return nil
}
