package clientlib

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/backoff"
	"github.com/fusebox-dev/fusebox/sharedstate/ctxtime"
)

// Class says what a call site may safely repeat.
type Class uint8

const (
	// NonRetryable calls are made once (the zero value: the safe default).
	NonRetryable Class = iota
	// Idempotent calls may be repeated as they are (reads, PUT, DELETE…).
	Idempotent
	// IdempotentWithKey calls may be repeated because every attempt carries
	// the same idempotency key (Attempt.IdempotencyKey), which the server
	// uses to apply the operation once. The key is generated per logical
	// call unless WithIdempotencyKey gives one.
	IdempotentWithKey
)

var classNames = [...]string{NonRetryable: "non-retryable", Idempotent: "idempotent", IdempotentWithKey: "idempotent-with-key"}

func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return "class(" + strconv.Itoa(int(c)) + ")"
}

// Attempt describes one attempt to the attempt function.
type Attempt struct {
	// Number is 1 for the first attempt, 2 for the first retry, …
	Number int
	// IdempotencyKey is the call's key for IdempotentWithKey ("" otherwise):
	// the same on every attempt of one call.
	IdempotencyKey string
	// Probe is true when this attempt is a half-open probe.
	Probe bool
	// Deadline is the attempt's deadline (its own timeout or the caller's,
	// whichever is earlier); zero when there is none.
	Deadline time.Time

	owner string
	// last: no attempt follows this one, whatever it comes to.
	last bool
	// classify is the call's classifier (nil in hedged attempts).
	classify Classifier
}

// mayRetry reports whether another attempt may follow one that failed
// with err (the retry budget and the deadline still decide).
func (a Attempt) mayRetry(err error) bool {
	return !a.last && a.classify != nil && a.classify(err).Retryable
}

// Header names clientlib reads and writes.
const (
	// HeaderRetryOwner carries the service that owns retries for a request
	// (the first one using clientlib); servers wrapped in Middleware make
	// nested calls single attempts when it is present.
	HeaderRetryOwner = "Fusebox-Retry-Owner"
	// HeaderTimeoutMs carries the caller's remaining time in milliseconds;
	// Middleware applies it as the request context's deadline.
	HeaderTimeoutMs = "Fusebox-Timeout-Ms"
	// HeaderIdempotencyKey is the HTTP header of idempotency keys.
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderProbe is "1" on an attempt that is a half-open probe: the
	// server may tell probes from the rest of the traffic.
	HeaderProbe = "Fusebox-Probe"
	// HeaderReplayed is "true" on an answer a server's deduplication
	// (package idempotency) replayed from its store for a repeated
	// Idempotency-Key: the answer of an earlier attempt, which every retry
	// under that key would get again.
	HeaderReplayed = "Idempotent-Replayed"

	metadataRetryOwner     = "fusebox-retry-owner"
	metadataIdempotencyKey = "idempotency-key"
	metadataReplayed       = "idempotent-replayed" // HeaderReplayed's gRPC metadata
)

// SetHeaders writes the attempt's Fusebox headers into h, for attempt
// functions that make HTTP requests without the RoundTripper:
// Fusebox-Retry-Owner, Fusebox-Probe (on a probe), Fusebox-Timeout-Ms (when
// there is a deadline) and Idempotency-Key (for IdempotentWithKey).
func (a Attempt) SetHeaders(h http.Header) {
	if a.owner != "" {
		h.Set(HeaderRetryOwner, a.owner)
	}
	if a.Probe {
		h.Set(HeaderProbe, "1")
	}
	if !a.Deadline.IsZero() {
		h.Set(HeaderTimeoutMs, timeoutMs(time.Until(a.Deadline)))
	}
	if a.IdempotencyKey != "" {
		h.Set(HeaderIdempotencyKey, a.IdempotencyKey)
	}
}

func timeoutMs(d time.Duration) string { return strconv.FormatInt(max(d.Milliseconds(), 1), 10) }

