package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fusebox-dev/fusebox/sharedstate"
)

// PolicyEntry is a policy document as stored under policies/<name>.
//
// policies/_default holds the fleet default: a complete policy. Every other
// key holds a dependency's policy document, which may set only some fields:
// it is read over the default (the fields it sets replace the default's,
// the others keep them); PolicyEntry.Policy computes the effective policy.
type PolicyEntry struct {
	// Name is the dependency, or sharedstate.DefaultPolicyName.
	Name string
	// Value is the stored JSON document (with "schema": 1 and "dependency").
	Value json.RawMessage

	ModRevision    int64
	CreateRevision int64
	Version        int64
}

// IsDefault reports whether e is the fleet default (policies/_default).
func (e PolicyEntry) IsDefault() bool { return e.Name == sharedstate.DefaultPolicyName }

// Policy returns the policy in force for e given the fleet default def
// (ignored when e is the default itself), validated.
func (e PolicyEntry) Policy(def sharedstate.Policy) (sharedstate.Policy, error) {
	if e.IsDefault() {
		return sharedstate.ParsePolicy(e.Value)
	}
	return sharedstate.ParsePolicyOver(def, e.Name, e.Value)
}

// checkPolicyName accepts sharedstate.DefaultPolicyName and dependency names.
func checkPolicyName(name string) error {
	if name == sharedstate.DefaultPolicyName {
		return nil
	}
	return sharedstate.ValidateDependencyName(name)
}

// parsePolicyValue checks the value of policies/<name> on its own: strict
// JSON, schema 1, a "dependency" field (when present) equal to name, and for
// the default a complete, valid policy. It does not check a dependency's
// document against a default: see PolicyEntry.Policy.
func parsePolicyValue(name string, data []byte) error {
	var p sharedstate.Policy
	var err error
	if name == sharedstate.DefaultPolicyName {
		p, err = sharedstate.ParsePolicy(data)
	} else {
		p, err = sharedstate.DecodePolicy(sharedstate.Policy{}, data) // its own "dependency", if any
	}
	if err != nil {
		return err
	}
	if v := sharedstate.PolicyNameViolation(name, p.Dependency); v != nil {
		return &sharedstate.ValidationError{Violations: []sharedstate.Violation{*v}}
	}
	return nil
}

// defaultFrom returns the fleet default stored in kv, or the built-in
// sharedstate.DefaultPolicy when kv is nil.
func defaultFrom(kv *mvccpb.KeyValue) (sharedstate.Policy, error) {
	if kv == nil {
		return sharedstate.DefaultPolicy(), nil
	}
	return sharedstate.ParsePolicy(kv.Value)
}

// PutPolicy validates data and writes it as policies/<name>, with an audit
// entry in the same transaction; name is a dependency or
// sharedstate.DefaultPolicyName.
//
// The default must be a complete policy; a dependency's policy may set only
// some fields. Either is refused, with a *sharedstate.ValidationError naming
// every violation (errors.As works through the returned error), when:
//   - it does not parse (unknown fields, wrong types, schema other than 1),
//     or its "dependency" field names another dependency;
//   - for a dependency: the policy it yields over the stored default (or the
//     built-in default when none is stored) is invalid;
//   - for the default: it is invalid, or any stored dependency policy would
//     yield an invalid policy over it.
//
// The write compares the revisions of what it validated against (the
// default, or every dependency policy), so a concurrent change cannot slip
// an invalid combination in: the write is retried against the new state.
// The stored value is data re-encoded with "schema": 1 and "dependency" set
// (sharedstate.PolicyDocument; the default with every field, the optional
// ones it leaves out filled in). w.Expect is checked against
// policies/<name>'s mod revision.
func (s *Store) PutPolicy(ctx context.Context, name string, data []byte, w WriteOptions) (PolicyEntry, error) {
	if err := checkPolicyName(name); err != nil {
		return PolicyEntry{}, fmt.Errorf("store: put policy: %w", err)
	}
	if err := parsePolicyValue(name, data); err != nil {
		var verr *sharedstate.ValidationError
		if name != sharedstate.DefaultPolicyName && errors.As(err, &verr) {
			// One refusal names every problem: the fields that decoded are
			// also checked against the default in force.
			if def, _, derr := s.readDefault(ctx, 0); derr == nil {
				var more *sharedstate.ValidationError
				if _, all := sharedstate.ParsePolicyOver(def, name, data); errors.As(all, &more) {
					err = sharedstate.JoinViolations(verr, more)
				}
			}
		}
		return PolicyEntry{}, fmt.Errorf("store: put policy %q: %w", name, err)
	}
	e := PolicyEntry{Name: name}
	c := change{action: ActionPolicyPut, dependency: name, key: s.PolicyKey(name), opts: w}
	if name == sharedstate.DefaultPolicyName {
		def, _ := sharedstate.ParsePolicy(data) // parsePolicyValue checked it
		e.Value, _ = json.Marshal(def)          // every field, the optional ones filled in
		c.prepare = func(ctx context.Context, rev int64, _ *mvccpb.KeyValue) ([]byte, []clientv3.Cmp, error) {
			cmps, err := s.checkPoliciesAgainst(ctx, rev, def)
			return e.Value, cmps, err
		}
	} else {
		e.Value, _ = sharedstate.PolicyDocument(name, data) // parsePolicyValue checked it
		c.prepare = func(ctx context.Context, rev int64, _ *mvccpb.KeyValue) ([]byte, []clientv3.Cmp, error) {
			def, cmp, err := s.readDefault(ctx, rev)
			if err != nil {
				return nil, nil, err
			}
			if _, err := e.Policy(def); err != nil {
				return nil, nil, fmt.Errorf("store: put policy %q (merged with the default): %w", name, err)
			}
			return e.Value, []clientv3.Cmp{cmp}, nil
		}
	}
	rev, prev, err := s.apply(ctx, c)
	if err != nil {
		return PolicyEntry{}, err
	}
	e.ModRevision, e.CreateRevision, e.Version = rev, rev, 1
	if prev != nil {
		e.CreateRevision, e.Version = prev.CreateRevision, prev.Version+1
	}
	return e, nil
}

