package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/fusebox-dev/fusebox/sharedstate/ctxtime"
)

// ActionAuditTrim is the action of the summary entry a trim leaves.
const ActionAuditTrim = "audit.trim"

// AuditRetention says which audit entries TrimAuditRetention deletes: those
// older than MaxAge (by their time), and the oldest beyond MaxEntries. A
// zero field sets no limit.
type AuditRetention struct {
	MaxAge     time.Duration
	MaxEntries int
}

// Enabled reports whether r limits anything.
func (r AuditRetention) Enabled() bool { return r.MaxAge > 0 || r.MaxEntries > 0 }

// AuditTrim is what one trim did: entries FromSeq..ToSeq deleted (Deleted
// of them) and recorded as entry SummarySeq. Deleted 0: nothing was due.
type AuditTrim struct {
	Deleted        int64
	FromSeq, ToSeq int64
	SummarySeq     int64
	MaxAge         time.Duration
	MaxEntries     int
}

// auditTrimSummary is the After of an audit.trim entry.
type auditTrimSummary struct {
	Deleted    int64  `json:"deleted"`
	FromSeq    int64  `json:"fromSeq"`
	ToSeq      int64  `json:"toSeq"`
	MaxAge     string `json:"maxAge,omitempty"`
	MaxEntries int    `json:"maxEntries,omitempty"`
}

// trimChunk is how many audit keys one delete request removes.
const trimChunk = 2000

// MinAuditMaxEntries is the smallest AuditRetention.MaxEntries accepted.
const MinAuditMaxEntries = 2

// TrimAuditRetention deletes the audit entries r no longer keeps, oldest
// first, and in the same transaction appends one summary entry (action
// audit.trim, by actor, After {"deleted","fromSeq","toSeq",…}): the trail
// never loses entries without saying so. The newest entry is always kept.
// It reads a few entries (a binary search for the age cut), not the trail,
// and one key per dependency to clean the index. Run it from one writer at a time
// (RunAuditRetention elects one); a concurrent change makes it retry.
func (s *Store) TrimAuditRetention(ctx context.Context, r AuditRetention, actor string) (AuditTrim, error) {
	res := AuditTrim{MaxAge: r.MaxAge, MaxEntries: r.MaxEntries}
	if r.MaxAge < 0 || (r.MaxEntries != 0 && r.MaxEntries < MinAuditMaxEntries) {
		return res, fmt.Errorf("store: trim audit: max age %v must not be negative, max entries %d must be 0 or at least %d",
			r.MaxAge, r.MaxEntries, MinAuditMaxEntries)
	}
	if actor == "" {
		return res, errors.New("store: trim audit: actor is required")
	}
	if !r.Enabled() {
		return res, nil
	}
	auditPrefix := s.prefix + auditDir
	for attempt := 1; ; attempt++ {
		cctx, cancel := s.ctx(ctx)
		read, err := s.readTxn(cctx,
			clientv3.OpGet(auditPrefix, append(clientv3.WithFirstKey(), clientv3.WithKeysOnly())...),
			clientv3.OpGet(auditPrefix, append(clientv3.WithLastKey(), clientv3.WithKeysOnly())...),
		)
		cancel()
		if err != nil {
			return res, fmt.Errorf("store: trim audit: %w", err)
		}
		first, last := read.Responses[0].GetResponseRange().Kvs, read.Responses[1].GetResponseRange().Kvs
		if len(first) == 0 || len(last) == 0 {
			return res, nil
		}
		oldest, err1 := parseAuditSeq(string(first[0].Key), auditPrefix)
		newest, err2 := parseAuditSeq(string(last[0].Key), auditPrefix)
		if err := errors.Join(err1, err2); err != nil {
			return res, fmt.Errorf("store: trim audit: %w", err)
		}
		// Keep seqs >= cut; the summary (newest+1) counts towards MaxEntries,
		// and a trail at MaxEntries is left alone (no summary churn).
		cut := oldest
		if r.MaxEntries > 0 && newest-oldest+1 > int64(r.MaxEntries) {
			cut = max(cut, newest-int64(r.MaxEntries)+2)
		}
		if r.MaxAge > 0 {
			ageCut, err := s.auditAgeCut(ctx, read.Header.Revision, max(cut, oldest), newest, s.now().Add(-r.MaxAge))
			if err != nil {
				return res, err
			}
			cut = max(cut, ageCut)
		}
		cut = min(cut, newest) // the newest stays
		if cut <= oldest {
			return res, nil
		}
		sum := auditTrimSummary{Deleted: cut - oldest, FromSeq: oldest, ToSeq: cut - 1, MaxEntries: r.MaxEntries}
		if r.MaxAge > 0 {
			sum.MaxAge = r.MaxAge.String()
		}
		after, _ := json.Marshal(sum)
		entry, err := json.Marshal(auditRecord{Actor: actor, Action: ActionAuditTrim, After: after, At: s.now()})
		if err != nil {
			return res, fmt.Errorf("store: trim audit: %w", err)
		}
		// The summary goes with the first chunk of deletes; the rest follow
		// in chunks (one transaction deleting tens of thousands of keys
		// outlasts etcd's request timeout). A trim cut short is finished
		// by the next one.
		summaryKey := s.AuditKey(newest + 1)
		chunkEnd := min(cut, oldest+trimChunk)
		cctx, cancel = s.ctx(ctx)
		resp, err := s.cli.Txn(cctx).If(
			clientv3.Compare(clientv3.CreateRevision(summaryKey), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(s.AuditKey(oldest)), "!=", 0),
		).Then(
			clientv3.OpDelete(s.AuditKey(oldest), clientv3.WithRange(s.AuditKey(chunkEnd))),
			clientv3.OpPut(summaryKey, string(entry)),
		).Commit()
		cancel()
		if err != nil {
			return res, fmt.Errorf("store: trim audit: %w", err)
		}
		if resp.Succeeded {
			res.Deleted = resp.Responses[0].GetResponseDeleteRange().Deleted
			res.FromSeq, res.ToSeq, res.SummarySeq = oldest, cut-1, newest+1
			for from := chunkEnd; from < cut; from += trimChunk {
				cctx, cancel := s.ctx(ctx)
				d, err := s.cli.Delete(cctx, s.AuditKey(from), clientv3.WithRange(s.AuditKey(min(cut, from+trimChunk))))
				cancel()
				if err != nil {
					return res, fmt.Errorf("store: trim audit: %w", err)
				}
				res.Deleted += d.Deleted
			}
			return res, s.trimAuditIndex(ctx, cut)
		}
		if attempt == maxWriteAttempts {
			return res, fmt.Errorf("store: trim audit: lost %d races in a row: %w", attempt, ErrConflict)
		}
	}
}