// Do makes the call fn stands for, through the breaker, with retries as the
// class and the policy allow:
//
//   - the first attempt is decided in process from the pushed snapshot (no
//     RPC, no lock shared with other dependencies); a retry first takes one
//     retry from the fleet budget (AcquireRetry), a half-open probe a permit
//     (AcquireProbe), each waiting at most Config.AgentWait for the agent;
//   - each attempt runs under its own timeout (policy perAttemptTimeout)
//     derived from ctx; a retry is not started when its full timeout plus
//     the backoff would pass ctx's deadline;
//   - between attempts it waits the policy's backoff (full jitter by
//     default), at least a server's Retry-After, and stops when ctx is done;
//   - every outcome is counted and reported to the agent.
//
// Errors: a refused call returns an error matching ErrOpen (ErrForcedOpen
// and ErrThrottled match it too) or ErrConcurrencyLimit (fn is not called); a refused retry returns the last
// attempt's error joined with ErrOpen or ErrBudgetExhausted; when ctx ends
// the call (or its deadline leaves no room for another attempt), the error
// is errors.Join(ctx.Err() or context.DeadlineExceeded, last error);
// otherwise the last attempt's error as fn returned it.
func (d *Dependency) Do(ctx context.Context, class Class, fn func(ctx context.Context, a Attempt) error, opts ...CallOption) error {
	err := d.st.run(ctx, class, fn, d.defaults, opts, true)
	if err != nil && (len(d.defaults) != 0 || len(opts) != 0) {
		if fb, _ := fallbackOf[func(context.Context, error) error](d.defaults, opts, optFallback); fb != nil {
			return fb(ctx, err)
		}
	}
	return err
}

// Call is Do for an attempt function that returns a value: the value of the
// successful attempt, or the zero value (or the fallback's) with the error.
func Call[T any](ctx context.Context, d *Dependency, class Class, fn func(ctx context.Context, a Attempt) (T, error), opts ...CallOption) (T, error) {
	var (
		out T
		mu  sync.Mutex // hedged attempts may succeed at once: the first to get here wins
		won bool
	)
	err := d.st.run(ctx, class, func(ctx context.Context, a Attempt) error {
		v, err := fn(ctx, a)
		if err == nil {
			mu.Lock()
			if !won {
				out, won = v, true
			}
			mu.Unlock()
		}
		return err
	}, d.defaults, opts, true)
	if err == nil {
		return out, nil
	}
	if fb, ok := fallbackOf[func(context.Context, error) (T, error)](d.defaults, opts, optFallbackValue); ok {
		return fb(ctx, err)
	}
	var zero T
	if fb, _ := fallbackOf[func(context.Context, error) error](d.defaults, opts, optFallback); fb != nil {
		return zero, fb(ctx, err)
	}
	return zero, err
}

// fallbackOf returns the fallback of type F of the last option of kind
// that has one, looking at the call's options before the handle's defaults.
func fallbackOf[F any](defaults, opts []CallOption, kind optKind) (fb F, ok bool) {
	for _, list := range [2][]CallOption{opts, defaults} {
		for i := len(list) - 1; i >= 0; i-- {
			if list[i].kind == kind {
				if fb, ok = list[i].v.(F); ok {
					return fb, true
				}
			}
		}
	}
	return fb, false
}

// newKey returns a fresh idempotency key (128 random bits, base32).
func newKey() string { return rand.Text() }

// grant says who admitted an attempt and how.
type grant struct {
	slot       bool // holds a concurrency slot
	probe      bool
	byAgent    bool
	generation uint64
}

