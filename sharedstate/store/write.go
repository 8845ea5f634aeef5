package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Expect is a compare-and-swap precondition on a key's mod revision. The
// zero value is unconditional.
type Expect struct {
	rev int64
	set bool
}

// ExpectModRevision makes a write succeed only if the key's mod revision is
// rev; rev 0 means the key must not exist. A negative rev never matches.
func ExpectModRevision(rev int64) Expect { return Expect{rev: rev, set: true} }

// ExpectAbsent makes a write succeed only if the key does not exist.
var ExpectAbsent = ExpectModRevision(0)

// ModRevision returns the expected mod revision and whether there is one.
func (e Expect) ModRevision() (rev int64, ok bool) { return e.rev, e.set }

func (e Expect) String() string {
	if !e.set {
		return "any"
	}
	return revString(e.rev)
}

// WriteOptions are the options of a write that the audit log records.
type WriteOptions struct {
	// Actor names who makes the change (required): recorded in the audit
	// entry.
	Actor string

	// Expect is the compare-and-swap precondition (optional, default
	// unconditional). A mismatch returns a *ConflictError.
	Expect Expect
}

// maxWriteAttempts bounds the internal retries of a write that lost a race
// it did not ask to win (an unconditional write whose key, or the audit log,
// changed between the read and the write).
const maxWriteAttempts = 16

// change is one write of a policy or an override together with its audit
// entry.
type change struct {
	action     string
	dependency string
	key        string
	value      []byte // nil: delete the key (unless prepare returns a value)
	lease      clientv3.LeaseID
	opts       WriteOptions

	// prepare, when set, runs on every attempt after the key was read at
	// revision rev (prev is its value, nil if absent). It may read more at
	// rev, validate, and return the value to write (nil: delete) and
	// compares that must still hold when the write commits.
	prepare func(ctx context.Context, rev int64, prev *mvccpb.KeyValue) ([]byte, []clientv3.Cmp, error)
}

// apply writes c and its audit entry in one etcd transaction:
//
//	If(  mod_revision(key) == the revision read,
//	     create_revision(audit/<seq>) == 0,     // seq = newest audit seq + 1
//	     whatever c.prepare asked for )
//	Then( put or delete key, put audit/<seq> )
//
// The first compare implements the caller's Expect and makes the audit
// entry's "before" exact; the second makes audit keys unique and ordered by
// commit (sharedstate/DESIGN.md, "etcd key layout"). A failed compare that the caller did not ask
// for (Expect unset, or only the audit race lost) is retried with a fresh
// read, up to maxWriteAttempts times.
//
// Retry label: the reads are idempotent by nature (readTxn retries them
// while etcd is unavailable, as around a leader change); the transaction
// is idempotent by key (its compares make a replay fail, never apply twice)
// but it is not retried after a transport or etcd error, whose outcome is
// unknown: that error is returned (IsUnavailable tells the caller that
// trying again may help).
//
// It returns the revision of the change and the previous key-value (nil if
// there was none).
func (s *Store) apply(ctx context.Context, c change) (int64, *mvccpb.KeyValue, error) {
	if c.opts.Actor == "" {
		return 0, nil, fmt.Errorf("store: %s %q: WriteOptions.Actor is required", c.action, c.dependency)
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	auditPrefix := s.prefix + auditDir
	for attempt := 1; ; attempt++ {
		read, err := s.readTxn(ctx,
			clientv3.OpGet(c.key),
			clientv3.OpGet(auditPrefix, append(clientv3.WithLastKey(), clientv3.WithKeysOnly())...),
		)
		if err != nil {
			return 0, nil, fmt.Errorf("store: %s %q: read: %w", c.action, c.dependency, err)
		}
		prev := first(read.Responses[0].GetResponseRange().Kvs)
		cur := prev.GetModRevision() // 0: absent
		if want, ok := c.opts.Expect.ModRevision(); ok && want != cur {
			return 0, nil, &ConflictError{Key: c.key, Expected: want, Current: cur, Revision: read.Header.Revision}
		}
		value := c.value
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(c.key), "=", cur)}
		if c.prepare != nil {
			v, more, err := c.prepare(ctx, read.Header.Revision, prev)
			if err != nil {
				return 0, nil, err
			}
			value = v
			cmps = append(cmps, more...)
		}
		if value == nil && prev == nil {
			return 0, nil, fmt.Errorf("%w: %s %q: %s", ErrNotFound, c.action, c.dependency, c.key)
		}
		seq := int64(1)
		if newest := first(read.Responses[1].GetResponseRange().Kvs); newest != nil {
			last, err := parseAuditSeq(string(newest.Key), auditPrefix)
			if err != nil {
				return 0, nil, fmt.Errorf("store: %s %q: %w", c.action, c.dependency, err)
			}
			seq = last + 1
		}
		auditKey := s.AuditKey(seq)
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(auditKey), "=", 0))
		entry, err := json.Marshal(auditRecord{
			Actor:      c.opts.Actor,
			Action:     c.action,
			Dependency: c.dependency,
			Before:     rawJSON(prev.GetValue()), // null when absent
			After:      rawJSON(value),
			At:         s.now(),
		})
		if err != nil {
			return 0, nil, fmt.Errorf("store: %s %q: audit entry: %w", c.action, c.dependency, err)
		}
		op := clientv3.OpPut(c.key, string(value), clientv3.WithLease(c.lease)) // NoLease: none
		if value == nil {
			op = clientv3.OpDelete(c.key)
		}
		resp, err := s.cli.Txn(ctx).If(cmps...).Then(op, clientv3.OpPut(auditKey, string(entry)),
			clientv3.OpPut(s.auditIndexKey(c.dependency, seq), string(entry))).Commit()
		if err != nil {
			return 0, nil, fmt.Errorf("store: %s %q: write: %w", c.action, c.dependency, err)
		}
		if resp.Succeeded {
			return resp.Header.Revision, prev, nil
		}
		if attempt == maxWriteAttempts {
			return 0, nil, fmt.Errorf("store: %s %q: lost %d races in a row: %w", c.action, c.dependency, attempt, ErrConflict)
		}
		// Lost a race: the next read tells whether it was the caller's
		// precondition (a ConflictError then) or only ours.
	}
}

func parseAuditSeq(key, auditPrefix string) (int64, error) {
	seq, err := strconv.ParseInt(strings.TrimPrefix(key, auditPrefix), 10, 64)
	if err != nil || seq <= 0 || !strings.HasPrefix(key, auditPrefix) {
		return 0, fmt.Errorf("audit key %q is not %s<positive sequence number>", key, auditPrefix)
	}
	return seq, nil
}

// rawJSON returns v as a JSON value: v itself when it is valid JSON, a JSON
// string otherwise (so an audit entry stays valid JSON even when it records
// the removal of garbage), null when v is nil.
func rawJSON(v []byte) json.RawMessage {
	if v == nil {
		return nil
	}
	if json.Valid(v) {
		return json.RawMessage(v)
	}
	s, _ := json.Marshal(string(v))
	return s
}
