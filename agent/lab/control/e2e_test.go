package control

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fusebox-dev/fusebox/coordinator"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded/embeddedtest"
)

// TestAgentsFollowTheCoordinator: an admin's force-open makes every agent
// reject within a second; a viewer's is refused; a policy written around
// the coordinator reaches the coordinator's view and every agent; the
// observer lists the agents and is never counted by them.
func TestAgentsFollowTheCoordinator(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a coordinator and three agents")
	}
	f := startCoordinator(t, setup{tokens: true})
	c := f.Coordinator()
	agents := startAgents(t, f, 3)
	ctx := ctxFor(t, 30*time.Second)
	admin := adminClient(t, c.GRPCAddr(), adminToken)
	viewer := adminClient(t, c.GRPCAddr(), viewerToken)

	sstest.Eventually(t, 15*time.Second, "the observer to see three agents, and the agents to count three agents", func() bool {
		members, err := viewer.ListMembers(ctx, &fuseboxv1.ListMembersRequest{})
		if err != nil {
			return false
		}
		alive := 0
		for _, m := range members.GetMembers() {
			if m.GetRole() == "agent" && m.GetStatus() == "alive" {
				alive++
			}
		}
		if alive != 3 {
			return false
		}
		for _, a := range agents {
			// Every agent knows the observer as a member but does not count it.
			if len(a.Gossip().Members()) != 4 || a.Gossip().NumAgents() != 3 {
				return false
			}
		}
		return true
	})

	dep := "payments"
	for _, a := range agents {
		if d := a.Engine().Decide(dep, sharedstate.FirstAttempt); !d.Allowed() {
			t.Fatalf("%s rejects %s before any override: %v", a.Name(), dep, d)
		}
	}
	if _, err := viewer.ForceOpen(ctx, &fuseboxv1.SetOverrideRequest{Dependency: dep}); err == nil {
		t.Fatal("a viewer forced a breaker open")
	}
	if _, err := adminClient(t, c.GRPCAddr(), "").ForceOpen(ctx, &fuseboxv1.SetOverrideRequest{Dependency: dep}); err == nil {
		t.Fatal("a caller without a token forced a breaker open")
	}
	if _, err := admin.ForceOpen(ctx, &fuseboxv1.SetOverrideRequest{Dependency: dep, Reason: "incident 42",
		Ttl: durationpb.New(time.Minute), Actor: "oncall"}); err != nil {
		t.Fatal(err)
	}
	// Generous: the sub-second promise is measured by BenchmarkOverridePropagation.
	sstest.EventuallyNoError(t, 10*time.Second, "every agent to reject "+dep+" (forced open)", func() error {
		for _, a := range agents {
			if d := a.Engine().Decide(dep, sharedstate.FirstAttempt); d.Verdict != sharedstate.Reject || d.Reason != sharedstate.ReasonForcedOpen {
				return fmt.Errorf("%s still decides %v", a.Name(), d)
			}
		}
		return nil
	})

	// A policy written straight into etcd by another client.
	other, err := store.New(store.Config{Client: embeddedtest.Client(t, f.EtcdServer()), Prefix: coordinator.DefaultEtcdPrefix})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.PutPolicy(context.Background(), "ledger", []byte(`{"breaker":{"mode":"shadow"}}`),
		store.WriteOptions{Actor: "gitops"}); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 10*time.Second, "the coordinator and every agent to run ledger in shadow mode", func() bool {
		snap, err := viewer.GetFleet(ctx, &fuseboxv1.GetFleetRequest{Dependency: "ledger"})
		if err != nil || snap.GetDependencies()[0].GetMode() != fuseboxv1.Mode_MODE_SHADOW {
			return false
		}
		for _, a := range agents {
			if a.Engine().Policy("ledger").Breaker.Mode != sharedstate.ModeShadow {
				return false
			}
		}
		return true
	})

	// Clearing gives the decision back to the breaker.
	if _, err := admin.ClearOverride(ctx, &fuseboxv1.ClearOverrideRequest{Dependency: dep, Actor: "oncall"}); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 10*time.Second, "every agent to allow again", func() bool {
		for _, a := range agents {
			if !a.Engine().Decide(dep, sharedstate.FirstAttempt).Allowed() {
				return false
			}
		}
		return true
	})
}
