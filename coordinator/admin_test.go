package coordinator

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

func TestPolicyCRUDAndConflict(t *testing.T) {
	c := startCoordinator(t, testConfig(t))
	a := adminClient(t, c.GRPCAddr(), "")
	ctx := ctxFor(t, 20*time.Second)

	if _, err := a.GetPolicy(ctx, &fuseboxv1.GetPolicyRequest{Dependency: "shipping-api"}); status.Code(err) != codes.NotFound {
		t.Fatalf("GetPolicy of a missing policy = %v, want NotFound", err)
	}
	zero := int64(0)
	e, err := a.PutPolicy(ctx, &fuseboxv1.PutPolicyRequest{Dependency: "shipping-api", ExpectedRevision: &zero, Actor: "alice",
		PolicyJson: []byte(`{"breaker":{"minimumRequests":50}}`)})
	if err != nil {
		t.Fatalf("PutPolicy: %v", err)
	}
	if e.GetModRevision() == 0 || !strings.Contains(string(e.GetPolicyJson()), `"minimumRequests":50`) {
		t.Fatalf("PutPolicy = %v", e)
	}
	// Creating again with "must not exist" conflicts.
	if _, err := a.PutPolicy(ctx, &fuseboxv1.PutPolicyRequest{Dependency: "shipping-api", ExpectedRevision: &zero,
		PolicyJson: []byte(`{}`)}); status.Code(err) != codes.Aborted {
		t.Fatalf("PutPolicy with a stale revision = %v, want Aborted", err)
	}
	got, err := a.GetPolicy(ctx, &fuseboxv1.GetPolicyRequest{Dependency: "shipping-api"})
	if err != nil || got.GetModRevision() != e.GetModRevision() {
		t.Fatalf("GetPolicy = %v, %v; want revision %d", got, err, e.GetModRevision())
	}
	list, err := a.ListPolicies(ctx, &fuseboxv1.ListPoliciesRequest{})
	if err != nil || len(list.GetPolicies()) != 1 {
		t.Fatalf("ListPolicies = %v, %v", list, err)
	}
	// The audit names the request's actor and the caller's identity.
	audit, err := a.ListAudit(ctx, &fuseboxv1.ListAuditRequest{Dependency: "shipping-api"})
	if err != nil || len(audit.GetEntries()) != 1 {
		t.Fatalf("ListAudit = %v, %v", audit, err)
	}
	if got := audit.GetEntries()[0].GetActor(); got != "alice (loopback)" {
		t.Errorf("audit actor = %q, want %q", got, "alice (loopback)")
	}
	rev := e.GetModRevision()
	del, err := a.DeletePolicy(ctx, &fuseboxv1.DeletePolicyRequest{Dependency: "shipping-api", ExpectedRevision: &rev})
	if err != nil || !del.GetDeleted() {
		t.Fatalf("DeletePolicy = %v, %v", del, err)
	}
	del, err = a.DeletePolicy(ctx, &fuseboxv1.DeletePolicyRequest{Dependency: "shipping-api"})
	if err != nil || del.GetDeleted() {
		t.Fatalf("DeletePolicy of a missing policy = %v, %v; want deleted=false", del, err)
	}
	if _, err := a.GetPolicy(ctx, &fuseboxv1.GetPolicyRequest{Dependency: "bad name!"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("GetPolicy(bad name) = %v, want InvalidArgument", err)
	}
}

func TestConcurrentPutsOneWinsAuditKeepsBoth(t *testing.T) {
	c := startCoordinator(t, testConfig(t))
	a := adminClient(t, c.GRPCAddr(), "")
	ctx := ctxFor(t, 20*time.Second)
	e, err := a.PutPolicy(ctx, &fuseboxv1.PutPolicyRequest{Dependency: "db", PolicyJson: []byte(`{"retry":{"maxAttempts":2}}`), Actor: "setup"})
	if err != nil {
		t.Fatal(err)
	}
	rev := e.GetModRevision()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = a.PutPolicy(ctx, &fuseboxv1.PutPolicyRequest{Dependency: "db", ExpectedRevision: &rev,
				Actor:      []string{"editor-a", "editor-b"}[i],
				PolicyJson: []byte([]string{`{"retry":{"maxAttempts":4}}`, `{"retry":{"maxAttempts":5}}`}[i])})
		}()
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch status.Code(err) {
		case codes.OK:
			if winner >= 0 {
				t.Fatalf("both writes with expected revision %d succeeded", rev)
			}
			winner = i
		case codes.Aborted:
		default:
			t.Fatalf("write %d: %v, want OK or Aborted", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("neither write succeeded")
	}
	audit, err := a.ListAudit(ctx, &fuseboxv1.ListAuditRequest{Dependency: "db"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(audit.GetEntries()); n != 2 {
		t.Fatalf("audit has %d entries, want 2 (setup + the winner): %v", n, audit)
	}
	newest := audit.GetEntries()[0]
	wantActor := []string{"editor-a", "editor-b"}[winner] + " (loopback)"
	if newest.GetActor() != wantActor || !strings.Contains(string(newest.GetBefore()), `"maxAttempts":2`) {
		t.Fatalf("newest audit entry = %v, want actor %q and before = the setup policy", newest, wantActor)
	}
}

func TestInvalidPolicyListsEveryViolation(t *testing.T) {
	c := startCoordinator(t, testConfig(t))
	a := adminClient(t, c.GRPCAddr(), "")
	ctx := ctxFor(t, 20*time.Second)
	bad := `{"dependency":"db","breaker":{"failureRateThreshold":1.5,"minimumRequests":0},"retry":{"maxAttempts":0}}`
	_, err := a.PutPolicy(ctx, &fuseboxv1.PutPolicyRequest{Dependency: "db", PolicyJson: []byte(bad)})
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument {
		t.Fatalf("PutPolicy(invalid) = %v, want InvalidArgument", err)
	}
	var fields []string
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, fv := range br.GetFieldViolations() {
				fields = append(fields, fv.GetField())
			}
		}
	}
	want := []string{"breaker.failureRateThreshold", "breaker.minimumRequests", "retry.maxAttempts"}
	if strings.Join(fields, ",") != strings.Join(want, ",") {
		t.Fatalf("field violations = %v, want %v", fields, want)
	}
	for _, f := range want {
		if !strings.Contains(st.Message(), f) {
			t.Errorf("message %q does not name %s", st.Message(), f)
		}
	}
	if _, err := a.GetPolicy(ctx, &fuseboxv1.GetPolicyRequest{Dependency: "db"}); status.Code(err) != codes.NotFound {
		t.Fatalf("an invalid policy reached etcd: GetPolicy = %v", err)
	}

	// ValidatePolicy reports the same without writing, and lints valid ones.
	vr, err := a.ValidatePolicy(ctx, &fuseboxv1.ValidatePolicyRequest{PolicyJson: []byte(bad)})
	if err != nil || len(vr.GetViolations()) != 3 {
		t.Fatalf("ValidatePolicy(invalid) = %v, %v; want 3 violations", vr, err)
	}
	vr, err = a.ValidatePolicy(ctx, &fuseboxv1.ValidatePolicyRequest{
		PolicyJson: []byte(`{"dependency":"db","retry":{"maxAttempts":5,"perAttemptTimeout":"1s"}}`),
		Deadline:   durationpb.New(2 * time.Second)})
	if err != nil || len(vr.GetViolations()) != 0 || len(vr.GetWarnings()) == 0 {
		t.Fatalf("ValidatePolicy(valid, too slow for the deadline) = %v, %v; want a warning", vr, err)
	}
}

func TestAuthTokensAndRoles(t *testing.T) {
	cfg := testConfig(t)
	cfg.TokensFile = writeTokens(t, testTokens)
	c := startCoordinator(t, cfg)
	ctx := ctxFor(t, 20*time.Second)
	req := &fuseboxv1.SetOverrideRequest{Dependency: "payments", Reason: "drill", Actor: "bob"}

	none := adminClient(t, c.GRPCAddr(), "")
	if _, err := none.ForceOpen(ctx, req); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("ForceOpen without a token = %v, want Unauthenticated", err)
	}
	if _, err := none.GetFleet(ctx, &fuseboxv1.GetFleetRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("GetFleet without a token = %v, want Unauthenticated", err)
	}
	wrong := adminClient(t, c.GRPCAddr(), "not-a-known-token-at-all")
	if _, err := wrong.ListPolicies(ctx, &fuseboxv1.ListPoliciesRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("ListPolicies with an unknown token = %v, want Unauthenticated", err)
	}
	viewer := adminClient(t, c.GRPCAddr(), viewerToken)
	if _, err := viewer.ForceOpen(ctx, req); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("ForceOpen as viewer = %v, want PermissionDenied", err)
	}
	if _, err := viewer.GetFleet(ctx, &fuseboxv1.GetFleetRequest{}); err != nil {
		t.Fatalf("GetFleet as viewer = %v", err)
	}
	admin := adminClient(t, c.GRPCAddr(), adminToken)
	o, err := admin.ForceOpen(ctx, req)
	if err != nil {
		t.Fatalf("ForceOpen as admin = %v", err)
	}
	if o.GetActor() != "bob (ops-admin)" || o.GetState() != fuseboxv1.OverrideState_OVERRIDE_STATE_FORCED_OPEN {
		t.Fatalf("ForceOpen = %v, want actor %q", o, "bob (ops-admin)")
	}
	list, err := viewer.ListOverrides(ctx, &fuseboxv1.ListOverridesRequest{})
	if err != nil || len(list.GetOverrides()) != 1 {
		t.Fatalf("ListOverrides = %v, %v", list, err)
	}
	// Only the admin's write reached the audit.
	audit, err := viewer.ListAudit(ctx, &fuseboxv1.ListAuditRequest{})
	if err != nil || len(audit.GetEntries()) != 1 {
		t.Fatalf("ListAudit = %v, %v; want the admin's write only", audit, err)
	}
}

