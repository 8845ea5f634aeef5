package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/fusebox-dev/fusebox/coordinator/internal/fleet"
	"github.com/fusebox-dev/fusebox/protocol/convert"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

// Limits of Admin requests.
const (
	maxActorLen    = 100  // the request's actor; the token identity is added to it
	maxAuditLimit  = 1000 // ListAudit's limit
	maxOverrideTTL = 7 * 24 * time.Hour
)

// adminServer implements the Admin gRPC service. Handlers return plain
// errors; the interceptor maps them with toStatus.
type adminServer struct {
	fuseboxv1.UnimplementedAdminServer
	c *Coordinator
}

// writeOptions builds the audit actor of a write: the request's actor
// field plus the identity of the credential, e.g.
// "alice@laptop (admin:1f2e3d4c)", or the identity alone. An actor holding
// a control character (sharedstate.ValidateText) is refused: it would be
// printed on operators' terminals by fuseboxctl audit.
func writeOptions(ctx context.Context, actor string, expected *int64) (store.WriteOptions, error) {
	if len(actor) > maxActorLen {
		return store.WriteOptions{}, fmt.Errorf("%w: actor is %d bytes, at most %d", ErrInvalidRequest, len(actor), maxActorLen)
	}
	if err := sharedstate.ValidateText("actor", actor); err != nil {
		return store.WriteOptions{}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	id := identityFrom(ctx).Name
	if id == "" {
		id = "unknown"
	}
	w := store.WriteOptions{Actor: id}
	if actor != "" {
		w.Actor = actor + " (" + id + ")"
	}
	if expected != nil {
		if *expected < 0 {
			return store.WriteOptions{}, fmt.Errorf("%w: expected revision %d is negative", ErrInvalidRequest, *expected)
		}
		w.Expect = store.ExpectModRevision(*expected)
	}
	return w, nil
}

// skipInvalid lets a listing through with the valid entries when the
// store skipped invalid ones (bad data written around the coordinator, not
// the caller's mistake), logging them as what ("" logs nothing).
func (a *adminServer) skipInvalid(err error, what string) error {
	var invalid *store.InvalidValueError
	if !errors.As(err, &invalid) {
		return err
	}
	if what != "" {
		a.c.log.Warn("invalid "+what+" in etcd skipped", "err", err)
	}
	return nil
}

func policyEntry(e store.PolicyEntry) *fuseboxv1.PolicyEntry {
	return &fuseboxv1.PolicyEntry{Dependency: e.Name, PolicyJson: e.Value, ModRevision: e.ModRevision}
}

func (a *adminServer) GetPolicy(ctx context.Context, req *fuseboxv1.GetPolicyRequest) (*fuseboxv1.PolicyEntry, error) {
	e, err := a.c.store.GetPolicy(ctx, req.GetDependency())
	if err != nil {
		return nil, err
	}
	return policyEntry(e), nil
}

// GetEffectivePolicy explains the policy dependency runs on: its own over
// the stored fleet default over the built-in default (see
// sharedstate.ExplainPolicy), read from etcd.
func (a *adminServer) GetEffectivePolicy(ctx context.Context, req *fuseboxv1.GetPolicyRequest) (*fuseboxv1.EffectivePolicy, error) {
	dep := req.GetDependency()
	if dep != sharedstate.DefaultPolicyName {
		if err := sharedstate.ValidateDependencyName(dep); err != nil {
			return nil, err
		}
	}
	resp := &fuseboxv1.EffectivePolicy{Dependency: dep}
	var defDoc, ownDoc []byte
	read := func(name string) (*fuseboxv1.PolicyEntry, []byte, error) {
		e, err := a.c.store.GetPolicy(ctx, name)
		if errors.Is(err, store.ErrNotFound) {
			return nil, nil, nil
		}
		if err != nil {
			return nil, nil, err
		}
		return policyEntry(e), e.Value, nil
	}
	var err error
	if resp.FleetDefault, defDoc, err = read(sharedstate.DefaultPolicyName); err != nil {
		return nil, err
	}
	if dep != sharedstate.DefaultPolicyName {
		if resp.Own, ownDoc, err = read(dep); err != nil {
			return nil, err
		}
	}
	p, fields, err := sharedstate.ExplainPolicy(dep, defDoc, ownDoc)
	if err != nil { // bad data in etcd (written around the coordinator), not the caller's mistake
		key, rev := a.c.store.PolicyKey(sharedstate.DefaultPolicyName), resp.FleetDefault.GetModRevision()
		if resp.Own != nil {
			key, rev = a.c.store.PolicyKey(dep), resp.Own.GetModRevision()
		}
		return nil, &store.InvalidValueError{Key: key, ModRevision: rev, Err: err}
	}
	if resp.PolicyJson, err = json.Marshal(p); err != nil {
		return nil, err
	}
	for _, f := range fields {
		resp.Fields = append(resp.Fields, &fuseboxv1.PolicyField{Field: f.Field, Value: f.Value, Source: policySourceProto(f.Source),
			Inherited: f.Inherited})
	}
	return resp, nil
}

func policySourceProto(s sharedstate.PolicySource) fuseboxv1.PolicySource {
	switch s {
	case sharedstate.SourceOwn:
		return fuseboxv1.PolicySource_POLICY_SOURCE_OWN
	case sharedstate.SourceFleetDefault:
		return fuseboxv1.PolicySource_POLICY_SOURCE_FLEET_DEFAULT
	case sharedstate.SourceBuiltIn:
		return fuseboxv1.PolicySource_POLICY_SOURCE_BUILT_IN
	}
	return fuseboxv1.PolicySource_POLICY_SOURCE_UNSPECIFIED
}

func (a *adminServer) ListPolicies(ctx context.Context, _ *fuseboxv1.ListPoliciesRequest) (*fuseboxv1.ListPoliciesResponse, error) {
	entries, _, err := a.c.store.ListPolicies(ctx)
	if err := a.skipInvalid(err, "policies"); err != nil {
		return nil, err
	}
	resp := &fuseboxv1.ListPoliciesResponse{}
	for _, e := range entries {
		resp.Policies = append(resp.Policies, policyEntry(e))
	}
	return resp, nil
}

func (a *adminServer) PutPolicy(ctx context.Context, req *fuseboxv1.PutPolicyRequest) (*fuseboxv1.PolicyEntry, error) {
	w, err := writeOptions(ctx, req.GetActor(), req.ExpectedRevision)
	if err != nil {
		return nil, err
	}
	e, err := a.c.store.PutPolicy(ctx, req.GetDependency(), req.GetPolicyJson(), w)
	if err != nil {
		return nil, err
	}
	a.c.log.Info("policy written", "dependency", e.Name, "revision", e.ModRevision, "actor", w.Actor)
	return policyEntry(e), nil
}

func (a *adminServer) DeletePolicy(ctx context.Context, req *fuseboxv1.DeletePolicyRequest) (*fuseboxv1.DeletePolicyResponse, error) {
	w, err := writeOptions(ctx, req.GetActor(), req.ExpectedRevision)
	if err != nil {
		return nil, err
	}
	if _, err := a.c.store.DeletePolicy(ctx, req.GetDependency(), w); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return &fuseboxv1.DeletePolicyResponse{Deleted: false}, nil
		}
		return nil, err
	}
	a.c.log.Info("policy deleted", "dependency", req.GetDependency(), "actor", w.Actor)
	return &fuseboxv1.DeletePolicyResponse{Deleted: true}, nil
}

