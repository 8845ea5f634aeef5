package coordinator

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded/embeddedtest"
)

// TestTwoCoordinatorsShareOneEtcd: two coordinators on one external etcd
// serve writes and reads at the same time — two writers through each, on
// dependencies of their own and on shared ones, while readers list
// policies and the audit trail through both. Afterwards the audit trail,
// read through either, is complete and ordered: exactly one entry per
// successful write, newest first by revision and time, and each entry's
// "before" is the "after" of the previous entry about the same dependency
// (no change lost, none recorded twice, none out of order).
func TestTwoCoordinatorsShareOneEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two coordinators")
	}
	srv := embeddedtest.Start(t)
	var admins []fuseboxv1.AdminClient
	for range 2 {
		cfg := testConfig(t)
		cfg.DataDir = ""
		cfg.Etcd = srv.Endpoints()
		c := startCoordinator(t, cfg)
		admins = append(admins, adminClient(t, c.GRPCAddr(), ""))
	}
	ctx := ctxFor(t, 60*time.Second)

	const writes = 12 // per writer
	var (
		mu      sync.Mutex
		audited = map[string]bool{} // actor of each write that must have one entry
		errs    []error
		wg      sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	for ci, admin := range admins {
		for g := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				own := fmt.Sprintf("own-%d-%d", ci, g)
				for i := range writes {
					actor := fmt.Sprintf("w%d-%d-%d", ci, g, i)
					var err error
					switch i % 4 {
					case 0: // a policy of its own
						_, err = admin.PutPolicy(ctx, &fuseboxv1.PutPolicyRequest{Dependency: own,
							PolicyJson: fmt.Appendf(nil, `{"retry": {"maxAttempts": %d}}`, i+2), Actor: actor})
					case 1: // a policy every writer writes
						_, err = admin.PutPolicy(ctx, &fuseboxv1.PutPolicyRequest{Dependency: "shared",
							PolicyJson: fmt.Appendf(nil, `{"retry": {"maxAttempts": %d}}`, 10*ci+g+2), Actor: actor})
					case 2: // an override every writer sets
						_, err = admin.ForceOpen(ctx, &fuseboxv1.SetOverrideRequest{Dependency: "shared-override",
							Reason: actor, Actor: actor})
					case 3: // and clears (when another writer has not)
						var resp *fuseboxv1.ClearOverrideResponse
						resp, err = admin.ClearOverride(ctx, &fuseboxv1.ClearOverrideRequest{Dependency: "shared-override", Actor: actor})
						if err == nil && !resp.GetCleared() {
							continue // nothing cleared: no change, no entry
						}
					}
					if status.Code(err) == codes.Aborted {
						// Lost every compare-and-swap retry to the other
						// writers of the same key: refused whole, so it
						// must leave no audit entry (checked below).
						continue
					}
					if err != nil {
						fail(fmt.Errorf("%s through coordinator %d: %w", actor, ci, err))
						continue
					}
					mu.Lock()
					audited[actor] = true
					mu.Unlock()
				}
			}()
		}
		wg.Add(1)
		go func() { // a reader through the same coordinator meanwhile
			defer wg.Done()
			for range writes {
				if _, err := admin.ListPolicies(ctx, &fuseboxv1.ListPoliciesRequest{}); err != nil {
					fail(fmt.Errorf("ListPolicies through coordinator %d: %w", ci, err))
				}
				if _, err := admin.ListAudit(ctx, &fuseboxv1.ListAuditRequest{Limit: 20}); err != nil {
					fail(fmt.Errorf("ListAudit through coordinator %d: %w", ci, err))
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	if len(audited) < 2*2*writes/2 {
		t.Fatalf("only %d writes succeeded", len(audited))
	}

	var lists [2][]*fuseboxv1.AuditEntry
	for ci, admin := range admins {
		resp, err := admin.ListAudit(ctx, &fuseboxv1.ListAuditRequest{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		lists[ci] = resp.GetEntries()
	}
	if len(lists[0]) != len(lists[1]) {
		t.Fatalf("the coordinators list %d and %d audit entries", len(lists[0]), len(lists[1]))
	}
	entries := lists[0]
	seen := map[string]int{}
	for i, e := range entries {
		if o := lists[1][i]; o.GetRevision() != e.GetRevision() || o.GetActor() != e.GetActor() {
			t.Errorf("entry %d: coordinator 0 lists revision %d by %q, coordinator 1 revision %d by %q",
				i, e.GetRevision(), e.GetActor(), o.GetRevision(), o.GetActor())
		}
		actor, _, _ := strings.Cut(e.GetActor(), " (")
		seen[actor]++
		if i == 0 {
			continue
		}
		prev := entries[i-1]
		if e.GetRevision() >= prev.GetRevision() {
			t.Errorf("entry %d (%s) at revision %d listed after revision %d: not newest first", i, actor, e.GetRevision(), prev.GetRevision())
		}
		if e.GetAt().AsTime().After(prev.GetAt().AsTime()) {
			t.Errorf("entry %d (%s) at %v listed after one at %v: not newest first", i, actor, e.GetAt().AsTime(), prev.GetAt().AsTime())
		}
	}
	for actor := range audited {
		if seen[actor] != 1 {
			t.Errorf("write %s has %d audit entries, want 1", actor, seen[actor])
		}
	}
	for actor, n := range seen {
		if !audited[actor] {
			t.Errorf("audit entry by %s (%d of them) for no successful write", actor, n)
		}
	}

	// Oldest first, each dependency's entries chain: before = previous after.
	last := map[string][]byte{}
	for i := len(entries) - 1; i >= 0; i-- {
		e := entries[i]
		if !bytes.Equal(e.GetBefore(), last[e.GetDependency()]) {
			t.Errorf("%s's entry at revision %d by %s: before %s, but the previous entry left %s",
				e.GetDependency(), e.GetRevision(), e.GetActor(), e.GetBefore(), last[e.GetDependency()])
		}
		last[e.GetDependency()] = e.GetAfter()
	}

	// The dependency filter, through either coordinator, gives the same
	// entries as the full trail.
	for ci, admin := range admins {
		resp, err := admin.ListAudit(ctx, &fuseboxv1.ListAuditRequest{Dependency: "shared", Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		var want []int64
		for _, e := range entries {
			if e.GetDependency() == "shared" {
				want = append(want, e.GetRevision())
			}
		}
		var got []int64
		for _, e := range resp.GetEntries() {
			got = append(got, e.GetRevision())
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("coordinator %d: audit --dependency shared = revisions %v, the full trail has %v", ci, got, want)
		}
	}
	t.Logf("%d writes through two coordinators, %d audit entries", len(audited), len(entries))
}
