package sharedstate

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
)

// What a policy change does, and where each value of an effective policy
// comes from, are computed here once: the coordinator's Admin API answers
// with them (the audit's field diff, GetEffectivePolicy) and fuseboxctl
// shows them (policy get, the previews of policy set, edit and rm).

// FieldChange is one leaf of a JSON document that differs between two
// versions of it: a policy field, or an override's state, reason or expiry.
type FieldChange struct {
	// Field is the leaf's dotted JSON path, e.g. "breaker.minimumRequests".
	Field string `json:"field"`
	// From and To are its JSON values before and after; "" where the
	// document did not have it.
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
}

// DiffDocuments lists the leaves that differ between two JSON documents
// (empty, "null" or not an object: no leaves), in the order of a policy's
// fields, then by path. Objects are walked; every other value (arrays
// included) is a leaf. "schema" and "dependency" are left out: they name
// the document rather than say what it does.
func DiffDocuments(before, after []byte) []FieldChange {
	a, b := leavesOfJSON(before), leavesOfJSON(after)
	var out []FieldChange
	for _, k := range unionKeys(a, b) {
		if k == "schema" || k == "dependency" || a[k] == b[k] {
			continue
		}
		out = append(out, FieldChange{Field: k, From: a[k], To: b[k]})
	}
	return out
}

// unionKeys returns the keys of a and b in field order (comparePaths).
func unionKeys(a, b map[string]string) []string {
	all := maps.Clone(a)
	maps.Copy(all, b)
	return slices.SortedFunc(maps.Keys(all), comparePaths)
}

// leavesOfJSON maps the leaves of a JSON object to their dotted paths and
// compact JSON values.
func leavesOfJSON(doc []byte) map[string]string {
	out := map[string]string{}
	var v map[string]any // an object; anything else has no leaves
	if len(doc) == 0 || json.Unmarshal(doc, &v) != nil {
		return out
	}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if m, ok := v.(map[string]any); ok {
			for k, x := range m {
				p := k
				if prefix != "" {
					p = prefix + "." + k
				}
				walk(p, x)
			}
			return
		}
		s, _ := json.Marshal(v)
		out[prefix] = string(s)
	}
	walk("", v)
	return out
}

// PolicySource says where the value of a field of an effective policy
// comes from.
type PolicySource string

// The sources of a policy's values, from the most specific.
const (
	// SourceOwn: the dependency's own policy (policies/<dependency>) sets it.
	SourceOwn PolicySource = "own"
	// SourceFleetDefault: the stored fleet default (policies/_default) sets it.
	SourceFleetDefault PolicySource = "fleet-default"
	// SourceBuiltIn: neither does; the built-in default (DefaultPolicy) applies.
	SourceBuiltIn PolicySource = "built-in"
)

// ExplainedField is one field of an effective policy and where its value
// comes from.
type ExplainedField struct {
	// Field is the dotted JSON path, e.g. "breaker.minimumRequests".
	Field string `json:"field"`
	// Value is the field's JSON value in the effective policy.
	Value  string       `json:"value"`
	Source PolicySource `json:"source"`
	// Inherited is the value the field would have without its source: the
	// fleet default's (over the built-in default) for SourceOwn, the built-in
	// default's for SourceFleetDefault; "" for SourceBuiltIn. Removing the
	// dependency's policy (or the fleet default) changes Value to it.
	Inherited string `json:"inherited,omitempty"`
}

// ExplainPolicy returns the effective policy of name (a dependency, or
// DefaultPolicyName for the fleet default itself) and every one of its
// fields with where its value comes from. def is the stored fleet default
// (nil: none stored, the built-in default applies), own the dependency's
// own stored policy (nil: none, it runs on the fleet default; ignored for
// DefaultPolicyName). The merge is the agents': own over def, def over the
// built-in default (a stored default may leave out the fields added since
// schema 1 was first written). Documents that do not parse are refused with
// an error matching ErrInvalidPolicy.
func ExplainPolicy(name string, def, own []byte) (Policy, []ExplainedField, error) {
	builtIn := DefaultPolicy()
	fleet, defSet, ownSet := builtIn, map[string]bool{}, map[string]bool{}
	if def != nil {
		var err error
		if fleet, defSet, err = parseComplete(def); err != nil {
			return Policy{}, nil, fmt.Errorf("the fleet default: %w", err)
		}
	}
	eff := fleet
	if name != DefaultPolicyName {
		if own != nil {
			var err error
			if eff, ownSet, err = decodeStrict(fleet, own); err != nil {
				return Policy{}, nil, fmt.Errorf("the policy of %s: %w", name, err)
			}
		}
		eff.Dependency = name
	}
	vals, fleetVals, builtInVals := policyLeaves(eff), policyLeaves(fleet), policyLeaves(builtIn)
	var out []ExplainedField
	for _, f := range policyPaths {
		if f.section || f.path == "schema" || f.path == "dependency" {
			continue
		}
		e := ExplainedField{Field: f.path, Value: vals[f.path], Source: SourceBuiltIn}
		switch {
		case ownSet[f.path]:
			e.Source, e.Inherited = SourceOwn, fleetVals[f.path]
		case defSet[f.path]:
			e.Source, e.Inherited = SourceFleetDefault, builtInVals[f.path]
		}
		out = append(out, e)
	}
	return eff, out, nil
}

// policyLeaves maps every leaf of p to its JSON value.
func policyLeaves(p Policy) map[string]string {
	b, err := json.Marshal(p)
	if err != nil { // a Policy always marshals
		return map[string]string{}
	}
	return leavesOfJSON(b)
}