func (a *adminServer) ValidatePolicy(_ context.Context, req *fuseboxv1.ValidatePolicyRequest) (*fuseboxv1.ValidatePolicyResponse, error) {
	var deadline time.Duration
	if d := req.GetDeadline(); d != nil {
		if err := d.CheckValid(); err != nil {
			return nil, fmt.Errorf("%w: deadline: %v", ErrInvalidRequest, err)
		}
		deadline = d.AsDuration()
	}
	vs, ws := sharedstate.CheckPolicyDocumentAs(req.GetDependency(), req.GetPolicyJson(), a.c.cache.defaultPolicy(), deadline)
	resp := &fuseboxv1.ValidatePolicyResponse{Warnings: ws}
	for _, v := range vs {
		resp.Violations = append(resp.Violations, &fuseboxv1.Violation{Field: v.Field, Value: v.Value, Message: v.Message})
	}
	return resp, nil
}

func (a *adminServer) ForceOpen(ctx context.Context, req *fuseboxv1.SetOverrideRequest) (*fuseboxv1.OverrideEntry, error) {
	return a.setOverride(ctx, req, sharedstate.ForcedOpen)
}

func (a *adminServer) ForceClosed(ctx context.Context, req *fuseboxv1.SetOverrideRequest) (*fuseboxv1.OverrideEntry, error) {
	return a.setOverride(ctx, req, sharedstate.ForcedClosed)
}