func TestOverrideTTLExpiresAndAuditNamesTheActor(t *testing.T) {
	cfg := testConfig(t)
	cfg.TokensFile = writeTokens(t, testTokens)
	c := startCoordinator(t, cfg)
	admin := adminClient(t, c.GRPCAddr(), adminToken)
	ctx := ctxFor(t, 30*time.Second)

	o, err := admin.ForceOpen(ctx, &fuseboxv1.SetOverrideRequest{Dependency: "search", Ttl: durationpb.New(2 * time.Second),
		Reason: "reindex", Actor: "carol"})
	if err != nil {
		t.Fatal(err)
	}
	if o.GetExpires() == nil || o.GetExpires().AsTime().Sub(o.GetCreated().AsTime()) < 2*time.Second {
		t.Fatalf("override %v: want an expiry at least 2s after creation", o)
	}
	sstest.Eventually(t, 10*time.Second, "the fleet view to show the override", func() bool {
		snap, err := admin.GetFleet(ctx, &fuseboxv1.GetFleetRequest{Dependency: "search"})
		return err == nil && snap.GetDependencies()[0].GetOverride() == fuseboxv1.OverrideState_OVERRIDE_STATE_FORCED_OPEN
	})
	sstest.Eventually(t, 15*time.Second, "the override to expire", func() bool {
		list, err := admin.ListOverrides(ctx, &fuseboxv1.ListOverridesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		raw, err := c.Store().Client().Get(ctx, c.Store().OverrideKey("search"))
		return len(list.GetOverrides()) == 0 && err == nil && len(raw.Kvs) == 0
	})
	audit, err := admin.ListAudit(ctx, &fuseboxv1.ListAuditRequest{Dependency: "search"})
	if err != nil || len(audit.GetEntries()) != 1 {
		t.Fatalf("ListAudit = %v, %v", audit, err)
	}
	e := audit.GetEntries()[0]
	var after sharedstate.Override
	if err := json.Unmarshal(e.GetAfter(), &after); err != nil {
		t.Fatal(err)
	}
	if e.GetAction() != store.ActionOverrideSet || e.GetActor() != "carol (ops-admin)" || after.Reason != "reindex" || after.State != sharedstate.ForcedOpen {
		t.Fatalf("audit entry = %v (after %+v), want override.set by %q", e, after, "carol (ops-admin)")
	}
}

func TestTwoCoordinatorsServeTheSameAnswers(t *testing.T) {
	a := startCoordinator(t, testConfig(t))
	cfgB := testConfig(t)
	cfgB.Etcd = a.EtcdEndpoints()
	b := startCoordinator(t, cfgB)
	ca, cb := adminClient(t, a.GRPCAddr(), ""), adminClient(t, b.GRPCAddr(), "")
	ctx := ctxFor(t, 20*time.Second)

	if _, err := ca.PutPolicy(ctx, &fuseboxv1.PutPolicyRequest{Dependency: "inventory",
		PolicyJson: []byte(`{"breaker":{"mode":"shadow"}}`), Actor: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cb.ForceClosed(ctx, &fuseboxv1.SetOverrideRequest{Dependency: "inventory", Actor: "b"}); err != nil {
		t.Fatal(err)
	}
	pa, err := ca.GetPolicy(ctx, &fuseboxv1.GetPolicyRequest{Dependency: "inventory"})
	if err != nil {
		t.Fatal(err)
	}
	pb, err := cb.GetPolicy(ctx, &fuseboxv1.GetPolicyRequest{Dependency: "inventory"})
	if err != nil || pb.GetModRevision() != pa.GetModRevision() || string(pb.GetPolicyJson()) != string(pa.GetPolicyJson()) {
		t.Fatalf("GetPolicy through b = %v, %v; through a = %v", pb, err, pa)
	}
	auditA, _ := ca.ListAudit(ctx, &fuseboxv1.ListAuditRequest{})
	auditB, _ := cb.ListAudit(ctx, &fuseboxv1.ListAuditRequest{})
	if len(auditA.GetEntries()) != 2 || len(auditB.GetEntries()) != 2 {
		t.Fatalf("audit through a = %v, through b = %v; want 2 entries each", auditA, auditB)
	}
	// Both fleet views follow etcd: shadow mode and the override.
	for name, cl := range map[string]fuseboxv1.AdminClient{"a": ca, "b": cb} {
		sstest.Eventually(t, 10*time.Second, "coordinator "+name+" to show the policy and override", func() bool {
			snap, err := cl.GetFleet(ctx, &fuseboxv1.GetFleetRequest{Dependency: "inventory"})
			if err != nil {
				return false
			}
			d := snap.GetDependencies()[0]
			return d.GetMode() == fuseboxv1.Mode_MODE_SHADOW && d.GetOverride() == fuseboxv1.OverrideState_OVERRIDE_STATE_FORCED_CLOSED
		})
	}
}

func TestPolicyWrittenAroundTheCoordinatorIsFollowed(t *testing.T) {
	c := startCoordinator(t, testConfig(t))
	a := adminClient(t, c.GRPCAddr(), "")
	ctx := ctxFor(t, 20*time.Second)

	// Another client writes straight into etcd, with its own store.
	cli, other := otherWriter(t, c)
	if _, err := other.PutPolicy(ctx, "ledger", []byte(`{"breaker":{"mode":"shadow","window":"20s"}}`),
		store.WriteOptions{Actor: "terraform"}); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 10*time.Second, "the fleet view to follow the policy written around it", func() bool {
		snap, err := a.GetFleet(ctx, &fuseboxv1.GetFleetRequest{Dependency: "ledger"})
		return err == nil && snap.GetDependencies()[0].GetMode() == fuseboxv1.Mode_MODE_SHADOW
	})
	if got := c.cache.Policy("ledger").Breaker.Window.Std(); got != 20*time.Second {
		t.Fatalf("cached window = %v, want 20s", got)
	}
	// A raw, invalid value is ignored: the last good policy stays.
	if _, err := cli.Put(ctx, other.PolicyKey("ledger"), `{"breaker":{"window":"forever"}}`); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, other.PolicyKey("canary"), `{"breaker":{"mode":"shadow"}}`); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 10*time.Second, "the later valid write to arrive", func() bool {
		return c.cache.Policy("canary").Breaker.Mode == sharedstate.ModeShadow
	})
	if got := c.cache.Policy("ledger").Breaker.Window.Std(); got != 20*time.Second {
		t.Fatalf("after an invalid write the cached window = %v, want the last good 20s", got)
	}
	if n := metricValue(t, c.reg, "fusebox_coordinator_etcd_invalid_values_total", map[string]string{"kind": "policy"}); n < 1 {
		t.Fatalf("fusebox_coordinator_etcd_invalid_values_total{kind=policy} = %v, want ≥ 1", n)
	}
}

