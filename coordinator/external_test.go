package coordinator

import (
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded/embeddedtest"
)

// TestExternalEtcdWithPassword runs the coordinator against an etcd it did
// not start, with authentication on.
func TestExternalEtcdWithPassword(t *testing.T) {
	srv := embeddedtest.Start(t)
	cli := embeddedtest.Client(t, srv)
	ctx := ctxFor(t, 20*time.Second)
	if _, err := cli.RoleAdd(ctx, "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.UserAdd(ctx, "root", "s3cret"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}

	cfg := testConfig(t)
	cfg.DataDir = ""
	cfg.Etcd = srv.Endpoints()
	cfg.EtcdUsername, cfg.EtcdPassword = "root", "s3cret"
	c := startCoordinator(t, cfg)
	if got := c.EtcdEndpoints(); len(got) != 1 || got[0] != srv.Endpoints()[0] {
		t.Fatalf("EtcdEndpoints() = %v", got)
	}
	a := adminClient(t, c.GRPCAddr(), "")
	if _, err := a.PutPolicy(ctx, &fuseboxv1.PutPolicyRequest{Dependency: "db", PolicyJson: []byte(`{}`), Actor: "t"}); err != nil {
		t.Fatalf("PutPolicy through an authenticated etcd: %v", err)
	}

	bad := testConfig(t)
	bad.DataDir = ""
	bad.Etcd = srv.Endpoints()
	bad.EtcdUsername, bad.EtcdPassword = "root", "wrong"
	bc, err := New(bad, testOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	err = bc.Start(ctxFor(t, 2*time.Second)) // bounds etcd's dial
	_ = bc.Close()
	if err == nil || !strings.Contains(err.Error(), "etcd") {
		t.Fatalf("Start with a wrong etcd password = %v, want an etcd error", err)
	}
}