func (a *adminServer) setOverride(ctx context.Context, req *fuseboxv1.SetOverrideRequest, state sharedstate.OverrideState) (*fuseboxv1.OverrideEntry, error) {
	dep := req.GetDependency()
	if err := sharedstate.ValidateDependencyName(dep); err != nil {
		return nil, err
	}
	var ttl time.Duration
	if d := req.GetTtl(); d != nil {
		if err := d.CheckValid(); err != nil {
			return nil, fmt.Errorf("%w: ttl: %v", ErrInvalidRequest, err)
		}
		ttl = d.AsDuration()
	}
	if ttl < 0 || ttl > maxOverrideTTL {
		return nil, fmt.Errorf("%w: ttl %v: must be between 0 (no expiry) and %v", ErrInvalidRequest, ttl, maxOverrideTTL)
	}
	if len(req.GetReason()) > sharedstate.MaxReasonLen {
		return nil, fmt.Errorf("%w: reason is %d bytes, at most %d", ErrInvalidRequest, len(req.GetReason()), sharedstate.MaxReasonLen)
	}
	if err := sharedstate.ValidateText("reason", req.GetReason()); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	w, err := writeOptions(ctx, req.GetActor(), nil)
	if err != nil {
		return nil, err
	}
	e, err := a.c.store.SetOverride(ctx, dep, store.OverrideSpec{State: state, Reason: req.GetReason(), TTL: ttl}, w)
	if err != nil {
		return nil, err
	}
	a.c.log.Info("override set", "dependency", dep, "state", state.String(), "ttl", ttl, "reason", req.GetReason(), "actor", w.Actor)
	return overrideEntry(e), nil
}

func overrideEntry(e store.OverrideEntry) *fuseboxv1.OverrideEntry {
	o := &fuseboxv1.OverrideEntry{
		Dependency: e.Dependency, State: convert.OverrideState(e.State), Reason: e.Reason, Actor: e.Actor,
		Created: timestamppb.New(e.Created), ModRevision: e.ModRevision,
	}
	if !e.Expires.IsZero() {
		o.Expires = timestamppb.New(e.Expires)
	}
	return o
}

func (a *adminServer) ClearOverride(ctx context.Context, req *fuseboxv1.ClearOverrideRequest) (*fuseboxv1.ClearOverrideResponse, error) {
	w, err := writeOptions(ctx, req.GetActor(), nil)
	if err != nil {
		return nil, err
	}
	if err := a.c.store.ClearOverride(ctx, req.GetDependency(), w); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return &fuseboxv1.ClearOverrideResponse{Cleared: false}, nil
		}
		return nil, err
	}
	a.c.log.Info("override cleared", "dependency", req.GetDependency(), "actor", w.Actor)
	return &fuseboxv1.ClearOverrideResponse{Cleared: true}, nil
}

func (a *adminServer) ListOverrides(ctx context.Context, _ *fuseboxv1.ListOverridesRequest) (*fuseboxv1.ListOverridesResponse, error) {
	entries, _, err := a.c.store.ListOverrides(ctx)
	if err := a.skipInvalid(err, "overrides"); err != nil {
		return nil, err
	}
	now := a.c.clock.Now()
	resp := &fuseboxv1.ListOverridesResponse{}
	for _, e := range entries {
		if e.ActiveAt(now) { // an expired one whose lease etcd has not reaped yet is gone for agents
			resp.Overrides = append(resp.Overrides, overrideEntry(e))
		}
	}
	return resp, nil
}

