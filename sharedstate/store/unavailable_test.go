package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fusebox-dev/fusebox/sharedstate/store"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded/embeddedtest"
)

// flakyKV fails the first readFails read-only transactions and the first
// writeFails writing ones with err, as etcd's client does around a leader
// change ("etcdserver: leader changed" comes back as an rpctypes.EtcdError).
type flakyKV struct {
	clientv3.KV
	err                   error
	readFails, writeFails atomic.Int64
	reads, writes         atomic.Int64 // transactions committed or failed
}

func (f *flakyKV) Txn(ctx context.Context) clientv3.Txn {
	return &flakyTxn{Txn: f.KV.Txn(ctx), kv: f}
}

type flakyTxn struct {
	clientv3.Txn
	kv    *flakyKV
	write bool
}

func (t *flakyTxn) If(cs ...clientv3.Cmp) clientv3.Txn { t.Txn = t.Txn.If(cs...); return t }

func (t *flakyTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	for _, op := range ops {
		t.write = t.write || op.IsPut() || op.IsDelete()
	}
	t.Txn = t.Txn.Then(ops...)
	return t
}

func (t *flakyTxn) Commit() (*clientv3.TxnResponse, error) {
	fails, count := &t.kv.readFails, &t.kv.reads
	if t.write {
		fails, count = &t.kv.writeFails, &t.kv.writes
	}
	count.Add(1)
	if fails.Add(-1) >= 0 {
		return nil, t.kv.err
	}
	return t.Txn.Commit()
}

// TestReadsRetriedWhileEtcdIsUnavailable: etcd's client never retries a
// transaction, not even one that only reads, and a linearizable read fails
// with "leader changed" whenever etcd's leader changes. The store's reads
// of several keys at one revision (the first step of every write, GetPolicy,
// EffectivePolicy) try again; the write itself, whose outcome is unknown
// after such an error, is not retried, and IsUnavailable says that trying
// again may help.
func TestReadsRetriedWhileEtcdIsUnavailable(t *testing.T) {
	srv := embeddedtest.Start(t)
	cli := embeddedtest.Client(t, srv)
	flaky := &flakyKV{KV: cli.KV, err: rpctypes.ErrLeaderChanged}
	cli.KV = flaky
	st, err := store.New(store.Config{Client: cli})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)

	flaky.readFails.Store(3)
	e, err := st.PutPolicy(ctx, "db", []byte(`{"retry": {"maxAttempts": 4}}`), as("alice"))
	if err != nil {
		t.Fatalf("PutPolicy with 3 failed reads first: %v", err)
	}
	if r, w := flaky.reads.Load(), flaky.writes.Load(); r != 4 || w != 1 {
		t.Fatalf("PutPolicy made %d reads and %d writes, want 4 (3 failed) and 1", r, w)
	}
	flaky.readFails.Store(2)
	if got, err := st.GetPolicy(ctx, "db"); err != nil || got.ModRevision != e.ModRevision {
		t.Fatalf("GetPolicy with 2 failed reads first = %+v, %v", got, err)
	}
	flaky.readFails.Store(2)
	if _, _, err := st.EffectivePolicy(ctx, "db"); err != nil {
		t.Fatalf("EffectivePolicy with 2 failed reads first: %v", err)
	}

	flaky.reads.Store(0)
	flaky.writes.Store(0)
	flaky.writeFails.Store(1)
	_, err = st.PutPolicy(ctx, "db", []byte(`{"retry": {"maxAttempts": 5}}`), as("alice"))
	if !errors.Is(err, rpctypes.ErrLeaderChanged) || !store.IsUnavailable(err) {
		t.Fatalf("PutPolicy whose write failed = %v, want the etcd error, unavailable", err)
	}
	if w := flaky.writes.Load(); w != 1 {
		t.Fatalf("a write of unknown outcome was tried %d times, want once", w)
	}
	audit, err := st.ListAudit(ctx, store.AuditQuery{})
	if err != nil || len(audit) != 1 {
		t.Fatalf("audit after one write and one failed = %d entries (%v), want 1", len(audit), err)
	}

	// Errors that are no unavailability are not retried.
	flaky.err = rpctypes.ErrCompacted
	flaky.reads.Store(0)
	flaky.readFails.Store(1)
	if _, err := st.GetPolicy(ctx, "db"); !errors.Is(err, rpctypes.ErrCompacted) || flaky.reads.Load() != 1 {
		t.Fatalf("GetPolicy failing with %v: %v after %d reads, want that error after 1", rpctypes.ErrCompacted, err, flaky.reads.Load())
	}
	// Nor is an unavailable etcd past the caller's deadline.
	flaky.err = rpctypes.ErrLeaderChanged
	flaky.readFails.Store(1 << 30)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := st.GetPolicy(short, "db"); !store.IsUnavailable(err) {
		t.Fatalf("GetPolicy while etcd stays unavailable = %v, want the unavailable error once the deadline passed", err)
	}
	flaky.readFails.Store(0)
}

func TestIsUnavailable(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("boom"), false},
		{fmt.Errorf("store: %w", rpctypes.ErrLeaderChanged), true},
		{fmt.Errorf("store: %w", rpctypes.ErrNoLeader), true},
		{fmt.Errorf("store: %w", rpctypes.ErrTimeoutDueToLeaderFail), true},
		{fmt.Errorf("store: %w", rpctypes.ErrCompacted), false},
		{fmt.Errorf("store: %w", status.Error(codes.Unavailable, "transport is closing")), true},
		{fmt.Errorf("store: %w", status.Error(codes.InvalidArgument, "lease not found")), false},
		{context.DeadlineExceeded, false},
	} {
		if got := store.IsUnavailable(tt.err); got != tt.want {
			t.Errorf("IsUnavailable(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
