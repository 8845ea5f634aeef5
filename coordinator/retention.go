package coordinator

import (
	"context"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

// defaultAuditTrimEvery is how often the elected coordinator trims.
const defaultAuditTrimEvery = 10 * time.Minute

// startAuditRetention runs the audit trimming loop: the coordinators
// sharing an etcd elect one, which trims every interval, until Close.
func (c *Coordinator) startAuditRetention() {
	r := store.AuditRetention{MaxAge: c.cfg.AuditRetention, MaxEntries: c.cfg.AuditMaxEntries}
	if !r.Enabled() {
		return
	}
	every := c.opts.auditTrim
	if every <= 0 {
		every = defaultAuditTrimEvery
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.goBackground("", func() error {
		<-c.stop
		cancel()
		return nil
	})
	c.goBackground("", func() error {
		return c.store.RunAuditRetention(ctx, store.AuditRetentionConfig{
			Retention: r, Every: every, Candidate: "coordinator " + c.cfg.Name,
			OnTrim: func(t store.AuditTrim, err error) {
				switch {
				case err != nil:
					c.log.Warn("audit trim failed", "err", err)
				case t.Deleted > 0:
					c.log.Info("audit trimmed", "deleted", t.Deleted, "from_seq", t.FromSeq, "to_seq", t.ToSeq, "summary_seq", t.SummarySeq)
				}
			},
		})
	})
}
