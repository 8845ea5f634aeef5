package embedded_test

import (
	"context"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded/embeddedtest"
)

// TestClusterLosesItsLeader checks the test helper itself: a 3-member
// cluster elects a leader, Kill takes it down without handing leadership
// over, the other two elect one of themselves and serve writes again, and
// Close leaves nothing running (goleak).
func TestClusterLosesItsLeader(t *testing.T) {
	cl := embeddedtest.StartCluster(t, 3)
	cli := cl.Client(t)
	if n := len(cl.Endpoints()); n != 3 {
		t.Fatalf("Endpoints() = %v, want 3", cl.Endpoints())
	}
	ctx := ctxForTest(t)
	if _, err := cli.Put(ctx, "k", "before"); err != nil {
		t.Fatal(err)
	}
	old := cl.WaitLeader(t, 10*time.Second)
	cl.Kill(old)
	if cl.Running(old) {
		t.Fatalf("member %d still runs after Kill", old)
	}
	next := cl.WaitLeader(t, 10*time.Second)
	if next == old {
		t.Fatalf("the killed member %d is still the leader", old)
	}
	sstest.Eventually(t, 15*time.Second, "a write to succeed on the surviving members", func() bool {
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := cli.Put(wctx, "k", "after")
		return err == nil
	})
	resp, err := cli.Get(ctx, "k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "after" {
		t.Fatalf("Get(k) after the leader's loss = %v, %v", resp, err)
	}
	cl.Kill(old) // harmless

	// The killed member comes back with its data, on its URLs, and serves
	// what was written while it was away.
	if err := cl.Restart(old); err != nil {
		t.Fatal(err)
	}
	if !cl.Running(old) {
		t.Fatalf("member %d does not run after Restart", old)
	}
	cl.WaitLeader(t, 10*time.Second)
	only := embeddedtest.ClientOf(t, cl.Endpoint(old))
	sstest.Eventually(t, 15*time.Second, "the restarted member to serve the write made while it was away", func() bool {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		resp, err := only.Get(rctx, "k")
		return err == nil && len(resp.Kvs) == 1 && string(resp.Kvs[0].Value) == "after"
	})
}
