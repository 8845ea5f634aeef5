package store_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

func TestOverrideWithTTLExpiresByItself(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	set, err := e.st.SetOverride(ctx, "payments", store.OverrideSpec{
		State: sharedstate.ForcedOpen, Reason: "incident 42", TTL: time.Second,
	}, as("alice"))
	if err != nil {
		t.Fatal(err)
	}
	if set.Lease == clientv3.NoLease || set.Expires.IsZero() || !set.Expires.After(set.Created) {
		t.Fatalf("override with TTL = %+v, want a lease and an expiry", set)
	}
	got, err := e.st.GetOverride(ctx, "payments")
	if err != nil || got.State != sharedstate.ForcedOpen || got.Reason != "incident 42" || got.Actor != "alice" {
		t.Fatalf("get = %+v, %v", got, err)
	}

	// Wait for etcd to delete the key when the lease runs out.
	wch := e.cli.Watch(ctx, e.st.OverrideKey("payments"), clientv3.WithRev(set.ModRevision+1))
	for resp := range wch {
		if err := resp.Err(); err != nil {
			t.Fatal(err)
		}
		if len(resp.Events) > 0 && resp.Events[0].Type == clientv3.EventTypeDelete {
			break
		}
	}
	if _, err := e.st.GetOverride(ctx, "payments"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get after expiry = %v, want ErrNotFound (or the watch timed out)", err)
	}
	// Nobody changed it: only the set is audited.
	entries, err := e.st.ListAudit(ctx, store.AuditQuery{Dependency: "payments"})
	if err != nil || len(entries) != 1 || entries[0].Action != store.ActionOverrideSet {
		t.Fatalf("audit = %+v, %v", entries, err)
	}
}

