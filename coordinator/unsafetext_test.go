package coordinator

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

// The actor of every write and an override's reason are printed on
// operators' terminals (fuseboxctl audit, overrides, watch): one holding a
// control character is refused, over gRPC and HTTP alike, with an error
// naming the field, the character and where it is, and nothing is written.
func TestControlCharactersAreRefused(t *testing.T) {
	cfg := testConfig(t)
	cfg.TokensFile = writeTokens(t, testTokens)
	c := startCoordinator(t, cfg)
	a := adminClient(t, c.GRPCAddr(), adminToken)
	ctx := ctxFor(t, time.Minute)
	const evil = "bob\x1b[2J\x1b[31mEVIL\r"

	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"ForceOpen actor", func() error {
			_, err := a.ForceOpen(ctx, &fuseboxv1.SetOverrideRequest{Dependency: "ledger", Reason: "drill", Actor: evil, Ttl: durationpb.New(time.Minute)})
			return err
		}, "actor: control character U+001B at byte 3"},
		{"ForceClosed reason", func() error {
			_, err := a.ForceClosed(ctx, &fuseboxv1.SetOverrideRequest{Dependency: "ledger", Reason: "line one\nline two"})
			return err
		}, "reason: control character U+000A at byte 8"},
		{"ForceOpen reason with a direction override", func() error {
			_, err := a.ForceOpen(ctx, &fuseboxv1.SetOverrideRequest{Dependency: "ledger", Reason: "ok \u202edesrever"})
			return err
		}, "reason: formatting character U+202E at byte 3"},
		{"ClearOverride actor", func() error {
			_, err := a.ClearOverride(ctx, &fuseboxv1.ClearOverrideRequest{Dependency: "ledger", Actor: "\a"})
			return err
		}, "actor: control character U+0007 at byte 0"},
		{"PutPolicy actor", func() error {
			_, err := a.PutPolicy(ctx, &fuseboxv1.PutPolicyRequest{Dependency: "ledger", PolicyJson: []byte(`{"breaker":{"window":"20s"}}`), Actor: "ops\tteam"})
			return err
		}, "actor: control character U+0009 at byte 3"},
		{"DeletePolicy actor", func() error {
			_, err := a.DeletePolicy(ctx, &fuseboxv1.DeletePolicyRequest{Dependency: "ledger", Actor: "x\x00"})
			return err
		}, "actor: control character U+0000 at byte 1"},
	} {
		t.Run("grpc "+tc.name, func(t *testing.T) {
			err := tc.call()
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want InvalidArgument naming %q", err, tc.want)
			}
		})
	}

	base := "http://" + c.HTTPAddr()
	for _, tc := range []struct {
		name, method, path, body, want string
	}{
		{"override actor", "POST", "/api/v1/overrides/ledger", `{"state":"forced-open","reason":"drill","actor":"bob\u001b[2J"}`, `actor: control character U+001B at byte 3`},
		{"override reason", "POST", "/api/v1/overrides/ledger", `{"state":"forced-open","reason":"drill\rEVIL"}`, `reason: control character U+000D at byte 5`},
		{"clear actor", "DELETE", "/api/v1/overrides/ledger?actor=bob%1B", "", `actor: control character U+001B at byte 3`},
		{"policy actor", "PUT", "/api/v1/policies/ledger", `{"policy":{"breaker":{"window":"20s"}},"actor":"\u0085ops"}`, `actor: control character U+0085 at byte 0`},
	} {
		t.Run("http "+tc.name, func(t *testing.T) {
			code, body := httpDo(t, tc.method, base+tc.path, adminToken, tc.body, nil)
			expect(t, tc.name, code, body, http.StatusBadRequest, tc.want, `"code":"InvalidArgument"`)
		})
	}

	overrides, err := a.ListOverrides(ctx, &fuseboxv1.ListOverridesRequest{})
	if err != nil || len(overrides.GetOverrides()) != 0 {
		t.Errorf("overrides after the refusals: %v, %v; want none", overrides, err)
	}
	audit, err := a.ListAudit(ctx, &fuseboxv1.ListAuditRequest{})
	if err != nil || len(audit.GetEntries()) != 0 {
		t.Errorf("audit after the refusals: %v, %v; want no entry", audit, err)
	}
	// Printable text, accents and all, is written as given.
	if _, err := a.ForceOpen(ctx, &fuseboxv1.SetOverrideRequest{Dependency: "ledger", Reason: "Zoë: ☕ drill", Actor: "zoë@laptop"}); err != nil {
		t.Fatalf("a printable actor and reason: %v", err)
	}
}
