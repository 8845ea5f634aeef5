package clientlib

import (
	"context"
	"fmt"
	"time"
)

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
	optOwner
	optInfo
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
func NestedRetries(allow bool) CallOption { return CallOption{kind: optNested, v: allow} }

// WaitForSlot lets a call wait up to d (and never past its context) for a
// slot when its process already has its share of the policy's
// concurrency.maxInFlight calls in flight, instead of failing at once with
// ErrConcurrencyLimit: it gets one as soon as a call releases one or a new
// share makes room. d ≥ 0 (optional, default 0: no wait).
func WaitForSlot(d time.Duration) CallOption { return CallOption{kind: optSlotWait, d: d} }

// WithRetryOwner names service, instead of Client.Service, as the owner of
// this call's retries in Fusebox-Retry-Owner: for a client that calls on
// behalf of several services (the agent's egress proxy names each calling
// service), so that a server deduplicating by owner and idempotency key
// keeps their keys apart. Inside a request whose caller owns retries
// (ContextWithRetryOwner, Middleware), that caller stays the owner.
// service: 1–256 printable ASCII bytes without spaces (optional, default
// Client.Service).
func WithRetryOwner(service string) CallOption { return CallOption{kind: optOwner, s: service} }

// WithCallInfo has the call fill in *info before it returns: its attempts,
// whether the first was a probe, and why it stopped (see CallInfo). info
// must not be shared by calls in progress at the same time. (optional,
// default none)
func WithCallInfo(info *CallInfo) CallOption { return CallOption{kind: optInfo, v: info} }

type callConfig struct {
	slotWait      time.Duration
	classifier    Classifier
	maxAttempts   int
	timeout       time.Duration
	hasTimeout    bool
	key           string
	strict        bool
	nestedRetries bool
	owner         string
	info          *CallInfo
}

func (cfg *callConfig) apply(lists ...[]CallOption) error {
	for _, opts := range lists {
		for i := range opts {
			o := &opts[i]
			switch o.kind {
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
				if !validKey(o.s) {
					return fmt.Errorf("%w: WithIdempotencyKey(%q): must be 1–1024 bytes of printable ASCII", ErrInvalidOption, o.s)
				}
				cfg.key = o.s
			case optStrict:
				cfg.strict = true
			case optNested:
				cfg.nestedRetries, _ = o.v.(bool)
			case optOwner:
				if !ValidRetryOwner(o.s) {
					return fmt.Errorf("%w: WithRetryOwner(%q): must be 1–%d bytes of printable ASCII without spaces", ErrInvalidOption, o.s, MaxRetryOwnerLen)
				}
				cfg.owner = o.s
			case optInfo:
				cfg.info, _ = o.v.(*CallInfo)
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

// validKey: an idempotency key is 1–1024 bytes of printable ASCII.
func validKey(k string) bool { return k != "" && len(k) <= 1024 && headerValue(k) }