func TestOverrideSetReplaceClear(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	first, err := e.st.SetOverride(ctx, "dep", store.OverrideSpec{State: sharedstate.ForcedOpen, TTL: time.Hour}, as("alice"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := e.st.SetOverride(ctx, "dep", store.OverrideSpec{State: sharedstate.ForcedClosed, Reason: "known good"},
		store.WriteOptions{Actor: "bob", Expect: store.ExpectModRevision(first.ModRevision)})
	if err != nil {
		t.Fatal(err)
	}
	if second.Lease != clientv3.NoLease || !second.Expires.IsZero() {
		t.Fatalf("override without TTL = %+v, want no lease and no expiry", second)
	}
	// The first override's lease was revoked.
	if ttl, err := e.cli.TimeToLive(ctx, first.Lease); err != nil || ttl.TTL != -1 {
		t.Fatalf("old lease TTL = %+v, %v, want revoked (-1)", ttl, err)
	}
	list, _, err := e.st.ListOverrides(ctx)
	if err != nil || len(list) != 1 || list[0].State != sharedstate.ForcedClosed || list[0].Actor != "bob" {
		t.Fatalf("list = %+v, %v", list, err)
	}
	_, err = e.st.SetOverride(ctx, "dep", store.OverrideSpec{State: sharedstate.ForcedOpen},
		store.WriteOptions{Actor: "carol", Expect: store.ExpectAbsent})
	mustConflict(t, err, 0, second.ModRevision)

	if err := e.st.ClearOverride(ctx, "dep", as("bob")); err != nil {
		t.Fatal(err)
	}
	if err := e.st.ClearOverride(ctx, "dep", as("bob")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second clear = %v, want ErrNotFound", err)
	}
	entries, err := e.st.ListAudit(ctx, store.AuditQuery{Dependency: "dep"})
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, en := range entries {
		actions = append(actions, en.Action+"/"+en.Actor)
	}
	want := "override.clear/bob override.set/bob override.set/alice"
	if strings.Join(actions, " ") != want {
		t.Fatalf("audit = %v, want %s", actions, want)
	}
}

func TestOverrideRefusesBadInput(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	_, err := e.st.SetOverride(ctx, "bad name!", store.OverrideSpec{
		State: sharedstate.OverrideNone, Reason: strings.Repeat("x", sharedstate.MaxReasonLen+1), TTL: -time.Second,
	}, store.WriteOptions{})
	for _, want := range []string{"invalid dependency name", "TTL", "Actor", "state", "reason"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("SetOverride = %v, want it to name %q", err, want)
		}
	}
	if !errors.Is(err, sharedstate.ErrInvalidOverride) {
		t.Errorf("SetOverride = %v, want it to match ErrInvalidOverride", err)
	}
}

func TestAuditIsAtomicOrderedAndComplete(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	p1, err := e.st.PutPolicy(ctx, "dep", []byte(`{"retry": {"maxAttempts": 2}}`), as("alice"))
	if err != nil {
		t.Fatal(err)
	}
	p2, err := e.st.PutPolicy(ctx, "dep", []byte(`{"retry": {"maxAttempts": 4}}`), as("bob"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.PutPolicy(ctx, "other", []byte(`{}`), as("carol")); err != nil {
		t.Fatal(err)
	}
	// Failed writes leave no entry.
	_, _ = e.st.PutPolicy(ctx, "dep", []byte(`{}`), store.WriteOptions{Actor: "dave", Expect: store.ExpectAbsent})
	_, _ = e.st.PutPolicy(ctx, "dep", []byte(`{"retry": {"maxAttempts": -1}}`), as("dave"))

	all, err := e.st.ListAudit(ctx, store.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 3 {
		t.Fatalf("audit has %d entries, want 3: %+v", len(all), all)
	}
	for i, en := range all {
		if want := int64(3 - i); en.Seq != want {
			t.Errorf("entry %d has seq %d, want %d (newest first)", i, en.Seq, want)
		}
	}
	newest := all[1] // bob's change of dep
	if newest.Actor != "bob" || newest.Action != store.ActionPolicyPut || newest.Dependency != "dep" || newest.At.IsZero() {
		t.Fatalf("entry = %+v", newest)
	}
	// Written in the same transaction as the change: same revision.
	if newest.Revision != p2.ModRevision || all[2].Revision != p1.ModRevision {
		t.Fatalf("audit revisions %d, %d; changes at %d, %d", newest.Revision, all[2].Revision, p2.ModRevision, p1.ModRevision)
	}
	if !strings.Contains(string(newest.Before), `"maxAttempts":2`) || !strings.Contains(string(newest.After), `"maxAttempts":4`) {
		t.Fatalf("before %s / after %s", newest.Before, newest.After)
	}
	if string(all[2].Before) != "null" && len(all[2].Before) != 0 {
		t.Fatalf("first entry's before = %s, want null", all[2].Before)
	}

	// Filter, limit and paging.
	dep, err := e.st.ListAudit(ctx, store.AuditQuery{Dependency: "dep", Limit: 1})
	if err != nil || len(dep) != 1 || dep[0].Seq != 2 {
		t.Fatalf("dep limit 1 = %+v, %v", dep, err)
	}
	page, err := e.st.ListAudit(ctx, store.AuditQuery{BeforeSeq: dep[0].Seq})
	if err != nil || len(page) != 1 || page[0].Seq != 1 {
		t.Fatalf("page before seq 2 = %+v, %v", page, err)
	}

	// Trimming keeps the newest and the numbering: seq 4 is the trim's
	// summary, 5 the next change.
	trim, err := e.st.TrimAuditRetention(ctx, store.AuditRetention{MaxEntries: 2}, "ops")
	if err != nil || trim.Deleted != 2 || trim.SummarySeq != 4 {
		t.Fatalf("trim = %+v, %v", trim, err)
	}
	if _, err := e.st.PutPolicy(ctx, "other", []byte(`{}`), as("carol")); err != nil {
		t.Fatal(err)
	}
	all, err = e.st.ListAudit(ctx, store.AuditQuery{})
	if err != nil || len(all) != 3 || all[0].Seq != 5 || all[1].Seq != 4 || all[2].Seq != 3 {
		t.Fatalf("after trim = %+v, %v", all, err)
	}
}

func TestAuditUnderConcurrentWriters(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	const writers, each = 4, 5
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range each {
				dep := fmt.Sprintf("dep-%d", i)
				body := fmt.Sprintf(`{"breaker": {"minimumRequests": %d}}`, j+1)
				if _, err := e.st.PutPolicy(ctx, dep, []byte(body), as(dep)); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent unconditional put: %v", err)
	}
	all, err := e.st.ListAudit(ctx, store.AuditQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != writers*each {
		t.Fatalf("audit has %d entries, want %d", len(all), writers*each)
	}
	for i, en := range all {
		if want := int64(len(all) - i); en.Seq != want {
			t.Fatalf("entry %d has seq %d, want %d: seqs must be unique and gap-free", i, en.Seq, want)
		}
		if i > 0 && en.Revision >= all[i-1].Revision {
			t.Fatalf("seq %d at revision %d is not older than seq %d at %d", en.Seq, en.Revision, all[i-1].Seq, all[i-1].Revision)
		}
	}
}
