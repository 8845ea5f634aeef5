package clientlib

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate"
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

// throttled returns the refusal of a first attempt by adaptive throttling
// or by the ramp after a close (the ramp's when the draw falls below its
// part of the probability, as sharedstate.Snapshot.DecideFirstAt names
// it), nil when it is admitted or the caller asked the agent (strict): one
// random draw, no allocation. In shadow mode a would-be refusal is counted
// (fusebox_client_shadow_throttled_total).
func (st *depState) throttled(dec *decision, strict bool) *RejectedError {
	switch {
	case strict:
	case dec.throttleCut != 0:
		if u := st.c.random() >> 11; u < dec.rampCut {
			return st.rej[sharedstate.ReasonRamp]
		} else if u < dec.throttleCut {
			return st.rej[sharedstate.ReasonThrottled]
		}
	case dec.shadowCut != 0 && st.c.random()>>11 < dec.shadowCut:
		st.rare.shadowThrottled.Add(1)
	}
	return nil
}

// slots is a dependency's semaphore for the concurrency limit: exact (an
// admitted call never makes more than the limit's slots held) and striped,
// so that calls on different cores rarely write the same cache line.
//
// A slot is a token. The tokens issued for the current limit are in the
// shared pool, in the stripes' free counts, or with calls (held, or being
// moved):
//
//	issued = pool + Σ stripe.free + held
//
// A call takes a token from its own stripe's free count; failing that, a
// batch from the pool (one for itself, the rest into its stripe); failing
// that, one from any other stripe. It is refused (ErrConcurrencyLimit) only
// when all three found none (a token found while the pool is in debt repays
// the debt, see below, and the call looks on). A release puts the token back
// in its stripe, or in the pool once the stripe keeps a batch already (so
// idle stripes do not hoard slots). A call and its release on one core so
// write only that core's stripe, and read the pool's cache line, which only
// batches, overflowing stripes and debts write.
//
// The limit is read from the decision at each acquire: when it differs from
// issued, the tokens are re-issued under mu for the newest decision's limit
// (the pool gains or loses the difference, then takes back every stripe's
// free tokens). A shrink never revokes a held slot: the pool goes negative,
// a debt that releases repay before they free anything.
//
// Why it is exact: tokens are only moved, never made but by re-issuing, and
// free counts never go below 0, so at any moment at most issued − pool
// calls hold a token. A call that took one is admitted only if it then sees
// pool ≥ 0, when at most issued calls hold one, itself included; otherwise
// it repays the debt with its token and looks for another. (A debt and free
// tokens meet when a release saw no debt just before a shrink and put its
// token in its stripe after the shrink took the stripes' tokens back.) So
// after a shrink new calls are admitted only once fewer than the new limit
// are held.
//
// Without a limit calls take no slot; slots held from before are released
// into the old tokens, which a limit set again re-issues (InFlight keeps
// counting them until they are released).
type slots struct {
	// Read-mostly: written only under mu, or by waiting calls.
	issued  atomic.Int64 // the limit the tokens were issued for
	batch   atomic.Int64 // most tokens a stripe keeps and takes from the pool at once
	waiters atomic.Int32
	stripes []stripe
	freed   chan struct{} // cap 1: a slot was released while someone waited

	_    [64]byte
	pool atomic.Int64 // negative: a shrink's debt, repaid by releases
	_    [64]byte

	mu sync.Mutex // serializes re-issuing
}

