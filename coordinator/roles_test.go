package coordinator

import (
	"context"
	"errors"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fusebox-dev/fusebox/coordinator/internal/auth"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

// readPrefixes name the Admin methods that only read; every other method
// writes and must need role admin. A new method is a write unless its
// name says otherwise.
var readPrefixes = []string{"Get", "List", "Validate", "Watch", "Simulate"}

func isRead(method string) bool {
	for _, p := range readPrefixes {
		if strings.HasPrefix(method, p) {
			return true
		}
	}
	return false
}

// adminCall is one valid call of an Admin method; setup (optional, run as
// the coordinator's store) makes the call a real write when it needs
// something to change.
type adminCall struct {
	setup func(ctx context.Context, t *testing.T, c *Coordinator)
	call  func(ctx context.Context, a fuseboxv1.AdminClient) error
}

const roleDep = "roles-dep"

var rolePolicy = []byte(`{"dependency":"` + roleDep + `","breaker":{"minimumRequests":50}}`)

func adminCalls() map[string]adminCall {
	putPolicy := func(ctx context.Context, t *testing.T, c *Coordinator) {
		if _, err := c.Store().PutPolicy(ctx, roleDep, rolePolicy, store.WriteOptions{Actor: "setup"}); err != nil {
			t.Fatal(err)
		}
	}
	setOverride := func(ctx context.Context, t *testing.T, c *Coordinator) {
		if _, err := c.Store().SetOverride(ctx, roleDep, store.OverrideSpec{State: sharedstate.ForcedOpen, TTL: time.Minute},
			store.WriteOptions{Actor: "setup"}); err != nil {
			t.Fatal(err)
		}
	}
	override := &fuseboxv1.SetOverrideRequest{Dependency: roleDep, Reason: "roles test", Ttl: durationpb.New(time.Minute)}
	withHistory := func(ctx context.Context, t *testing.T, c *Coordinator) {
		seedHistory(c, roleDep)
	}
	return map[string]adminCall{
		"SimulatePolicy": {setup: withHistory, call: func(ctx context.Context, a fuseboxv1.AdminClient) error {
			_, err := a.SimulatePolicy(ctx, &fuseboxv1.SimulatePolicyRequest{Dependency: roleDep, PolicyJson: rolePolicy,
				Since: durationpb.New(time.Minute)})
			return err
		}},
		"GetPolicy": {setup: putPolicy, call: func(ctx context.Context, a fuseboxv1.AdminClient) error {
			_, err := a.GetPolicy(ctx, &fuseboxv1.GetPolicyRequest{Dependency: roleDep})
			return err
		}},
		"GetEffectivePolicy": {call: func(ctx context.Context, a fuseboxv1.AdminClient) error {
			_, err := a.GetEffectivePolicy(ctx, &fuseboxv1.GetPolicyRequest{Dependency: roleDep})
			return err
		}},
		"ListPolicies": {call: func(ctx context.Context, a fuseboxv1.AdminClient) error {
			_, err := a.ListPolicies(ctx, &fuseboxv1.ListPoliciesRequest{})
			return err
		}},
		"PutPolicy": {call: func(ctx context.Context, a fuseboxv1.AdminClient) error {
			_, err := a.PutPolicy(ctx, &fuseboxv1.PutPolicyRequest{Dependency: roleDep, PolicyJson: rolePolicy})
			return err
		}},
		"DeletePolicy": {setup: putPolicy, call: func(ctx context.Context, a fuseboxv1.AdminClient) error {
			_, err := a.DeletePolicy(ctx, &fuseboxv1.DeletePolicyRequest{Dependency: roleDep})
			return err
		}},
		"ValidatePolicy": {call: func(ctx context.Context, a fuseboxv1.AdminClient) error {
			_, err := a.ValidatePolicy(ctx, &fuseboxv1.ValidatePolicyRequest{PolicyJson: rolePolicy})
			return err
		}},
		"ForceOpen": {call: func(ctx context.Context, a fuseboxv1.AdminClient) error {
			_, err := a.ForceOpen(ctx, override)
			return err
		}},
		"ForceClosed": {call: func(ctx context.Context, a fuseboxv1.AdminClient) error {
			_, err := a.ForceClosed(ctx, override)
			return err
		}},
		"ClearOverride": {setup: setOverride, call: func(ctx context.Context, a fuseboxv1.AdminClient) error {
			_, err := a.ClearOverride(ctx, &fuseboxv1.ClearOverrideRequest{Dependency: roleDep})
			return err
		}},
		"ListOverrides": {setup: setOverride, call: func(ctx context.Context, a fuseboxv1.AdminClient) error {
			_, err := a.ListOverrides(ctx, &fuseboxv1.ListOverridesRequest{})
			return err
		}},
		"ListAudit": {call: func(ctx context.Context, a fuseboxv1.AdminClient) error {
			_, err := a.ListAudit(ctx, &fuseboxv1.ListAuditRequest{})
			return err
		}},
		"ListMembers": {call: func(ctx context.Context, a fuseboxv1.AdminClient) error {
			_, err := a.ListMembers(ctx, &fuseboxv1.ListMembersRequest{})
			return err
		}},
		"GetFleet": {call: func(ctx context.Context, a fuseboxv1.AdminClient) error {
			_, err := a.GetFleet(ctx, &fuseboxv1.GetFleetRequest{})
			return err
		}},
		"Watch": {call: func(ctx context.Context, a fuseboxv1.AdminClient) error {
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			s, err := a.Watch(ctx, &fuseboxv1.WatchRequest{})
			if err != nil {
				return err
			}
			// The server sends the header once subscribed; a refusal
			// ends the stream with its status instead.
			if md, err := s.Header(); err != nil || md == nil {
				if _, err := s.Recv(); err != nil {
					return err
				}
			}
			return nil
		}},
	}
}

// TestEveryAdminMethodHasARole walks the Admin service descriptor: every
// method has a role in adminRoles, reads need viewer and everything else
// admin, and, called for real, a viewer is refused every write
// (PermissionDenied, nothing written to etcd) while an admin's write
// changes etcd; a viewer may call every read, and no read writes.
func TestEveryAdminMethodHasARole(t *testing.T) {
	calls := adminCalls()
	for _, m := range fuseboxv1.Admin_ServiceDesc.Methods {
		if _, ok := calls[m.MethodName]; !ok {
			t.Errorf("Admin method %s has no call in adminCalls: add one so its role is tested", m.MethodName)
		}
	}
	for _, s := range fuseboxv1.Admin_ServiceDesc.Streams {
		if _, ok := calls[s.StreamName]; !ok {
			t.Errorf("Admin stream %s has no call in adminCalls: add one so its role is tested", s.StreamName)
		}
	}
	names := make([]string, 0, len(calls))
	for name := range calls {
		full := "/" + fuseboxv1.Admin_ServiceDesc.ServiceName + "/" + name
		want := auth.RoleAdmin
		if isRead(name) {
			want = auth.RoleViewer
		}
		got, ok := adminRoles[full]
		switch {
		case !ok:
			t.Errorf("%s has no role in adminRoles (want %s)", full, want)
		case got != want:
			t.Errorf("%s needs role %s in adminRoles, want %s (reads are named %v, everything else writes)", full, got, want, readPrefixes)
		}
		names = append(names, name)
	}
	sort.Strings(names)
	if len(adminRoles) != len(calls) {
		t.Errorf("adminRoles has %d methods, the Admin service %d", len(adminRoles), len(calls))
	}
	if t.Failed() {
		return
	}

	cfg := testConfig(t)
	cfg.TokensFile = writeTokens(t, testTokens)
	c := startCoordinator(t, cfg)
	viewer := adminClient(t, c.GRPCAddr(), viewerToken)
	admin := adminClient(t, c.GRPCAddr(), adminToken)
	cli, err := clientFor(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	revision := func(ctx context.Context) int64 {
		t.Helper()
		r, err := cli.Get(ctx, "fusebox-roles-test-revision")
		if err != nil {
			t.Fatalf("reading etcd's revision: %v", err)
		}
		return r.Header.Revision
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			ctx := ctxFor(t, 20*time.Second)
			call := calls[name]
			if call.setup != nil {
				call.setup(ctx, t, c)
			}
			before := revision(ctx)
			err := call.call(ctx, viewer)
			after := revision(ctx)
			if isRead(name) {
				if code := status.Code(err); code == codes.PermissionDenied || code == codes.Unauthenticated {
					t.Fatalf("%s as a viewer = %v, want allowed", name, err)
				}
			} else {
				if status.Code(err) != codes.PermissionDenied {
					t.Fatalf("%s as a viewer = %v, want PermissionDenied", name, err)
				}
				if after != before {
					t.Fatalf("%s as a viewer was refused but etcd moved from revision %d to %d", name, before, after)
				}
			}

			before = revision(ctx)
			err = call.call(ctx, admin)
			after = revision(ctx)
			if isRead(name) {
				if err != nil {
					t.Fatalf("%s as an admin = %v", name, err)
				}
				if after != before {
					t.Fatalf("%s, a read, moved etcd from revision %d to %d: name it as a write or stop it writing", name, before, after)
				}
			} else {
				if err != nil {
					t.Fatalf("%s as an admin = %v, want allowed", name, err)
				}
				if after == before {
					t.Fatalf("%s as an admin left etcd at revision %d: the test's call does not write", name, before)
				}
			}
		})
	}
}

