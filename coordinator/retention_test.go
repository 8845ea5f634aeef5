package coordinator

import (
	"fmt"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

// TestAuditRetentionThroughTheAdminAPI: with --audit-max-entries 4 two
// coordinators side by side keep the trail at 4 entries, the newest an
// audit.trim summary by one of them, and a dependency's audit still lists
// its kept entries.
func TestAuditRetentionThroughTheAdminAPI(t *testing.T) {
	cfg := testConfig(t)
	cfg.AuditMaxEntries = 4
	a := startCoordinator(t, cfg, WithAuditTrimInterval(50*time.Millisecond))
	cfgB := testConfig(t)
	cfgB.Etcd = a.EtcdEndpoints()
	cfgB.EmbeddedEtcdURL = ""
	cfgB.AuditMaxEntries = 4
	startCoordinator(t, cfgB, WithAuditTrimInterval(50*time.Millisecond))

	admin := adminClient(t, a.GRPCAddr(), "")
	ctx := ctxFor(t, 60*time.Second)
	for i := range 8 {
		body := fmt.Sprintf(`{"retry": {"maxAttempts": %d}}`, i%5+1)
		if _, err := admin.PutPolicy(ctx, &fuseboxv1.PutPolicyRequest{Dependency: "shipping", PolicyJson: []byte(body), Actor: "alice"}); err != nil {
			t.Fatal(err)
		}
	}
	var last *fuseboxv1.ListAuditResponse
	sstest.Eventually(t, 20*time.Second, "the trail trimmed to 4 entries", func() bool {
		resp, err := admin.ListAudit(ctx, &fuseboxv1.ListAuditRequest{})
		if err != nil {
			t.Fatal(err)
		}
		last = resp
		return len(resp.Entries) == 4 && resp.Entries[0].Action == store.ActionAuditTrim
	})
	if a := last.Entries[0].Actor; a != "coordinator "+cfg.Name && a != "coordinator "+cfgB.Name {
		t.Errorf("summary actor %q", a)
	}
	deps, err := admin.ListAudit(ctx, &fuseboxv1.ListAuditRequest{Dependency: "shipping"})
	if err != nil {
		t.Fatal(err)
	}
	if len(deps.Entries) == 0 || len(deps.Entries) > 3 {
		t.Fatalf("shipping's audit after trimming: %d entries", len(deps.Entries))
	}
	for _, e := range deps.Entries {
		if e.Dependency != "shipping" || e.Action != store.ActionPolicyPut {
			t.Errorf("entry %+v", e)
		}
	}
}
