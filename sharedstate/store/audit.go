package store

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Audit actions.
const (
	ActionPolicyPut     = "policy.put"
	ActionPolicyDelete  = "policy.delete"
	ActionOverrideSet   = "override.set"
	ActionOverrideClear = "override.clear"
)

// auditRecord is the JSON value of an audit/<seq> key.
type auditRecord struct {
	Actor      string          `json:"actor"`
	Action     string          `json:"action"`
	Dependency string          `json:"dependency"`
	Before     json.RawMessage `json:"before"` // the previous value; null if none
	After      json.RawMessage `json:"after"`  // the new value; null after a delete
	At         time.Time       `json:"at"`
}

// AuditEntry is one recorded change.
type AuditEntry struct {
	// Seq is the entry's sequence number (the key is audit/<Seq> padded to 20
	// digits). Sequence numbers grow by one per change, in commit order.
	Seq int64
	// Revision is the etcd revision of the change (and of this entry,
	// written in the same transaction).
	Revision int64

	Actor      string
	Action     string // one of the Action constants
	Dependency string // a dependency name, or sharedstate.DefaultPolicyName
	Before     json.RawMessage
	After      json.RawMessage
	At         time.Time // the writer's clock at the change
}

// AuditQuery selects audit entries.
type AuditQuery struct {
	// Dependency keeps only entries about this dependency (optional,
	// default all).
	Dependency string
	// Limit is the maximum number of entries returned (optional, default
	// 100).
	Limit int
	// BeforeSeq keeps only entries with Seq < BeforeSeq, for paging: pass
	// the last Seq of the previous page (optional, default: from the newest).
	BeforeSeq int64
}

// DefaultAuditLimit is the AuditQuery.Limit used when it is zero.
const DefaultAuditLimit = 100

// auditPage is how many audit keys one range request reads.
const auditPage = 256

// ListAudit returns audit entries, newest first. With a Dependency filter it
// reads that dependency's index (audit-index/<dependency>/), one entry per
// match, never the rest of the trail. An entry that does not decode is
// skipped and reported in the returned error (as *InvalidValueError,
// joined) alongside the valid entries.
func (s *Store) ListAudit(ctx context.Context, q AuditQuery) ([]AuditEntry, error) {
	if q.Limit < 0 {
		return nil, fmt.Errorf("store: list audit: negative limit %d", q.Limit)
	}
	if q.Limit == 0 {
		q.Limit = DefaultAuditLimit
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()

	prefix := s.prefix + auditDir
	oldest := int64(0) // index entries below the oldest audit entry were trimmed
	if q.Dependency != "" {
		prefix = s.auditIndexPrefix(q.Dependency)
		resp, err := s.cli.Get(ctx, s.prefix+auditDir, append(clientv3.WithFirstKey(), clientv3.WithKeysOnly())...)
		if err != nil {
			return nil, fmt.Errorf("store: list audit: %w", err)
		}
		if len(resp.Kvs) == 0 {
			return nil, nil
		}
		if oldest, err = parseAuditSeq(string(resp.Kvs[0].Key), s.prefix+auditDir); err != nil {
			return nil, fmt.Errorf("store: list audit: %w", err)
		}
	}
	end := prefixEnd(prefix)
	if q.BeforeSeq > 0 {
		end = prefix + fmt.Sprintf("%020d", q.BeforeSeq)
	}
	var (
		out     []AuditEntry
		invalid []error
		rev     int64 // all pages read at the revision of the first
	)
	for len(out) < q.Limit {
		opts := []clientv3.OpOption{
			clientv3.WithRange(end),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend),
			clientv3.WithLimit(int64(min(auditPage, q.Limit-len(out)+1))),
		}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := s.cli.Get(ctx, prefix, opts...)
		if err != nil {
			return nil, fmt.Errorf("store: list audit: %w", err)
		}
		rev = resp.Header.Revision
		done := false
		for _, kv := range resp.Kvs {
			seq, err := parseAuditSeq(string(kv.Key), prefix)
			if err == nil && seq < oldest {
				done = true // trimmed: the index is cleaned after the trail
				break
			}
			var rec auditRecord
			if err == nil {
				err = json.Unmarshal(kv.Value, &rec)
			}
			if err != nil {
				invalid = append(invalid, invalidValue(kv, err))
				continue
			}
			if q.Dependency != "" && rec.Dependency != q.Dependency {
				continue
			}
			out = append(out, AuditEntry{
				Seq: seq, Revision: kv.CreateRevision,
				Actor: rec.Actor, Action: rec.Action, Dependency: rec.Dependency,
				Before: rec.Before, After: rec.After, At: rec.At,
			})
			if len(out) == q.Limit {
				break
			}
		}
		if done || !resp.More || len(resp.Kvs) == 0 {
			break
		}
		end = string(resp.Kvs[len(resp.Kvs)-1].Key) // exclusive: continue below it
	}
	return out, joinInvalid(invalid)
}

// auditIndexPrefix is the index directory of dependency's audit entries.
// The name is path-escaped so that "a" and "a/b" have disjoint ranges.
func (s *Store) auditIndexPrefix(dependency string) string {
	return s.prefix + auditIndexDir + url.PathEscape(dependency) + "/"
}

// auditIndexKey is the index key of dependency's entry seq.
func (s *Store) auditIndexKey(dependency string, seq int64) string {
	return s.auditIndexPrefix(dependency) + fmt.Sprintf("%020d", seq)
}
