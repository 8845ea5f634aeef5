package coordinator

import (
	"fmt"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded/embeddedtest"
)

// TestCoordinatorFollowsEtcdRewind: the etcd under a coordinator is wiped
// and started again empty. The coordinator's own watch notices: the
// events stream says the override and the policy etcd lost are gone, the
// fleet view no longer shows them, GetFleet reports the rewind (and the
// coordinator synced after it), the rewind is counted, and writes made
// afterwards are published as usual.
func TestCoordinatorFollowsEtcdRewind(t *testing.T) {
	srv := embeddedtest.Start(t)
	cfg := testConfig(t)
	cfg.DataDir = ""
	cfg.Etcd = srv.Endpoints()
	c := startCoordinator(t, cfg)
	admin := adminClient(t, c.GRPCAddr(), "")
	ctx := ctxFor(t, 60*time.Second)
	all := watch(t, admin, &fuseboxv1.WatchRequest{})
	if _, err := admin.ForceOpen(ctx, &fuseboxv1.SetOverrideRequest{Dependency: "mail", Reason: "incident", Actor: "dana"}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.PutPolicy(ctx, &fuseboxv1.PutPolicyRequest{Dependency: "mail", PolicyJson: []byte(`{"breaker": {"minimumRequests": 120}}`), Actor: "dana"}); err != nil {
		t.Fatal(err)
	}
	recvN(t, all, 2)
	before, err := admin.GetFleet(ctx, &fuseboxv1.GetFleetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if e := before.GetEtcd(); !e.GetSynced() || e.GetClusterId() == "" || e.GetRevision() == 0 || e.GetRewinds() != 0 {
		t.Fatalf("GetFleet etcd before the wipe = %v, want synced, its cluster and revision, no rewind", e)
	}

	embeddedtest.Wipe(t, srv)
	type ev struct {
		typ   fuseboxv1.EventType
		state string
	}
	seen := map[ev]bool{}
	for !seen[ev{fuseboxv1.EventType_EVENT_TYPE_OVERRIDE, "none"}] || !seen[ev{fuseboxv1.EventType_EVENT_TYPE_POLICY, "deleted"}] { // bounded by the stream's deadline (watch)
		e := recvN(t, all, 1)[0]
		if e.GetDependency() == "mail" {
			seen[ev{e.GetType(), e.GetState()}] = true
		}
	}
	sstest.EventuallyNoError(t, 15*time.Second, "GetFleet to report the rewind, synced, without the lost override", func() error {
		snap, err := admin.GetFleet(ctx, &fuseboxv1.GetFleetRequest{})
		if err != nil {
			return err
		}
		e := snap.GetEtcd()
		r := e.GetLastRewind()
		if !e.GetSynced() || e.GetRewinds() != 1 || r.GetReason() != "revision_went_back" ||
			r.GetFromRevision() != before.GetEtcd().GetRevision() || r.GetToRevision() >= r.GetFromRevision() ||
			r.GetFromClusterId() != before.GetEtcd().GetClusterId() || r.GetAt() == nil {
			return fmt.Errorf("GetFleet etcd = %v, want synced after one revision_went_back from revision %d", e, before.GetEtcd().GetRevision())
		}
		for _, d := range snap.GetDependencies() {
			if d.GetDependency() == "mail" && d.GetOverride() != fuseboxv1.OverrideState_OVERRIDE_STATE_NONE {
				return fmt.Errorf("the fleet view still shows mail %v", d.GetOverride())
			}
		}
		return nil
	})
	if v := metricValue(t, c.reg, "fusebox_coordinator_etcd_rewinds_total", map[string]string{"reason": "revision_went_back"}); v != 1 {
		t.Errorf("fusebox_coordinator_etcd_rewinds_total{reason=revision_went_back} = %v, want 1", v)
	}

	if _, err := admin.ForceClosed(ctx, &fuseboxv1.SetOverrideRequest{Dependency: "mail", Reason: "after", Actor: "dana"}); err != nil {
		t.Fatal(err)
	}
	for { // bounded by the stream's deadline (watch)
		e := recvN(t, all, 1)[0]
		if e.GetDependency() == "mail" && e.GetType() == fuseboxv1.EventType_EVENT_TYPE_OVERRIDE && e.GetState() == "forced-closed" {
			break
		}
	}
}
