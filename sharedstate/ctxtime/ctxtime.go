// Package ctxtime holds the waits on real time that end when a context
// does: the daemons' retry backoffs and periodic loops, the scale runs' and
// the demo's pauses. Decisions never read it (they run on an injected
// sharedstate.Clock). It imports the standard library only.
//
//	if !ctxtime.Sleep(ctx, backoff) {
//		return ctx.Err()
//	}
//	ctxtime.Every(ctx, 100*time.Millisecond, tick) // until ctx is done
package ctxtime

import (
	"context"
	"time"
)

// Sleep waits d or until ctx is done; it reports whether d passed (false:
// ctx is done). d <= 0 passes at once, unless ctx is already done (then
// either may be reported).
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Every calls fn every interval (the first time one interval from now)
// until ctx is done, then returns. fn runs on the caller's goroutine, one
// call at a time; ticks that pass while fn runs are dropped
// (time.Ticker). interval must be > 0.
func Every(ctx context.Context, interval time.Duration, fn func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}