// TestAdminMethodWithoutARoleIsRefused: a method missing from adminRoles
// is refused to every caller, the admin included.
func TestAdminMethodWithoutARoleIsRefused(t *testing.T) {
	cfg := testConfig(t)
	cfg.TokensFile = writeTokens(t, testTokens)
	c := startCoordinator(t, cfg)
	ctx := metadata.NewIncomingContext(ctxFor(t, 20*time.Second), metadata.Pairs("authorization", "Bearer "+adminToken))
	full := "/" + fuseboxv1.Admin_ServiceDesc.ServiceName + "/NotInTheTable"
	if _, ok := adminRoles[full]; ok {
		t.Fatalf("%s is in adminRoles", full)
	}
	if _, err := c.authenticate(ctx, full); !errors.Is(err, auth.ErrPermissionDenied) || !strings.Contains(err.Error(), "has no role") {
		t.Fatalf("a method without a role, as an admin: %v, want permission denied naming the missing role", err)
	}
	if _, err := c.authenticate(ctx, fuseboxv1.Admin_ForceOpen_FullMethodName); err != nil {
		t.Fatalf("ForceOpen as an admin: %v", err)
	}
}

// TestEveryRouteHasARole walks the HTTP routes: each has a role or is
// explicitly open, no /api/v1 route is open, every route that is not a
// GET needs admin unless it is a POST marked read-only (which must then
// move nothing in etcd), and a viewer is refused each write (403) that an
// admin may make.
func TestEveryRouteHasARole(t *testing.T) {
	cfg := testConfig(t)
	cfg.TokensFile = writeTokens(t, testTokens)
	c := startCoordinator(t, cfg)
	base := "http://" + c.HTTPAddr()
	ctx := ctxFor(t, 30*time.Second)
	for _, rt := range c.routes() {
		method, path, ok := strings.Cut(rt.pattern, " ")
		if !ok {
			t.Errorf("route %q has no method", rt.pattern)
			continue
		}
		switch {
		case rt.open == (rt.role != auth.RoleNone):
			t.Errorf("route %q: role %s, open %v; want exactly one of a role or open", rt.pattern, rt.role, rt.open)
		case rt.open && strings.HasPrefix(path, "/api/"):
			t.Errorf("route %q is open: every /api/ route needs a role", rt.pattern)
		case rt.readOnly && method != http.MethodPost:
			t.Errorf("route %q is read-only but not a POST", rt.pattern)
		case method != http.MethodGet && !rt.readOnly && rt.role != auth.RoleAdmin:
			t.Errorf("route %q writes but needs role %s, want admin", rt.pattern, rt.role)
		}
		if method == http.MethodGet {
			continue
		}
		url := base + strings.ReplaceAll(path, "{dependency...}", roleDep)
		body := map[string]string{
			"POST /api/v1/overrides/{dependency...}": `{"state":"forced-open","ttl":"1m","reason":"roles test"}`,
			"PUT /api/v1/policies/{dependency...}":   `{"policy":` + string(rolePolicy) + `}`,
			"POST /api/v1/simulate":                  `{"dependency":"` + roleDep + `","policy":` + string(rolePolicy) + `,"since":"1m"}`,
		}[rt.pattern]
		if rt.readOnly {
			seedHistory(c, roleDep)
			cli, err := clientFor(c)
			if err != nil {
				t.Fatal(err)
			}
			// The coordinator's own registration may write meanwhile: a
			// read-only route moves etcd on none of three calls.
			moved := 0
			var before, after int64
			for range 3 {
				b, _ := cli.Get(ctx, "fusebox-roles-test-revision")
				code, resp := httpDo(t, method, url, viewerToken, body, nil)
				a, _ := cli.Get(ctx, "fusebox-roles-test-revision")
				if code != http.StatusOK {
					t.Errorf("%s (read-only) as a viewer: status %d: %s", rt.pattern, code, resp)
				}
				if before, after = b.Header.Revision, a.Header.Revision; after != before {
					moved++
				}
			}
			cli.Close()
			if moved == 3 {
				t.Errorf("%s is marked read-only but moved etcd at every call (last from revision %d to %d)", rt.pattern, before, after)
			}
			continue
		}
		if method == http.MethodDelete {
			if _, err := c.Store().SetOverride(ctx, roleDep, store.OverrideSpec{State: sharedstate.ForcedOpen, TTL: time.Minute},
				store.WriteOptions{Actor: "setup"}); err != nil {
				t.Fatal(err)
			}
		}
		code, resp := httpDo(t, method, url, viewerToken, body, nil)
		expect(t, rt.pattern+" as a viewer", code, resp, http.StatusForbidden, "needs role admin")
		code, resp = httpDo(t, method, url, adminToken, body, nil)
		if code == http.StatusForbidden || code == http.StatusUnauthorized || code >= 300 {
			t.Errorf("%s as an admin: status %d: %s", rt.pattern, code, resp)
		}
	}
}