func (a *adminServer) ListAudit(ctx context.Context, req *fuseboxv1.ListAuditRequest) (*fuseboxv1.ListAuditResponse, error) {
	if dep := req.GetDependency(); dep != "" && dep != sharedstate.DefaultPolicyName {
		if err := sharedstate.ValidateDependencyName(dep); err != nil {
			return nil, err
		}
	}
	limit := min(int(req.GetLimit()), maxAuditLimit)
	entries, err := a.c.store.ListAudit(ctx, store.AuditQuery{Dependency: req.GetDependency(), Limit: limit})
	if err := a.skipInvalid(err, "audit entries"); err != nil {
		return nil, err
	}
	resp := &fuseboxv1.ListAuditResponse{}
	for _, e := range entries {
		ae := &fuseboxv1.AuditEntry{
			Revision: e.Revision, Actor: e.Actor, Action: e.Action, Dependency: e.Dependency,
			Before: nullToNil(e.Before), After: nullToNil(e.After), At: timestamppb.New(e.At),
		}
		for _, c := range sharedstate.DiffDocuments(e.Before, e.After) {
			ae.Changes = append(ae.Changes, &fuseboxv1.FieldChange{Field: c.Field, From: c.From, To: c.To})
		}
		resp.Entries = append(resp.Entries, ae)
	}
	return resp, nil
}

func nullToNil(b []byte) []byte {
	if string(b) == "null" {
		return nil
	}
	return b
}

// ListMembers merges the gossip view (status alive, suspect, dead or left)
// with the registrations in etcd: a registered node the observer does not
// see in the gossip is listed with status "registered". How a node follows
// etcd (Member.etcd) comes from its registration.
func (a *adminServer) ListMembers(ctx context.Context, _ *fuseboxv1.ListMembersRequest) (*fuseboxv1.ListMembersResponse, error) {
	members := a.c.view.Members()
	regs, _, err := a.c.store.ListMembers(ctx)
	if err := a.skipInvalid(err, ""); err != nil {
		return nil, err
	}
	seen := make(map[string]*fuseboxv1.Member, len(members))
	for _, m := range members {
		seen[m.Node] = m
	}
	for _, r := range regs {
		if m, ok := seen[r.Node]; ok {
			m.Etcd = etcdSyncProto(r.Etcd)
			if m.ApiAddr == "" {
				m.ApiAddr = r.APIAddr
			}
			if m.Zone == "" {
				m.Zone = r.Zone
			}
			m.Signs = r.PublicKey != "" // the registration, not the gossip, says whose key counts
			continue
		}
		members = append(members, &fuseboxv1.Member{Node: r.Node, Role: r.Role, Zone: r.Zone, Version: r.Version,
			GossipAddr: r.GossipAddr, ApiAddr: r.APIAddr, Status: "registered", Etcd: etcdSyncProto(r.Etcd),
			WireVersion: uint32(r.Wire), Signs: r.PublicKey != ""})
	}
	fleet.SortMembers(members)
	return &fuseboxv1.ListMembersResponse{Members: members}, nil
}

func (a *adminServer) GetFleet(_ context.Context, req *fuseboxv1.GetFleetRequest) (*fuseboxv1.FleetSnapshot, error) {
	return a.c.fleetSnapshot(req.GetDependency())
}

// SimulatePolicy replays the history of a dependency under its current
// policy and a proposed one (see whatif.go).
func (a *adminServer) SimulatePolicy(ctx context.Context, req *fuseboxv1.SimulatePolicyRequest) (*fuseboxv1.SimulatePolicyResponse, error) {
	return a.c.simulate(ctx, req)
}

// fleetSnapshot is GetFleet's answer, shared with /api/v1/fleet.
func (c *Coordinator) fleetSnapshot(dep string) (*fuseboxv1.FleetSnapshot, error) {
	if dep != "" {
		if err := sharedstate.ValidateDependencyName(dep); err != nil {
			return nil, err
		}
	}
	snap := c.view.Snapshot(c.clock.Now(), c.cache, dep)
	if dep != "" && len(snap.Dependencies) == 0 {
		return nil, fmt.Errorf("%w: dependency %q: no policy, override or traffic", ErrNotFound, dep)
	}
	snap.Etcd = etcdSyncProto(c.cache.etcdStatus())
	return snap, nil
}

var _ fleet.Source = (*cache)(nil)