// PutPolicyOf is PutPolicy for a complete policy p: its JSON document sets
// every field.
func (s *Store) PutPolicyOf(ctx context.Context, name string, p sharedstate.Policy, w WriteOptions) (PolicyEntry, error) {
	data, err := json.Marshal(p)
	if err != nil {
		return PolicyEntry{}, fmt.Errorf("store: put policy %q: %w", name, err)
	}
	return s.PutPolicy(ctx, name, data, w)
}

// DeletePolicy deletes policies/<name>, with an audit entry in the same
// transaction. It returns an error wrapping ErrNotFound when there is none,
// and a *ConflictError when w.Expect does not match. Deleting the default
// makes the built-in sharedstate.DefaultPolicy the default; it is refused
// (*sharedstate.ValidationError) if a stored dependency policy would be
// invalid over it.
func (s *Store) DeletePolicy(ctx context.Context, name string, w WriteOptions) (int64, error) {
	if err := checkPolicyName(name); err != nil {
		return 0, fmt.Errorf("store: delete policy: %w", err)
	}
	c := change{action: ActionPolicyDelete, dependency: name, key: s.PolicyKey(name), opts: w}
	if name == sharedstate.DefaultPolicyName {
		c.prepare = func(ctx context.Context, rev int64, prev *mvccpb.KeyValue) ([]byte, []clientv3.Cmp, error) {
			if prev == nil {
				return nil, nil, nil // apply reports ErrNotFound
			}
			cmps, err := s.checkPoliciesAgainst(ctx, rev, sharedstate.DefaultPolicy())
			return nil, cmps, err
		}
	}
	rev, _, err := s.apply(ctx, c)
	return rev, err
}

// readDefault reads policies/_default at rev and returns the default in
// force (the built-in one when none is stored) and a compare that holds
// while that key is unchanged. A stored default that is invalid is an
// *InvalidValueError: nothing can be validated against it.
func (s *Store) readDefault(ctx context.Context, rev int64) (sharedstate.Policy, clientv3.Cmp, error) {
	key := s.PolicyKey(sharedstate.DefaultPolicyName)
	resp, err := s.cli.Get(ctx, key, clientv3.WithRev(rev))
	if err != nil {
		return sharedstate.Policy{}, clientv3.Cmp{}, fmt.Errorf("store: read default policy: %w", err)
	}
	kv := first(resp.Kvs)
	def, err := defaultFrom(kv)
	if err != nil {
		return sharedstate.Policy{}, clientv3.Cmp{}, invalidValue(kv, err)
	}
	return def, clientv3.Compare(clientv3.ModRevision(key), "=", kv.GetModRevision()), nil
}

