package store_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

func TestMembersRegisterAndVanish(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	a := store.Member{Node: "node-a", Role: "agent", Zone: "z1", Version: "v1", GossipAddr: "10.0.0.1:7946", APIAddr: "10.0.0.1:7951"}
	b := store.Member{Node: "node-b", Role: "observer", Zone: "z2", Version: "v1", GossipAddr: "10.0.0.2:7946"}
	ra, err := e.st.Register(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := e.st.Register(ctx, b, store.WithMemberTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Close()

	list, _, err := e.st.ListMembers(ctx)
	if err != nil || len(list) != 2 || list[0].Member != a || list[1].Member != b || list[0].Lease != ra.Lease() {
		t.Fatalf("list = %+v, %v", list, err)
	}

	a.Version = "v2"
	if err := ra.Update(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := ra.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := ra.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	select {
	case <-ra.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
	// Close revoked the lease: the key is gone at once.
	list, _, err = e.st.ListMembers(ctx)
	if err != nil || len(list) != 1 || list[0].Node != "node-b" {
		t.Fatalf("list after close = %+v, %v", list, err)
	}
}

func TestMemberOfDeadClientExpires(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	// A node that dies without closing: its client goes away, its
	// keep-alive stops, and the lease expires.
	cli, err := e.srv.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.New(store.Config{Client: cli})
	if err != nil {
		t.Fatal(err)
	}
	r, err := st.Register(ctx, store.Member{Node: "doomed", Role: "agent"}, store.WithMemberTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.cli.Get(ctx, st.MemberKey("doomed"))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("registration not visible: %v %v", resp, err)
	}
	wch := e.cli.Watch(ctx, st.MemberKey("doomed"), clientv3.WithRev(resp.Header.Revision+1))
	cli.Close()
	select {
	case <-r.Done(): // the keep-alive stopped with the client
	case <-ctx.Done():
		t.Fatalf("the registration's keep-alive did not stop when its client closed: %v", ctx.Err())
	}
	for resp := range wch {
		if err := resp.Err(); err != nil {
			t.Fatal(err)
		}
		if len(resp.Events) > 0 && resp.Events[0].Type == clientv3.EventTypeDelete {
			return
		}
	}
	t.Fatalf("the key of a dead member did not expire: %v", ctx.Err())
}

func TestCallsDoNotHangWhenEtcdIsDown(t *testing.T) {
	e := newEnv(t)
	st, err := store.New(store.Config{Client: e.cli, RequestTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e.srv.Stop()
	// A context without a deadline: RequestTimeout bounds every call.
	ctx := context.Background()
	calls := map[string]func() error{
		"GetPolicy": func() error { _, err := st.GetPolicy(ctx, "dep"); return err },
		"PutPolicy": func() error { _, err := st.PutPolicy(ctx, "dep", []byte(`{}`), as("a")); return err },
		"SetOverride": func() error {
			_, err := st.SetOverride(ctx, "dep", store.OverrideSpec{State: sharedstate.ForcedOpen, TTL: time.Minute}, as("a"))
			return err
		},
		"ListAudit": func() error { _, err := st.ListAudit(ctx, store.AuditQuery{}); return err },
		"Register":  func() error { _, err := st.Register(ctx, store.Member{Node: "n"}); return err },
	}
	for name, call := range calls {
		start := time.Now()
		if err := call(); err == nil {
			t.Errorf("%s succeeded with etcd down", name)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s took %v with a 300ms request timeout", name, d)
		}
	}
}

// GetMember reads one registration, its public key and frame version
// included; a node without one is not found.
func TestGetMember(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	m := store.Member{Node: "node-k", Role: "agent", Version: "0.2.0-dev", GossipAddr: "10.0.0.3:7946",
		PublicKey: "MCowBQYDK2VwAyEA0123456789abcdefghijklmnopqrstuv", Wire: 2}
	r, err := e.st.Register(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, found, err := e.st.GetMember(ctx, "node-k")
	if err != nil || !found || got.Member != m || got.Lease != r.Lease() {
		t.Fatalf("GetMember = %+v, %v, %v; want %+v", got, found, err, m)
	}
	if _, found, err := e.st.GetMember(ctx, "nobody"); err != nil || found {
		t.Fatalf("GetMember of an unregistered node: found %v, %v", found, err)
	}
}
