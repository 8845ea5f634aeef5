package scale

import (
	"context"
	"time"
)

// QuietWait bounds how long WaitQuiet waits.
const QuietWait = 10 * time.Minute

// QuietResult is what WaitQuiet measured: memberlist's dissemination of
// the membership changes before it (the fleet's start, a heal, restarts).
type QuietResult struct {
	// After is how long it took until the fleet sent fewer than one
	// membership message (alive, suspect, dead) per 10 agents in a second;
	// Quiet is false when that did not happen within QuietWait.
	After time.Duration
	Quiet bool
	// PeakBytesPerAgent is the largest rate of membership gossip bytes per
	// agent over a second meanwhile; MembershipBytesPerAgent is what each
	// agent sent of them, on average, over the whole wait.
	PeakBytesPerAgent, MembershipBytesPerAgent float64
}

// WaitQuiet waits, with no client traffic, until memberlist has finished
// disseminating the fleet's membership changes: every alive, suspect and
// dead message is retransmitted RetransmitMult × log10(N+1) times by
// every member that learns it, in the room of memberlist's gossip packets
// (--gossip-nodes of ~1.4 KB per gossip interval), so a change of every
// member (a start, a heal) keeps those packets full for a time that grows
// with N.
// Scenarios (b) and (c) measure the steady state after it.
func (f *Fleet) WaitQuiet(ctx context.Context, limit time.Duration) (QuietResult, error) {
	var r QuietResult
	n := float64(f.Size())
	start := time.Now()
	first := f.Net().Stats()
	prev := first
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-t.C:
		}
		s := f.Net().Stats()
		d := s.Sub(prev)
		prev = s
		r.After = time.Since(start)
		r.PeakBytesPerAgent = max(r.PeakBytesPerAgent, float64(d.MembershipBytes)/n)
		r.MembershipBytesPerAgent = float64(s.Sub(first).MembershipBytes) / n / r.After.Seconds()
		if float64(d.MembershipMessages) < n/10 {
			r.Quiet = true
			return r, nil
		}
		if r.After >= limit {
			return r, nil
		}
		if f.cfg.Trace != nil && int(r.After.Seconds())%10 == 0 {
			f.cfg.Trace("quiet: +%v: %.1f membership messages per agent in the last second", r.After, float64(d.MembershipMessages)/n)
		}
	}
}