// checkPoliciesAgainst reads every dependency policy at rev and checks that
// each yields a valid policy over def. It returns a compare that holds while
// no key under policies/ has changed since rev, or a
// *sharedstate.ValidationError listing every violation, each field prefixed
// with its dependency. Values that do not parse on their own are ignored
// here: readers skip them whatever the default.
func (s *Store) checkPoliciesAgainst(ctx context.Context, rev int64, def sharedstate.Policy) ([]clientv3.Cmp, error) {
	prefix := s.prefix + policiesDir
	var vs []sharedstate.Violation
	_, err := s.rangeAll(ctx, prefix, rev, func(kv *mvccpb.KeyValue) {
		name := strings.TrimPrefix(string(kv.Key), prefix)
		if name == sharedstate.DefaultPolicyName || checkPolicyName(name) != nil {
			return
		}
		if parsePolicyValue(name, kv.Value) != nil {
			return
		}
		var verr *sharedstate.ValidationError
		if _, err := (PolicyEntry{Name: name, Value: kv.Value}).Policy(def); errors.As(err, &verr) {
			for _, v := range verr.Violations {
				v.Field = name + ": " + v.Field
				vs = append(vs, v)
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("store: read dependency policies: %w", err)
	}
	if len(vs) > 0 {
		return nil, fmt.Errorf("store: default policy would make dependency policies invalid: %w",
			&sharedstate.ValidationError{Violations: vs})
	}
	// Every key under policies/ still at a mod revision ≤ rev: nothing was
	// created or changed since the check.
	return []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(prefix), "<", rev+1).WithPrefix()}, nil
}

// GetPolicy returns policies/<name>. A dependency's policy is checked
// against the stored default (read at the same revision): a value that does
// not parse, or yields an invalid policy, is returned as an
// *InvalidValueError. A missing key is an error wrapping ErrNotFound.
func (s *Store) GetPolicy(ctx context.Context, name string) (PolicyEntry, error) {
	if err := checkPolicyName(name); err != nil {
		return PolicyEntry{}, fmt.Errorf("store: get policy: %w", err)
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	resp, err := s.readTxn(ctx,
		clientv3.OpGet(s.PolicyKey(name)),
		clientv3.OpGet(s.PolicyKey(sharedstate.DefaultPolicyName)),
	)
	if err != nil {
		return PolicyEntry{}, fmt.Errorf("store: get policy %q: %w", name, err)
	}
	kv := first(resp.Responses[0].GetResponseRange().Kvs)
	if kv == nil {
		return PolicyEntry{}, fmt.Errorf("%w: policy %q", ErrNotFound, name)
	}
	def, err := defaultFrom(first(resp.Responses[1].GetResponseRange().Kvs))
	if err != nil {
		def = sharedstate.DefaultPolicy() // the default's own problem; judge the document alone
	}
	return s.decodePolicy(kv, def)
}

// EffectivePolicy returns the policy in force for dependency: its stored
// document read over the stored default (the built-in default when none is
// stored), validated, and the revision read at. A dependency without a
// policy of its own gets the default. An invalid stored value is an
// *InvalidValueError.
func (s *Store) EffectivePolicy(ctx context.Context, dependency string) (sharedstate.Policy, int64, error) {
	if err := sharedstate.ValidateDependencyName(dependency); err != nil {
		return sharedstate.Policy{}, 0, fmt.Errorf("store: effective policy: %w", err)
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	resp, err := s.readTxn(ctx,
		clientv3.OpGet(s.PolicyKey(dependency)),
		clientv3.OpGet(s.PolicyKey(sharedstate.DefaultPolicyName)),
	)
	if err != nil {
		return sharedstate.Policy{}, 0, fmt.Errorf("store: effective policy %q: %w", dependency, err)
	}
	rev := resp.Header.Revision
	defKV := first(resp.Responses[1].GetResponseRange().Kvs)
	def, err := defaultFrom(defKV)
	if err != nil {
		return sharedstate.Policy{}, rev, invalidValue(defKV, err)
	}
	kv := first(resp.Responses[0].GetResponseRange().Kvs)
	if kv == nil {
		def.Dependency = dependency
		return def, rev, nil
	}
	e, err := s.decodePolicy(kv, def)
	if err != nil {
		return sharedstate.Policy{}, rev, err
	}
	p, _ := e.Policy(def) // decodePolicy validated it
	return p, rev, nil
}

// ListPolicies returns every valid policy, the default included, sorted by
// name, and the revision they were read at. Dependency policies are checked
// against the default listed with them. Invalid values are skipped and
// reported in the error (*InvalidValueError, several joined) alongside the
// valid entries.
func (s *Store) ListPolicies(ctx context.Context) ([]PolicyEntry, int64, error) {
	kvs, rev, err := s.list(ctx, policiesDir)
	if err != nil {
		return nil, 0, err
	}
	// The default first, so that the others are checked against it.
	def := sharedstate.DefaultPolicy()
	defKey := s.PolicyKey(sharedstate.DefaultPolicyName)
	if i := slices.IndexFunc(kvs, func(kv *mvccpb.KeyValue) bool { return string(kv.Key) == defKey }); i >= 0 {
		if d, err := defaultFrom(kvs[i]); err == nil {
			def = d
		}
	}
	entries, err := decodeAll(kvs, func(kv *mvccpb.KeyValue) (PolicyEntry, error) { return s.decodePolicy(kv, def) })
	return entries, rev, err
}

// decodePolicy parses a policies/ key-value and, for a dependency, checks it
// against def. Any problem is an *InvalidValueError.
func (s *Store) decodePolicy(kv *mvccpb.KeyValue, def sharedstate.Policy) (PolicyEntry, error) {
	name := strings.TrimPrefix(string(kv.Key), s.prefix+policiesDir)
	fail := func(err error) (PolicyEntry, error) { return PolicyEntry{}, invalidValue(kv, err) }
	if err := checkPolicyName(name); err != nil {
		return fail(err)
	}
	if err := parsePolicyValue(name, kv.Value); err != nil {
		return fail(err)
	}
	e := PolicyEntry{
		Name: name, Value: json.RawMessage(kv.Value),
		ModRevision: kv.ModRevision, CreateRevision: kv.CreateRevision, Version: kv.Version,
	}
	if name != sharedstate.DefaultPolicyName {
		if _, err := e.Policy(def); err != nil {
			return fail(fmt.Errorf("merged with the default: %w", err))
		}
	}
	return e, nil
}