// run is the retry loop behind Do, Call, the RoundTripper and the gRPC
// interceptor: the only implementation of a call in Go, for services
// (through their agent's session) and for the agent's egress proxy
// (through its engine in process) alike. hedgeable: the policy's hedging
// may run attempts of fn at the same time (Do and Call; the transports
// need one attempt at a time).
func (st *depState) run(ctx context.Context, class Class, fn func(context.Context, Attempt) error, defaults, opts []CallOption, hedgeable bool) error {
	if st.err != nil {
		return st.err
	}
	var cfg callConfig
	if len(defaults) != 0 || len(opts) != 0 {
		if err := cfg.apply(defaults, opts); err != nil {
			return err
		}
	}
	info := cfg.info
	if info != nil {
		*info = CallInfo{}
	}
	c := st.c
	dec := st.dec.Load()
	maxAttempts := cmp.Or(cfg.maxAttempts, dec.retry.maxAttempts)
	perAttempt := dec.retry.perAttempt
	if cfg.hasTimeout {
		perAttempt = cfg.timeout
	}
	owner, nested := ctx.Value(retryOwnerKey{}).(string)
	once := class == NonRetryable || (nested && !cfg.nestedRetries) || st.untracked
	if once {
		maxAttempts = 1
	}
	if st.untracked {
		c.metrics.untracked.Add(1)
		cfg.strict = false // nothing to ask about a name the client does not track
	}
	if !nested {
		owner = cmp.Or(cfg.owner, c.service)
	}
	var key string
	if class == IdempotentWithKey {
		if key = cfg.key; key == "" {
			key = newKey()
		}
	}
	classify := cfg.classifier
	if classify == nil {
		classify = DefaultClassifier
	}
	sp := st.anyStripe()
	parentDeadline, hasParentDeadline := ctx.Deadline()

	var (
		lastErr  error
		prevWait time.Duration
	)
	for n := 1; ; n++ {
		if cerr := ctx.Err(); cerr != nil { // no attempt starts for a caller that is gone
			info.end(n-1, stopOf(cerr), nil)
			if lastErr != nil {
				return errors.Join(cerr, lastErr)
			}
			return cerr
		}
		var (
			g   grant
			err error
		)
		if n == 1 {
			// One concurrency slot for the whole call (its attempts run
			// one after the other), held until it returns.
			g, err = st.admitFirst(ctx, sp, dec, cfg.strict, cfg.slotWait)
			if g.slot {
				defer st.slots.release(sp)
			}
			if info != nil {
				info.Probe = g.probe
			}
		} else {
			g, err = st.admitRetry(ctx, sp)
		}
		if err != nil {
			if info != nil {
				stop := StopRejected
				if cerr := ctx.Err(); cerr != nil { // a wait for a slot ended with the caller
					stop = stopOf(cerr)
				}
				info.end(n-1, stop, err)
			}
			if lastErr != nil {
				return errors.Join(err, lastErr)
			}
			return err
		}

		var (
			cl   Classification
			gone error // the caller's context error, when it gave up during the attempt
		)
		if n == 1 && hedgeable && !g.probe && maxAttempts > 1 && dec.retry.maxHedges > 0 && dec.retry.hedgeDelay > 0 {
			r := st.runHedged(ctx, sp, hedgeCall{fn: fn, key: key, owner: owner, perAttempt: perAttempt,
				parentDeadline: parentDeadline, delay: dec.retry.hedgeDelay, maxHedges: dec.retry.maxHedges,
				maxAttempts: maxAttempts, classify: classify, slow: dec.slow})
			n, err, cl, gone = r.attempts, r.err, r.cl, ctx.Err()
		} else {
			start := c.mono()
			actx := ctx
			var cancel context.CancelFunc
			a := Attempt{Number: n, IdempotencyKey: key, Probe: g.probe, Deadline: parentDeadline, owner: owner,
				last: n >= maxAttempts, classify: classify}
			if perAttempt > 0 {
				// Under an earlier caller deadline this is a plain cancel
				// context (context.WithDeadline's rule), so the attempt times
				// out on its own only when its timeout is the earlier one.
				actx, cancel = context.WithTimeout(ctx, perAttempt)
				a.Deadline, _ = actx.Deadline()
			}
			err = fn(actx, a)
			elapsed := c.mono() - start
			ownTimeout := false
			if cancel != nil {
				ownTimeout = err != nil && actx.Err() == context.DeadlineExceeded && ctx.Err() == nil
				cancel()
			}
			slow := dec.slow > 0 && elapsed >= dec.slow
			if err == nil {
				sp.record(false, slow)
				st.finishProbe(g, true, slow)
			} else if gone = ctx.Err(); gone != nil {
				// The caller gave up during the attempt. A passed deadline is
				// the dependency's failure to answer in time; a cancellation
				// says nothing about it.
				if gone == context.DeadlineExceeded {
					sp.record(true, slow)
					st.finishProbe(g, false, slow)
				}
			} else {
				if ownTimeout {
					cl = Classification{Retryable: true, Failure: true}
					slow = true // a timeout counts as a slow failure
				} else {
					cl = classify(err)
				}
				if !cl.NotCounted {
					sp.record(cl.Failure, slow)
					st.finishProbe(g, !cl.Failure, slow)
				}
			}
		}

		if err == nil {
			info.end(n, StopNone, nil)
			return nil
		}
		lastErr = err
		if gone != nil {
			info.end(n, stopOf(gone), nil)
			return errors.Join(gone, err)
		}
		if !cl.Retryable || once {
			info.end(n, StopNotRetryable, nil)
			return err
		}
		if n >= maxAttempts {
			info.end(n, StopMaxAttempts, nil)
			return err
		}
		if stop, err := st.retryWait(ctx, n, &prevWait, cl, perAttempt, parentDeadline, hasParentDeadline, err); err != nil {
			info.end(n, stop, nil)
			return err
		}
	}
}

