package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fusebox-dev/fusebox/sharedstate"
)

// OverrideEntry is an override as stored under overrides/<dependency>. Its
// value is sharedstate.Override's JSON: {state, reason, actor, created,
// expires}.
type OverrideEntry struct {
	Dependency string
	sharedstate.Override
	ModRevision int64
	Lease       clientv3.LeaseID // NoLease when it has no TTL
}

// OverrideSpec is what SetOverride writes.
type OverrideSpec struct {
	// State is sharedstate.ForcedOpen or sharedstate.ForcedClosed (required).
	State sharedstate.OverrideState
	// Reason is free text (optional), at most sharedstate.MaxReasonLen bytes.
	Reason string
	// TTL makes the override expire by itself (optional, default: never).
	// It is rounded up to whole seconds, and etcd may raise it to its
	// minimum lease TTL (1.5 election timeouts, rounded up to a second);
	// Expires reports the TTL etcd granted. etcd extends a lease by up to
	// its TTL when its leader changes, so readers should also check
	// Override.ActiveAt with their clock.
	TTL time.Duration
}

// SetOverride creates or replaces the override of dependency, with an audit
// entry in the same transaction. With a TTL the key is attached to a new
// etcd lease, so it disappears by itself (with no audit entry: nobody
// changed it). A replaced override's old lease is revoked.
//
// Invalid input is refused with an error naming every problem; for the
// override's own fields that is a *sharedstate.ValidationError.
func (s *Store) SetOverride(ctx context.Context, dependency string, spec OverrideSpec, w WriteOptions) (OverrideEntry, error) {
	now := s.now()
	o := sharedstate.Override{State: spec.State, Reason: spec.Reason, Actor: w.Actor, Created: now}
	var errs []error
	if err := sharedstate.ValidateDependencyName(dependency); err != nil {
		errs = append(errs, err)
	}
	if spec.TTL < 0 {
		errs = append(errs, fmt.Errorf("TTL %v must not be negative", spec.TTL))
	}
	if w.Actor == "" {
		errs = append(errs, errors.New("WriteOptions.Actor is required"))
	}
	if err := o.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return OverrideEntry{}, fmt.Errorf("store: set override %q: %w", dependency, errors.Join(errs...))
	}

	ctx, cancel := s.ctx(ctx)
	defer cancel()
	lease := clientv3.NoLease
	if spec.TTL > 0 {
		secs := int64((spec.TTL + time.Second - 1) / time.Second)
		g, err := s.cli.Grant(ctx, secs)
		if err != nil {
			return OverrideEntry{}, fmt.Errorf("store: set override %q: grant lease: %w", dependency, err)
		}
		lease = g.ID
		o.Expires = now.Add(time.Duration(g.TTL) * time.Second)
	}
	value, err := json.Marshal(o)
	if err != nil {
		s.revokeQuietly(ctx, lease)
		return OverrideEntry{}, fmt.Errorf("store: set override %q: %w", dependency, err)
	}
	rev, prev, err := s.apply(ctx, change{
		action: ActionOverrideSet, dependency: dependency,
		key: s.OverrideKey(dependency), value: value, lease: lease, opts: w,
	})
	if err != nil {
		s.revokeQuietly(ctx, lease)
		return OverrideEntry{}, err
	}
	if prev != nil {
		s.revokeQuietly(ctx, clientv3.LeaseID(prev.Lease))
	}
	return OverrideEntry{Dependency: dependency, Override: o, ModRevision: rev, Lease: lease}, nil
}

// ClearOverride deletes the override of dependency, with an audit entry in
// the same transaction, and revokes its lease. It returns an error wrapping
// ErrNotFound when there is none, and a *ConflictError when w.Expect does
// not match.
func (s *Store) ClearOverride(ctx context.Context, dependency string, w WriteOptions) error {
	if err := sharedstate.ValidateDependencyName(dependency); err != nil {
		return fmt.Errorf("store: clear override: %w", err)
	}
	_, prev, err := s.apply(ctx, change{
		action: ActionOverrideClear, dependency: dependency,
		key: s.OverrideKey(dependency), opts: w,
	})
	if err != nil {
		return err
	}
	s.revokeQuietly(ctx, clientv3.LeaseID(prev.Lease))
	return nil
}

// revokeQuietly revokes a lease that nothing needs any more. Failure is
// harmless (the lease expires by itself), so it is ignored; the call is
// bounded even when ctx is already done.
func (s *Store) revokeQuietly(ctx context.Context, id clientv3.LeaseID) {
	if id == clientv3.NoLease {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_, _ = s.cli.Revoke(ctx, id)
}

// GetOverride returns the override of dependency, an error wrapping
// ErrNotFound, or an *InvalidValueError when the stored value does not
// parse or validate.
func (s *Store) GetOverride(ctx context.Context, dependency string) (OverrideEntry, error) {
	if err := sharedstate.ValidateDependencyName(dependency); err != nil {
		return OverrideEntry{}, fmt.Errorf("store: get override: %w", err)
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	resp, err := s.cli.Get(ctx, s.OverrideKey(dependency))
	if err != nil {
		return OverrideEntry{}, fmt.Errorf("store: get override %q: %w", dependency, err)
	}
	if len(resp.Kvs) == 0 {
		return OverrideEntry{}, fmt.Errorf("%w: override %q", ErrNotFound, dependency)
	}
	return s.decodeOverride(resp.Kvs[0])
}

// ListOverrides returns every valid override, sorted by dependency, and the
// etcd revision they were read at. Invalid values are skipped and reported
// in the error (*InvalidValueError, several joined) alongside the valid
// entries.
func (s *Store) ListOverrides(ctx context.Context) ([]OverrideEntry, int64, error) {
	kvs, rev, err := s.list(ctx, overridesDir)
	if err != nil {
		return nil, 0, err
	}
	out, err := decodeAll(kvs, s.decodeOverride)
	return out, rev, err
}

// decodeOverride parses and validates an overrides/ key-value.
func (s *Store) decodeOverride(kv *mvccpb.KeyValue) (OverrideEntry, error) {
	dep := strings.TrimPrefix(string(kv.Key), s.prefix+overridesDir)
	if err := sharedstate.ValidateDependencyName(dep); err != nil {
		return OverrideEntry{}, invalidValue(kv, err)
	}
	o, err := sharedstate.ParseOverride(kv.Value)
	if err != nil {
		return OverrideEntry{}, invalidValue(kv, err)
	}
	return OverrideEntry{Dependency: dep, Override: o, ModRevision: kv.ModRevision, Lease: clientv3.LeaseID(kv.Lease)}, nil
}
