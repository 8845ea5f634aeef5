package clientlib

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/backoff"
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

func (c Class) String() string {
	switch c {
	case NonRetryable:
		return "non-retryable"
	case Idempotent:
		return "idempotent"
	case IdempotentWithKey:
		return "idempotent-with-key"
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

	metadataRetryOwner     = "fusebox-retry-owner"
	metadataIdempotencyKey = "idempotency-key"
)

// SetHeaders writes the attempt's Fusebox headers into h, for attempt
// functions that make HTTP requests without the RoundTripper:
// Fusebox-Retry-Owner, Fusebox-Timeout-Ms (when there is a deadline) and
// Idempotency-Key (for IdempotentWithKey).
func (a Attempt) SetHeaders(h http.Header) {
	if a.owner != "" {
		h.Set(HeaderRetryOwner, a.owner)
	}
	if !a.Deadline.IsZero() {
		h.Set(HeaderTimeoutMs, timeoutMs(time.Until(a.Deadline)))
	}
	if a.IdempotencyKey != "" {
		h.Set(HeaderIdempotencyKey, a.IdempotencyKey)
	}
}

func timeoutMs(d time.Duration) string {
	ms := d.Milliseconds()
	if ms < 1 {
		ms = 1
	}
	return strconv.FormatInt(ms, 10)
}

// CallOption is an optional knob of one call (or, through Dependency.With,
// of every call of a handle). Options are plain values: passing them
// allocates nothing.
type CallOption struct {
	kind optKind
	n    int
	d    time.Duration
	s    string
	v    any
}

type optKind uint8

const (
	optNone optKind = iota
	optFallback
	optFallbackValue
	optClassifier
	optMaxAttempts
	optAttemptTimeout
	optKey
	optStrict
	optNested
	optSlotWait
)

// WithFallback calls fb with the call's final error (ErrOpen, ErrForcedOpen,
// the last attempt's error joined with ErrBudgetExhausted or the deadline…)
// instead of returning it; the call returns what fb returns. fb is not
// called on success. (optional, default none)
func WithFallback(fb func(ctx context.Context, err error) error) CallOption {
	return CallOption{kind: optFallback, v: fb}
}

// WithFallbackValue is WithFallback for Call[T]: fb's value becomes the
// call's result. A Do call ignores it. (optional, default none)
func WithFallbackValue[T any](fb func(ctx context.Context, err error) (T, error)) CallOption {
	return CallOption{kind: optFallbackValue, v: fb}
}

// WithClassifier replaces DefaultClassifier for this call (optional,
// default DefaultClassifier).
func WithClassifier(c Classifier) CallOption {
	return CallOption{kind: optClassifier, v: c}
}

// WithMaxAttempts overrides the policy's maxAttempts (first attempt
// included) for this call; n ≥ 1 (optional, default the policy's, 3 in the
// default policy).
func WithMaxAttempts(n int) CallOption { return CallOption{kind: optMaxAttempts, n: n} }

// WithAttemptTimeout overrides the policy's perAttemptTimeout for this
// call; 0 means no per-attempt timeout (only the caller's deadline)
// (optional, default the policy's, 500ms in the default policy).
func WithAttemptTimeout(d time.Duration) CallOption {
	return CallOption{kind: optAttemptTimeout, d: d}
}

// WithIdempotencyKey sets the key of an IdempotentWithKey call, e.g. one
// derived from a business identifier (optional, default a random 128-bit
// key per call).
func WithIdempotencyKey(key string) CallOption { return CallOption{kind: optKey, s: key} }

// StrictConsult asks the agent synchronously (Check, bounded by
// Config.AgentWait) before a first attempt instead of deciding from the
// pushed snapshot. Retries and probes always ask. Without an agent it
// decides locally. (optional, default off)
func StrictConsult() CallOption { return CallOption{kind: optStrict} }

// NestedRetries(true) lets this call retry even inside a request whose
// caller already owns retries (the request came through Middleware with a
// Fusebox-Retry-Owner header). The policy has no such field yet, so this
// option is the only opt-out. (optional, default false: nested calls make
// a single attempt and fail fast upward)
func NestedRetries(allow bool) CallOption {
	n := 0
	if allow {
		n = 1
	}
	return CallOption{kind: optNested, n: n}
}

// WaitForSlot lets a call wait up to d (and never past its context) for a
// slot when its process already has its share of the policy's
// concurrency.maxInFlight calls in flight, instead of failing at once with
// ErrConcurrencyLimit: it gets one as soon as a call releases one or a new
// share makes room. d ≥ 0 (optional, default 0: no wait).
func WaitForSlot(d time.Duration) CallOption { return CallOption{kind: optSlotWait, d: d} }

type callConfig struct {
	slotWait      time.Duration
	fallback      func(context.Context, error) error
	classifier    Classifier
	maxAttempts   int
	timeout       time.Duration
	hasTimeout    bool
	key           string
	strict        bool
	nestedRetries bool
}

func (cfg *callConfig) apply(lists ...[]CallOption) error {
	for _, opts := range lists {
		for i := range opts {
			o := &opts[i]
			switch o.kind {
			case optFallback:
				cfg.fallback, _ = o.v.(func(context.Context, error) error)
			case optClassifier:
				cfg.classifier, _ = o.v.(Classifier)
			case optMaxAttempts:
				if o.n < 1 {
					return fmt.Errorf("%w: WithMaxAttempts(%d): must be at least 1", ErrInvalidOption, o.n)
				}
				cfg.maxAttempts = o.n
			case optAttemptTimeout:
				if o.d < 0 {
					return fmt.Errorf("%w: WithAttemptTimeout(%v): must not be negative", ErrInvalidOption, o.d)
				}
				cfg.timeout, cfg.hasTimeout = o.d, true
			case optKey:
				if o.s == "" || len(o.s) > 1024 || !headerValue(o.s) {
					return fmt.Errorf("%w: WithIdempotencyKey(%q): must be 1–1024 bytes of printable ASCII", ErrInvalidOption, o.s)
				}
				cfg.key = o.s
			case optStrict:
				cfg.strict = true
			case optNested:
				cfg.nestedRetries = o.n == 1
			case optSlotWait:
				if o.d < 0 {
					return fmt.Errorf("%w: WaitForSlot(%v): must not be negative", ErrInvalidOption, o.d)
				}
				cfg.slotWait = o.d
			}
		}
	}
	return nil
}

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
		if fb := findFallback(d.defaults, opts); fb != nil {
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
	for _, list := range [2][]CallOption{opts, d.defaults} {
		for i := len(list) - 1; i >= 0; i-- {
			if list[i].kind == optFallbackValue {
				if fb, ok := list[i].v.(func(context.Context, error) (T, error)); ok {
					return fb(ctx, err)
				}
			}
		}
	}
	if fb := findFallback(d.defaults, opts); fb != nil {
		var zero T
		return zero, fb(ctx, err)
	}
	var zero T
	return zero, err
}

func findFallback(defaults, opts []CallOption) func(context.Context, error) error {
	for _, list := range [2][]CallOption{opts, defaults} {
		for i := len(list) - 1; i >= 0; i-- {
			if list[i].kind == optFallback {
				fb, _ := list[i].v.(func(context.Context, error) error)
				return fb
			}
		}
	}
	return nil
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
// interceptor. hedgeable: the policy's hedging may run attempts of fn at
// the same time (Do and Call; the transports need one attempt at a time).
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
	c := st.c
	dec := st.dec.Load()
	maxAttempts := dec.retry.maxAttempts
	if cfg.maxAttempts > 0 {
		maxAttempts = cfg.maxAttempts
	}
	perAttempt := dec.retry.perAttempt
	if cfg.hasTimeout {
		perAttempt = cfg.timeout
	}
	owner, nested := ctx.Value(retryOwnerKey{}).(string)
	if class == NonRetryable || (nested && !cfg.nestedRetries) {
		maxAttempts = 1
	}
	if !nested {
		owner = c.service
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
		} else {
			g, err = st.admitRetry(ctx, sp)
		}
		if err != nil {
			if lastErr != nil {
				return errors.Join(err, lastErr)
			}
			return err
		}

		if n == 1 && hedgeable && !g.probe && maxAttempts > 1 && dec.retry.maxHedges > 0 && dec.retry.hedgeDelay > 0 {
			h := hedgeCall{fn: fn, key: key, owner: owner, perAttempt: perAttempt, delay: dec.retry.hedgeDelay,
				maxHedges: dec.retry.maxHedges, maxAttempts: maxAttempts, classify: classify, slow: dec.slow}
			if hasParentDeadline {
				h.parentDeadline = parentDeadline
			}
			r := st.runHedged(ctx, sp, h)
			if r.err == nil {
				return nil
			}
			lastErr = r.err
			if cerr := ctx.Err(); cerr != nil {
				return errors.Join(cerr, r.err)
			}
			if !r.cl.Retryable || r.attempts >= maxAttempts {
				return r.err
			}
			n = r.attempts
			if _, err := st.retryWait(ctx, n, &prevWait, r.cl, perAttempt, parentDeadline, hasParentDeadline, r.err); err != nil {
				return err
			}
			continue
		}
		start := c.mono()
		actx := ctx
		var cancel context.CancelFunc
		a := Attempt{Number: n, IdempotencyKey: key, Probe: g.probe, owner: owner}
		if perAttempt > 0 {
			// Under an earlier caller deadline this is a plain cancel
			// context (context.WithDeadline's rule), so the attempt times
			// out on its own only when its timeout is the earlier one.
			actx, cancel = context.WithTimeout(ctx, perAttempt)
			a.Deadline, _ = actx.Deadline()
		} else if hasParentDeadline {
			a.Deadline = parentDeadline
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
			return nil
		}
		lastErr = err
		if cerr := ctx.Err(); cerr != nil {
			// The caller gave up during the attempt. A passed deadline is
			// the dependency's failure to answer in time; a cancellation
			// says nothing about it.
			if cerr == context.DeadlineExceeded {
				sp.record(true, slow)
				st.finishProbe(g, false, slow)
			}
			return errors.Join(cerr, err)
		}
		var cl Classification
		if ownTimeout {
			cl = Classification{Retryable: true, Failure: true}
			slow = true // a timeout counts as a slow failure
		} else {
			cl = classify(err)
		}
		sp.record(cl.Failure, slow)
		st.finishProbe(g, !cl.Failure, slow)
		if !cl.Retryable || n >= maxAttempts {
			return err
		}

		if _, err := st.retryWait(ctx, n, &prevWait, cl, perAttempt, parentDeadline, hasParentDeadline, err); err != nil {
			return err
		}
	}
}

// retryWait waits the backoff before attempt n+1 (at least the server's
// Retry-After): an error (errors.Join of the reason and lastErr) when the
// next attempt does not fit before the caller's deadline or the caller gave
// up meanwhile.
func (st *depState) retryWait(ctx context.Context, n int, prevWait *time.Duration, cl Classification, perAttempt time.Duration,
	parentDeadline time.Time, hasParentDeadline bool, lastErr error) (time.Duration, error) {
	c := st.c
	dec := st.dec.Load()
	wait := dec.retry.backoff.Wait(n-1, *prevWait, backoff.Uniform(c.random()))
	*prevWait = wait
	if cl.RetryAfter > wait {
		wait = cl.RetryAfter
	}
	if hasParentDeadline {
		next := time.Now().Add(wait)
		if perAttempt > 0 {
			next = next.Add(perAttempt)
			if next.After(parentDeadline) {
				return wait, errors.Join(context.DeadlineExceeded, lastErr)
			}
		} else if !next.Before(parentDeadline) {
			return wait, errors.Join(context.DeadlineExceeded, lastErr)
		}
	}
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return wait, errors.Join(ctx.Err(), lastErr)
		}
	}
	return wait, nil
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