// takeOne takes one token from a free count, if it has any.
func takeOne(free *atomic.Int64) bool {
	for {
		n := free.Load()
		if n <= 0 {
			return false
		}
		if free.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// tryAcquire takes a slot for a call counted on sp if the tokens issued for
// the current limit leave one (limit is the caller's decision's: when it
// differs from what the tokens were issued for, they are re-issued for the
// newest decision's limit first). Never more than the limit are held once a
// call is admitted (see slots). Like any semaphore it may refuse while a
// slot is being freed: a release onto a stripe its scan has passed, or a
// batch another call is moving from the pool to its stripe.
func (st *depState) tryAcquire(sp *stripe, limit int64) bool {
	s := &st.slots
	if limit != s.issued.Load() {
		st.reissue()
	}
	for {
		if !takeOne(&sp.free) && !s.takeBatch(sp) && !s.steal(sp) {
			return false
		}
		// The token is the call's unless the pool is in debt: then it
		// repays one slot held beyond a limit that shrank, and the call
		// looks for another.
		if s.pool.Load() >= 0 {
			return true
		}
		s.pool.Add(1)
	}
}

// steal takes a token from a stripe other than sp.
func (s *slots) steal(sp *stripe) bool {
	for i := range s.stripes {
		if o := &s.stripes[i]; o != sp && takeOne(&o.free) {
			return true
		}
	}
	return false
}

// takeBatch takes up to a batch of tokens from the pool, one for the caller
// and the rest into sp.
func (s *slots) takeBatch(sp *stripe) bool {
	b := s.batch.Load()
	for {
		p := s.pool.Load()
		if p <= 0 {
			return false
		}
		n := min(p, b)
		if s.pool.CompareAndSwap(p, p-n) {
			if n > 1 {
				sp.free.Add(n - 1)
			}
			return true
		}
	}
}

// reissue makes the tokens match the newest decision's limit (unless it
// sets none: the tokens then stay as they are for the held slots to come
// back to). The pool's adjustment is the moment the new limit holds.
func (st *depState) reissue() {
	s := &st.slots
	s.mu.Lock()
	defer s.mu.Unlock()
	limit, old := st.dec.Load().limit, s.issued.Load()
	if limit <= 0 || limit == old {
		return
	}
	s.pool.Add(limit - old)
	for i := range s.stripes {
		if n := s.stripes[i].free.Swap(0); n != 0 {
			s.pool.Add(n)
		}
	}
	s.batch.Store(max(1, limit/int64(4*len(s.stripes))))
	s.issued.Store(limit)
	s.wake() // a larger limit may have made room
}

// release gives back a slot taken with sp.
func (s *slots) release(sp *stripe) {
	switch {
	case s.pool.Load() < 0: // repay a shrink's debt
		s.pool.Add(1)
	case sp.free.Load() >= s.batch.Load(): // sp keeps enough
		s.pool.Add(1)
	default:
		sp.free.Add(1)
	}
	s.wake()
}

// wake tells a waiting call, if any, that a slot may be free.
func (s *slots) wake() {
	if s.waiters.Load() > 0 {
		select {
		case s.freed <- struct{}{}:
		default:
		}
	}
}

// inFlight is how many slots calls hold: exact while no call is starting or
// ending, else off by the calls doing so.
func (s *slots) inFlight() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var free int64
	for i := range s.stripes {
		free += s.stripes[i].free.Load()
	}
	return max(s.issued.Load()-s.pool.Load()-free, 0)
}

// acquireSlot takes a slot under the current decision's limit (true at once
// without a limit, and then holding none: held reports whether one was
// taken), waiting at most wait (and not past ctx) for one to be freed. The
// slot is released with st.slots.release(sp).
func (st *depState) acquireSlot(ctx context.Context, sp *stripe, wait time.Duration) (held bool, err error) {
	limit := st.dec.Load().limit
	if limit <= 0 {
		return false, nil
	}
	if st.tryAcquire(sp, limit) {
		return true, nil
	}
	if wait <= 0 {
		return false, st.rejLimit
	}
	s := &st.slots
	s.waiters.Add(1)
	defer s.waiters.Add(-1)
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		// Re-read the limit: a new share may have made room.
		if limit = st.dec.Load().limit; limit <= 0 {
			return false, nil
		}
		if st.tryAcquire(sp, limit) {
			// Pass the wake-up on if there is room for another waiter.
			if s.waiters.Load() > 1 && s.inFlight() < limit {
				s.wake()
			}
			return true, nil
		}
		select {
		case <-s.freed:
		case <-t.C:
			return false, st.rejLimit
		case <-ctx.Done():
			return false, st.rejLimit
		}
	}
}

// InFlight returns how many of this client's calls to the dependency hold a
// concurrency slot now (0 while the policy sets no limit, but for calls
// still holding one from before).
func (d *Dependency) InFlight() int64 { return d.st.slots.inFlight() }

// ConcurrencyLimit returns this process's share of the dependency's
// fleet-wide concurrency limit as the agent last pushed it (0: no limit).
func (d *Dependency) ConcurrencyLimit() int64 { return d.st.dec.Load().limit }
