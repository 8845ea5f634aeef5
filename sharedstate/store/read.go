package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fusebox-dev/fusebox/sharedstate/backoff"
	"github.com/fusebox-dev/fusebox/sharedstate/ctxtime"
)

// rangePage is how many keys one range request of rangeAll reads, so that
// no single response grows with the number of dependencies.
const rangePage = 500

// rangeAll calls fn for every key with the given prefix, in key order, all
// read at one revision: rev if non-zero, else the revision of the first
// page. It returns that revision. A compaction past rev makes it fail with
// rpctypes.ErrCompacted.
func (s *Store) rangeAll(ctx context.Context, prefix string, rev int64, fn func(*mvccpb.KeyValue)) (int64, error) {
	rev, _, err := rangePages(ctx, s.cli, prefix, prefixEnd(prefix), rev, fn)
	return rev, err
}

// list reads every key under dir at one revision, in key order, and
// returns them with that revision.
func (s *Store) list(ctx context.Context, dir string) ([]*mvccpb.KeyValue, int64, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	var kvs []*mvccpb.KeyValue
	rev, err := s.rangeAll(ctx, s.prefix+dir, 0, func(kv *mvccpb.KeyValue) { kvs = append(kvs, kv) })
	if err != nil {
		return nil, 0, fmt.Errorf("store: list %s: %w", strings.TrimSuffix(dir, "/"), err)
	}
	return kvs, rev, nil
}

// decodeAll decodes kvs with decode and returns the valid entries, in
// order. The values decode refuses are skipped and reported in the error
// (*InvalidValueError, several joined) alongside the valid entries.
func decodeAll[T any](kvs []*mvccpb.KeyValue, decode func(*mvccpb.KeyValue) (T, error)) ([]T, error) {
	var (
		out     []T
		invalid []error
	)
	for _, kv := range kvs {
		e, err := decode(kv)
		if err != nil {
			invalid = append(invalid, err)
			continue
		}
		out = append(out, e)
	}
	return out, joinInvalid(invalid)
}

// joinInvalid returns one error for the invalid values a read skipped, nil
// for none.
func joinInvalid(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

// rangePages reads [from, end) a page at a time, all at one revision (rev
// if non-zero, else the first page's), calls fn for every key in key order
// and returns that revision and the first page's header (which says the
// cluster, and etcd's revision at the time). extra options apply to every
// page (WithKeysOnly).
func rangePages(ctx context.Context, kv clientv3.KV, from, end string, rev int64, fn func(*mvccpb.KeyValue), extra ...clientv3.OpOption) (int64, *etcdserverpb.ResponseHeader, error) {
	var hdr *etcdserverpb.ResponseHeader
	for {
		opts := append([]clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(rangePage)}, extra...)
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := kv.Get(ctx, from, opts...)
		if err != nil {
			return 0, nil, err
		}
		if hdr == nil {
			hdr = resp.Header
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			fn(kv)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return rev, hdr, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// readTxn commits a transaction of reads (ops are Gets) at one revision,
// trying again while etcd is unavailable (IsUnavailable: a leader change,
// no leader, a reconnect) until ctx ends; it then returns the last error.
// etcd's client retries a failed Range by itself but no Txn, even one that
// only reads, and a linearizable read fails with "etcdserver: leader
// changed" whenever the leader changes: without this every write (which
// starts with such a read) failed around a leader change.
//
// Retry label: idempotent by nature (it only reads).
func (s *Store) readTxn(ctx context.Context, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	wait := backoff.New(backoff.Policy{Base: 25 * time.Millisecond, Max: 500 * time.Millisecond, Jitter: backoff.None}, nil)
	for {
		resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
		if err == nil || !IsUnavailable(err) || !ctxtime.Sleep(ctx, wait.Next()) {
			return resp, err
		}
	}
}

// first returns the first of kvs, nil when there is none.
func first(kvs []*mvccpb.KeyValue) *mvccpb.KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	return kvs[0]
}
