package sharedstate

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// Policy returns the effective policy of dep (the default for an untracked one).
func (e *Engine) Policy(dep string) Policy {
	if d := e.deps.load(dep); d != nil {
		d.mu.Lock()
		defer d.mu.Unlock()
		return *d.pol
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return *e.defaultFor(dep)
}

// PolicyJSON returns the effective policy of dep that its snapshots carry
// (Snapshot.Policy) and that policy as a complete JSON document, made once
// per policy: what the agent sends clients in a snapshot's policy_json.
// Both are shared: never modify them. nil, nil for an untracked dependency.
func (e *Engine) PolicyJSON(dep string) (*Policy, []byte) {
	d := e.deps.load(dep)
	if d == nil {
		return nil, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.polJSON == nil {
		d.polJSON, _ = json.Marshal(d.pol) // a valid policy always marshals
	}
	return d.pol, d.polJSON
}

// SetDefaultPolicy replaces the fleet default (policies/_default) and
// reads every dependency's own policy document over it again. p must be
// valid. A dependency whose policy would be invalid over it keeps its
// previous policy; the returned error names each such dependency, and the
// default is set anyway.
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
	for _, d := range e.deps.sortedValues() {
		d.mu.Lock()
		if eff, err := e.effective(d.name, d.doc); err != nil {
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
	if err := p.Validate(); err != nil {
		return err
	}
	doc, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return e.SetPolicyDocument(dep, doc)
}

// SetPolicyDocument sets dep's own policy document (policies/<dep>, which
// may set only some fields): the effective policy is the document read over
// the current default (ParsePolicyOver), and is read again when the default
// changes. It must be valid, and its "dependency" field (when set) must be
// dep, else nothing changes and the *ValidationError is returned. A
// different window length starts the dependency's window afresh.
func (e *Engine) SetPolicyDocument(dep string, doc []byte) error {
	d, err := e.state(dep)
	if err != nil {
		return err
	}
	return e.setDocument(d, slices.Clone(doc))
}

// RemovePolicy drops dep's own policy: it follows the default again.
func (e *Engine) RemovePolicy(dep string) {
	if d := e.deps.load(dep); d != nil {
		e.setDocument(d, nil) // the default over itself is valid
	}
}

// setDocument makes doc (nil: none) d's own policy document, and the
// document read over the default its effective policy, unless that is
// invalid.
func (e *Engine) setDocument(d *depState, doc []byte) error {
	now := e.now()
	e.mu.Lock()
	eff, err := e.effective(d.name, doc)
	if err != nil {
		e.mu.Unlock()
		return err
	}
	d.mu.Lock()
	d.doc = doc
	d.setPolicy(e, eff, e.rnd.Uint64())
	changed := d.refresh(e, now)
	d.mu.Unlock()
	e.mu.Unlock()
	if changed {
		e.notify(d.name)
	}
	return nil
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
		if d = e.deps.load(dep); d == nil {
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
	e.unlock(d, changed)
	return nil
}
