package clientlib

import (
	"context"
	"sync/atomic"
	"time"
)

// Adaptive throttling and the concurrency limit, as clientlib applies them
// from the pushed snapshot (see the "throttle" and "concurrency" policy
// sections).

// throttleCut converts a throttle probability into the cut-off a 53-bit
// random draw is compared with.
func throttleCut(p float64) uint64 {
	if !(p > 0) {
		return 0
	}
	return uint64(min(p, 1) * (1 << 53))
}

// throttled reports whether a first attempt is refused by adaptive
// throttling: one random draw, no allocation.
// In shadow mode a would-be refusal is counted (fusebox_client_shadow_throttled_total).
func (st *depState) throttled(dec *decision) bool {
	if dec.throttleCut != 0 {
		return st.c.random()>>11 < dec.throttleCut
	}
	if dec.shadowCut != 0 && st.c.random()>>11 < dec.shadowCut {
		st.rare.shadowThrottled.Add(1)
	}
	return false
}

// slots is a dependency's non-blocking semaphore for the concurrency limit.
// Its size is the decision's limit, read at each acquire, so a new share
// takes effect at once; calls admitted before a limit existed hold no slot.
type slots struct {
	inFlight atomic.Int64
	waiters  atomic.Int32
	freed    chan struct{} // cap 1: a slot was released while someone waited
}

// tryAcquire takes a slot if fewer than limit are held: one atomic add
// (no compare-and-swap loop, which contends worse). Never more than limit
// are held; while calls race for the last slot, one of them may be refused
// although another's refusal frees the slot an instant later.
func (s *slots) tryAcquire(limit int64) bool {
	if s.inFlight.Add(1) <= limit {
		return true
	}
	s.release()
	return false
}

func (s *slots) release() {
	s.inFlight.Add(-1)
	if s.waiters.Load() > 0 {
		select {
		case s.freed <- struct{}{}:
		default:
		}
	}
}

// acquireSlot takes a slot under the current decision's limit (true at once
// without a limit, and then holding none: held reports whether one was
// taken), waiting at most wait (and not past ctx) for one to be freed.
func (st *depState) acquireSlot(ctx context.Context, wait time.Duration) (held bool, err error) {
	limit := st.dec.Load().limit
	if limit <= 0 {
		return false, nil
	}
	if st.slots.tryAcquire(limit) {
		return true, nil
	}
	if wait <= 0 {
		return false, st.rejLimit
	}
	s := &st.slots
	s.waiters.Add(1)
	defer s.waiters.Add(-1)
	t := st.c.clock.NewTimer(wait)
	defer t.Stop()
	for {
		// Re-read the limit: a new share may have made room.
		if limit = st.dec.Load().limit; limit <= 0 {
			return false, nil
		}
		if s.tryAcquire(limit) {
			// Pass the wake-up on if there is room for another waiter.
			if s.inFlight.Load() < limit && s.waiters.Load() > 1 {
				select {
				case s.freed <- struct{}{}:
				default:
				}
			}
			return true, nil
		}
		select {
		case <-s.freed:
		case <-t.C():
			return false, st.rejLimit
		case <-ctx.Done():
			return false, st.rejLimit
		}
	}
}

// InFlight returns how many of this client's calls to the dependency hold a
// concurrency slot now (0 while the policy sets no limit).
func (d *Dependency) InFlight() int64 { return d.st.slots.inFlight.Load() }

// ConcurrencyLimit returns this process's share of the dependency's
// fleet-wide concurrency limit as the agent last pushed it (0: no limit).
func (d *Dependency) ConcurrencyLimit() int64 { return d.st.dec.Load().limit }