// auditAgeCut returns the first seq in [from, newest] whose entry is not
// older than cutoff (newest+1 when all are), by binary search over the
// sequence numbers at rev: entries' times grow with their sequence numbers
// (up to the clock skew between writers, which shifts the cut as much).
// A missing or undecodable entry counts as old.
func (s *Store) auditAgeCut(ctx context.Context, rev, from, newest int64, cutoff time.Time) (int64, error) {
	lo, hi := from, newest+1 // the answer is in [lo, hi]
	for lo < hi {
		mid := lo + (hi-lo)/2
		cctx, cancel := s.ctx(ctx)
		resp, err := s.cli.Get(cctx, s.AuditKey(mid), clientv3.WithRev(rev))
		cancel()
		if err != nil {
			return 0, fmt.Errorf("store: trim audit: %w", err)
		}
		var rec auditRecord
		if len(resp.Kvs) > 0 && json.Unmarshal(resp.Kvs[0].Value, &rec) == nil && !rec.At.Before(cutoff) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, nil
}

// trimAuditIndex deletes the index entries below cut: one range delete per
// dependency directory.
func (s *Store) trimAuditIndex(ctx context.Context, cut int64) error {
	root := s.prefix + auditIndexDir
	start := root
	cutKey := fmt.Sprintf("%020d", cut)
	for {
		cctx, cancel := s.ctx(ctx)
		resp, err := s.cli.Get(cctx, start, clientv3.WithRange(prefixEnd(root)), clientv3.WithKeysOnly(), clientv3.WithLimit(1))
		cancel()
		if err != nil {
			return fmt.Errorf("store: trim audit index: %w", err)
		}
		if len(resp.Kvs) == 0 {
			return nil
		}
		dir, _, ok := strings.Cut(strings.TrimPrefix(string(resp.Kvs[0].Key), root), "/")
		if !ok {
			start = string(resp.Kvs[0].Key) + "\x00"
			continue
		}
		dirPrefix := root + dir + "/"
		cctx, cancel = s.ctx(ctx)
		_, err = s.cli.Delete(cctx, dirPrefix, clientv3.WithRange(dirPrefix+cutKey))
		cancel()
		if err != nil {
			return fmt.Errorf("store: trim audit index: %w", err)
		}
		start = prefixEnd(dirPrefix)
	}
}

// AuditRetentionConfig configures RunAuditRetention.
type AuditRetentionConfig struct {
	Retention AuditRetention
	// Every is the interval between trims (required, positive).
	Every time.Duration
	// Candidate names this writer in the election and is the summary
	// entries' actor (required).
	Candidate string
	// OnTrim, when set, is called after each trim with its result.
	OnTrim func(AuditTrim, error)
	// SessionTTL is the election lease's TTL in seconds (optional, default
	// 10): a leader that dies is replaced within about that long.
	SessionTTL int
}

// RunAuditRetention trims the audit trail every c.Every on one writer at a
// time: the writers campaign in an etcd election (prefix elections/audit-trim)
// and only the leader trims. It returns when ctx is done. The first trim
// runs as soon as this writer leads.
func (s *Store) RunAuditRetention(ctx context.Context, c AuditRetentionConfig) error {
	if c.Every <= 0 || c.Candidate == "" || !c.Retention.Enabled() {
		return fmt.Errorf("store: audit retention: need a positive interval (%v), a candidate name (%q) and a limit", c.Every, c.Candidate)
	}
	ttl := c.SessionTTL
	if ttl <= 0 {
		ttl = 10
	}
	for ctx.Err() == nil {
		s.leadAndTrim(ctx, c, ttl)
		ctxtime.Sleep(ctx, time.Second)
	}
	return nil
}

// leadAndTrim campaigns and, once leader, trims every c.Every until the
// session or ctx ends.
func (s *Store) leadAndTrim(ctx context.Context, c AuditRetentionConfig, ttl int) {
	sess, err := concurrency.NewSession(s.cli, concurrency.WithTTL(ttl), concurrency.WithContext(ctx))
	if err != nil {
		return
	}
	defer sess.Close()
	el := concurrency.NewElection(sess, s.prefix+electionsDir+"audit-trim")
	if err := el.Campaign(ctx, c.Candidate); err != nil {
		return
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = el.Resign(rctx)
		cancel()
	}()
	// The session's context ends with ctx and with the session.
	for sess.Ctx().Err() == nil {
		res, err := s.TrimAuditRetention(ctx, c.Retention, c.Candidate)
		if c.OnTrim != nil {
			c.OnTrim(res, err)
		}
		ctxtime.Sleep(sess.Ctx(), c.Every)
	}
}
