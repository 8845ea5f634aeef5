package clientlib

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate"
)

// AttemptKind says what Allow is asked about.
type AttemptKind uint8

const (
	// First is the first attempt of a caller's request: decided in process.
	First AttemptKind = iota
	// Retry is a later attempt: it takes one retry from the budget.
	Retry
)

// Outcome is what a two-step attempt came to, passed to the done function
// Allow returns. Slowness is measured by done itself.
type Outcome uint8

const (
	// Success: the dependency answered well (or answered a caller error,
	// such as a 404, that says nothing against its health).
	Success Outcome = iota
	// Failure counts against the breaker.
	Failure
	// Timeout: the attempt's own timeout fired (a slow failure).
	Timeout
	// Abandoned: the caller gave up (cancelled); nothing is counted but the
	// attempt itself.
	Abandoned
)

// OutcomeOf maps an attempt's error to an Outcome with DefaultClassifier:
// nil is Success, context.Canceled Abandoned, context.DeadlineExceeded
// Timeout, any other error Failure or Success as the classifier judges it.
func OutcomeOf(err error) Outcome {
	switch {
	case err == nil:
		return Success
	case errors.Is(err, context.Canceled):
		return Abandoned
	case errors.Is(err, context.DeadlineExceeded):
		return Timeout
	case DefaultClassifier(err).Failure:
		return Failure
	}
	return Success
}

// Allow is the two-step form, for calls that cannot be wrapped in a
// closure (streams, callbacks): it decides one attempt of the given kind
// and returns a done function to call exactly once with its outcome.
//
//	done, err := dep.Allow(clientlib.First)
//	if err != nil {
//		return err // ErrOpen, ErrForcedOpen, ErrThrottled, ErrConcurrencyLimit (or ErrBudgetExhausted for a Retry)
//	}
//	err = stream.Send(msg)
//	done(clientlib.OutcomeOf(err))
//
// A First attempt on a closed breaker is decided in process and allocates
// nothing, throttled or refused by the concurrency limit included (every
// attempt Allow admits holds a concurrency slot until done, when the policy
// sets a limit). A Retry asks the retry budget (the agent, at most
// Config.AgentWait, else the local budget); a half-open breaker asks for a
// probe permit. Allow neither retries nor applies timeouts: that is Do's
// job. When err is non-nil, done is a no-op. Calling done more than once is
// a bug: further calls are ignored as long as the attempt's bookkeeping has
// not been reused by a later Allow.
func (d *Dependency) Allow(kind AttemptKind) (done func(Outcome), err error) {
	st := d.st
	if st.err != nil {
		return noopDone, st.err
	}
	if st.untracked { // no breaker, budget or limit: nothing to decide or report
		st.c.metrics.untracked.Add(1)
		return noopDone, nil
	}
	if kind == First && len(d.defaults) == 0 {
		if dec := st.dec.Load(); dec.first.Verdict == sharedstate.Allow {
			t := st.c.tokens.Get().(*token)
			sp := &st.stripes[t.stripe&st.mask]
			if (dec.throttleCut | dec.shadowCut) != 0 {
				if rej := st.throttled(dec, false); rej != nil {
					sp.rejected.Add(1)
					st.c.tokens.Put(t)
					return noopDone, rej
				}
			}
			t.g = grant{}
			if dec.limit > 0 {
				if !st.tryAcquire(sp, dec.limit) {
					sp.rejected.Add(1)
					st.c.tokens.Put(t)
					return noopDone, st.rejLimit
				}
				t.g.slot = true
			}
			sp.first.Add(1)
			t.st, t.sp, t.slow = st, sp, dec.slow
			t.start = st.c.mono()
			t.armed.Store(true)
			return t.fn, nil
		}
	}
	return d.allowSlow(kind)
}

func (d *Dependency) allowSlow(kind AttemptKind) (func(Outcome), error) {
	st := d.st
	var cfg callConfig
	if err := cfg.apply(d.defaults); err != nil {
		return noopDone, err
	}
	ctx := context.Background()
	t := st.c.tokens.Get().(*token)
	sp := &st.stripes[t.stripe&st.mask]
	dec := st.dec.Load()
	var (
		g   grant
		err error
	)
	if kind == Retry {
		// The slot first, so that a refusal spends no budget.
		var held bool
		if held, err = st.acquireSlot(ctx, sp, cfg.slotWait); err != nil {
			sp.rejected.Add(1)
		} else if g, err = st.admitRetry(ctx, sp); err == nil {
			g.slot = held
		} else if held {
			st.slots.release(sp)
		}
	} else {
		g, err = st.admitFirst(ctx, sp, dec, cfg.strict, cfg.slotWait)
	}
	if err != nil {
		st.c.tokens.Put(t)
		return noopDone, err
	}
	t.st, t.sp, t.slow, t.g = st, sp, dec.slow, g
	t.start = st.c.mono()
	t.armed.Store(true)
	return t.fn, nil
}

func noopDone(Outcome) {}

// token is the bookkeeping of one two-step attempt, pooled so that Allow
// allocates nothing: its done function is bound once, at creation. Its
// stripe index is fixed at creation too, and tokens tend to stay with the
// P that uses them, so concurrent goroutines count on different stripes.
type token struct {
	fn     func(Outcome)
	stripe uint32
	armed  atomic.Bool
	st     *depState
	sp     *stripe
	slow   time.Duration
	start  time.Duration // Client.mono at the attempt's start
	g      grant         // g.slot: holds a concurrency slot
}

func (c *Client) newToken() any {
	t := &token{stripe: c.tokenSeq.Add(1) - 1}
	t.fn = t.finish
	return t
}

func (t *token) finish(o Outcome) {
	if !t.armed.CompareAndSwap(true, false) {
		return
	}
	st, sp := t.st, t.sp
	slow := t.slow > 0 && st.c.mono()-t.start >= t.slow
	switch o {
	case Success:
		sp.record(false, slow)
		st.finishProbe(t.g, true, slow)
	case Timeout:
		sp.record(true, true)
		st.finishProbe(t.g, false, true)
	case Abandoned:
	default:
		sp.record(true, slow)
		st.finishProbe(t.g, false, slow)
	}
	if t.g.slot {
		st.slots.release(sp)
	}
	t.st, t.sp = nil, nil
	st.c.tokens.Put(t)
}