// TestEffectivePolicyAndAuditChanges: GetEffectivePolicy answers for a
// dependency with or without a policy of its own, naming the source of
// every field; ListAudit carries each write's field changes; ValidatePolicy
// with a name checks the document as a write under that name would.
func TestEffectivePolicyAndAuditChanges(t *testing.T) {
	c := startCoordinator(t, testConfig(t))
	a := adminClient(t, c.GRPCAddr(), "")
	ctx := ctxFor(t, 20*time.Second)
	field := func(ep *fuseboxv1.EffectivePolicy, path string) *fuseboxv1.PolicyField {
		t.Helper()
		for _, f := range ep.GetFields() {
			if f.GetField() == path {
				return f
			}
		}
		t.Fatalf("no field %s in %v", path, ep)
		return nil
	}
	ep, err := a.GetEffectivePolicy(ctx, &fuseboxv1.GetPolicyRequest{Dependency: "shipping"})
	if err != nil || ep.GetOwn() != nil || ep.GetFleetDefault() != nil ||
		field(ep, "breaker.minimumRequests").GetSource() != fuseboxv1.PolicySource_POLICY_SOURCE_BUILT_IN {
		t.Fatalf("GetEffectivePolicy with nothing stored = %v, %v; want the built-in default", ep, err)
	}
	def := sharedstate.DefaultPolicy()
	def.Breaker.MinimumRequests = 30
	if _, err := c.Store().PutPolicyOf(ctx, sharedstate.DefaultPolicyName, def, store.WriteOptions{Actor: "setup"}); err != nil {
		t.Fatal(err)
	}
	own, err := a.PutPolicy(ctx, &fuseboxv1.PutPolicyRequest{Dependency: "shipping", PolicyJson: []byte(`{"breaker":{"minimumRequests":50}}`)})
	if err != nil {
		t.Fatal(err)
	}
	ep, err = a.GetEffectivePolicy(ctx, &fuseboxv1.GetPolicyRequest{Dependency: "shipping"})
	if err != nil || ep.GetOwn().GetModRevision() != own.GetModRevision() || ep.GetFleetDefault() == nil {
		t.Fatalf("GetEffectivePolicy = %v, %v", ep, err)
	}
	if f := field(ep, "breaker.minimumRequests"); f.GetValue() != "50" || f.GetSource() != fuseboxv1.PolicySource_POLICY_SOURCE_OWN || f.GetInherited() != "30" {
		t.Errorf("breaker.minimumRequests = %v, want 50 from its own policy over the fleet default's 30", f)
	}
	if f := field(ep, "breaker.window"); f.GetSource() != fuseboxv1.PolicySource_POLICY_SOURCE_FLEET_DEFAULT {
		t.Errorf("breaker.window = %v, want from the fleet default", f)
	}
	var p sharedstate.Policy
	if err := json.Unmarshal(ep.GetPolicyJson(), &p); err != nil || p.Dependency != "shipping" || p.Breaker.MinimumRequests != 50 {
		t.Errorf("policy_json = %s (%v)", ep.GetPolicyJson(), err)
	}
	ep, err = a.GetEffectivePolicy(ctx, &fuseboxv1.GetPolicyRequest{Dependency: "billing"})
	if err != nil || ep.GetOwn() != nil || field(ep, "breaker.minimumRequests").GetValue() != "30" {
		t.Fatalf("GetEffectivePolicy of a dependency on the fleet default = %v, %v", ep, err)
	}
	if _, err := a.GetEffectivePolicy(ctx, &fuseboxv1.GetPolicyRequest{Dependency: "bad name!"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("GetEffectivePolicy(bad name) = %v, want InvalidArgument", err)
	}

	if _, err := a.PutPolicy(ctx, &fuseboxv1.PutPolicyRequest{Dependency: "shipping",
		PolicyJson: []byte(`{"breaker":{"minimumRequests":60},"retry":{"maxAttempts":2}}`)}); err != nil {
		t.Fatal(err)
	}
	audit, err := a.ListAudit(ctx, &fuseboxv1.ListAuditRequest{Dependency: "shipping"})
	if err != nil || len(audit.GetEntries()) != 2 {
		t.Fatalf("ListAudit = %v, %v", audit, err)
	}
	var got []string
	for _, ch := range audit.GetEntries()[0].GetChanges() {
		got = append(got, ch.GetField()+": "+ch.GetFrom()+" -> "+ch.GetTo())
	}
	if want := "breaker.minimumRequests: 50 -> 60, retry.maxAttempts:  -> 2"; strings.Join(got, ", ") != want {
		t.Errorf("the update's changes = %q, want %q", strings.Join(got, ", "), want)
	}

	vr, err := a.ValidatePolicy(ctx, &fuseboxv1.ValidatePolicyRequest{Dependency: "billing", PolicyJson: []byte(`{"dependency":"shipping"}`)})
	if err != nil || len(vr.GetViolations()) != 1 || vr.GetViolations()[0].GetField() != "dependency" {
		t.Fatalf("ValidatePolicy under another name = %v, %v; want the dependency field refused", vr, err)
	}
}