// retryWait waits the backoff before attempt n+1 (at least the server's
// Retry-After). It fails, saying why, when the next attempt does not fit
// before the caller's deadline (errors.Join(context.DeadlineExceeded,
// lastErr)), when the caller gives up meanwhile (errors.Join(ctx.Err(),
// lastErr)), and when, without a deadline, the server's Retry-After is
// longer than the policy's backoff.max (lastErr: the answer is the
// caller's to honour; no call waits unbounded).
func (st *depState) retryWait(ctx context.Context, n int, prevWait *time.Duration, cl Classification, perAttempt time.Duration,
	parentDeadline time.Time, hasParentDeadline bool, lastErr error) (StopReason, error) {
	c := st.c
	dec := st.dec.Load()
	wait := dec.retry.backoff.Wait(n-1, *prevWait, backoff.Uniform(c.random()))
	*prevWait = wait
	if cl.RetryAfter > wait {
		wait = cl.RetryAfter
		if m := dec.retry.backoff.Max; !hasParentDeadline && m > 0 && wait > m {
			return StopRetryAfter, lastErr
		}
	}
	if hasParentDeadline {
		next := time.Now().Add(wait)
		if perAttempt > 0 {
			next = next.Add(perAttempt)
			if next.After(parentDeadline) {
				return StopDeadline, errors.Join(context.DeadlineExceeded, lastErr)
			}
		} else if !next.Before(parentDeadline) {
			return StopDeadline, errors.Join(context.DeadlineExceeded, lastErr)
		}
	}
	if wait > 0 && !ctxtime.Sleep(ctx, wait) {
		return stopOf(ctx.Err()), errors.Join(ctx.Err(), lastErr)
	}
	return StopNone, nil
}

// admitFirst decides a first attempt: from the snapshot, or by asking.
//
// An allowed first attempt also takes a concurrency slot when the policy
// sets a limit (grant.slot; waiting up to slotWait): the caller releases it.
func (st *depState) admitFirst(ctx context.Context, sp *stripe, dec *decision, strict bool, slotWait time.Duration) (grant, error) {
	verdict, askAgent := dec.first, dec.fromAgent
	if strict {
		verdict, askAgent = st.check(ctx)
	}
	switch verdict.Verdict {
	case sharedstate.Allow:
		if rej := st.throttled(dec, strict); rej != nil {
			sp.rejected.Add(1)
			return grant{}, rej
		}
		held, err := st.acquireSlot(ctx, sp, slotWait)
		if err != nil {
			sp.rejected.Add(1)
			return grant{}, err
		}
		sp.first.Add(1)
		return grant{slot: held}, nil
	case sharedstate.AllowProbe:
		return st.acquireProbe(ctx, askAgent, dec)
	}
	sp.rejected.Add(1)
	if strict {
		return grant{}, st.rejection(verdict.Reason)
	}
	return grant{}, dec.rejErr
}
