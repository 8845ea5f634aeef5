package clientlib

import (
	"context"
	"time"
)

// Hedging (policy retry.hedge): for an Idempotent or IdempotentWithKey
// call, when the first attempt has not answered after the hedge delay,
// another attempt starts next to it (same idempotency key), up to maxHedges
// of them and never more than maxAttempts attempts in all; the first
// success wins and the others are cancelled. Every hedge takes one retry
// from the fleet retry budget (no token, no hedge) and, when the policy
// sets a concurrency limit, a slot of its own (no slot, no hedge).

// hedgeRound is what a hedged first round came to.
type hedgeRound struct {
	err      error          // nil: an attempt succeeded
	cl       Classification // of the last failure counted
	attempts int            // attempts started (the first included)
}

// hedgeCall is the fixed part of one hedged call.
type hedgeCall struct {
	fn             func(context.Context, Attempt) error
	key, owner     string
	perAttempt     time.Duration
	parentDeadline time.Time // zero: none
	delay          time.Duration
	maxHedges      int
	maxAttempts    int
	classify       Classifier
	slow           time.Duration
}

type hedgeDone struct {
	err     error
	own     bool // the attempt's own timeout fired
	elapsed time.Duration
	slot    bool
}

// runHedged runs the first round of a call with hedges. It counts every
// attempt's outcome (a cancelled loser's counts as nothing, like any
// abandoned attempt) and returns once every attempt it started has
// returned: attempt functions must return when their context is cancelled.
func (st *depState) runHedged(ctx context.Context, sp *stripe, h hedgeCall) hedgeRound {
	c := st.c
	rctx, cancelAll := context.WithCancel(ctx)
	defer cancelAll()
	results := make(chan hedgeDone, 1+h.maxHedges)
	start := func(n int, slot bool) {
		a := Attempt{Number: n, IdempotencyKey: h.key, owner: h.owner}
		go func() {
			actx, cancel := rctx, context.CancelFunc(func() {})
			if h.perAttempt > 0 {
				actx, cancel = context.WithTimeout(rctx, h.perAttempt)
				a.Deadline, _ = actx.Deadline()
			} else {
				a.Deadline = h.parentDeadline
			}
			t0 := c.mono()
			err := h.fn(actx, a)
			own := err != nil && actx.Err() == context.DeadlineExceeded && rctx.Err() == nil
			cancel()
			results <- hedgeDone{err: err, own: own, elapsed: c.mono() - t0, slot: slot}
		}()
	}
	start(1, false) // the call's own slot (run holds it) covers the first attempt
	var (
		res      = hedgeRound{attempts: 1}
		inFlight = 1
		hedges   = 0
		settled  bool // a success, or a failure that ends the call: the rest are losers
	)
	timer := time.NewTimer(h.delay)
	defer timer.Stop()
	timerC := timer.C
	for inFlight > 0 {
		select {
		case d := <-results:
			inFlight--
			if d.slot {
				st.slots.release(sp)
			}
			if settled {
				continue // cancelled by the winner: counts as nothing
			}
			slow := h.slow > 0 && d.elapsed >= h.slow
			if cerr := ctx.Err(); cerr != nil {
				// The caller gave up: as in run, a passed deadline is the
				// dependency's failure to answer in time.
				if d.err != nil && cerr == context.DeadlineExceeded {
					sp.record(true, slow)
				}
				if d.err != nil {
					res.err = d.err
				}
				continue
			}
			if d.err == nil {
				sp.record(false, slow)
				res.err, settled = nil, true
				cancelAll()
				continue
			}
			cl := Classification{Retryable: true, Failure: true}
			if d.own {
				slow = true
			} else {
				cl = h.classify(d.err)
			}
			if !cl.NotCounted {
				sp.record(cl.Failure, slow)
			}
			res.err, res.cl = d.err, cl
			if !cl.Retryable {
				settled = true
				cancelAll()
			}
		case <-timerC:
			timerC = nil
			if settled || hedges >= h.maxHedges || res.attempts >= h.maxAttempts || ctx.Err() != nil {
				continue
			}
			slot := false
			if limit := st.dec.Load().limit; limit > 0 {
				if !st.tryAcquire(sp, limit) {
					continue // no slot, no hedge
				}
				slot = true
			}
			if _, err := st.admitRetry(ctx, sp); err != nil {
				if slot {
					st.slots.release(sp)
				}
				continue // no token, no hedge
			}
			hedges++
			res.attempts++
			inFlight++
			start(res.attempts, slot)
			if hedges < h.maxHedges && res.attempts < h.maxAttempts {
				timer.Reset(h.delay)
				timerC = timer.C
			}
		}
	}
	if !settled && res.err == nil { // every attempt was cut short by the caller
		res.err = ctx.Err()
	}
	return res
}
