package clientlib

import (
	"errors"

	"github.com/fusebox-dev/fusebox/sharedstate"
)

// Sentinel errors. Match them with errors.Is: the errors a call returns wrap
// them (often joined with the last attempt's error).
var (
	// ErrOpen: the dependency's breaker is open (fleet-wide, or this node's
	// own), or half-open without a probe permit for this call. The call was
	// not made (or, for a retry, not made again).
	ErrOpen = errors.New("fusebox: breaker open")

	// ErrForcedOpen: an operator forced the breaker open. errors.Is(err,
	// ErrOpen) is true for it too.
	ErrForcedOpen error = openError("fusebox: breaker forced open")

	// ErrBudgetExhausted: the fleet retry budget (or the local one, while the
	// agent is away) has no room for another retry. It is joined with the
	// error of the last attempt.
	ErrBudgetExhausted = errors.New("fusebox: retry budget exhausted")

	// ErrThrottled: fleet-wide adaptive throttling (policy "throttle")
	// refused a first attempt: the dependency answers too few of the
	// fleet's requests; or the ramp after the breaker closed
	// (breaker.rampDuration) did: the traffic comes back gradually. Its
	// RejectedError's Reason tells which: "throttled" or "ramp".
	// errors.Is(err, ErrOpen) is true for it too, so code that handles a
	// refusing breaker (fallbacks, fail fast, no retry) handles a throttled
	// call the same way without change; match ErrThrottled to tell them
	// apart.
	ErrThrottled error = openError("fusebox: throttled")

	// ErrConcurrencyLimit: this process already has its share of the
	// fleet's concurrency.maxInFlight calls in flight (see WaitForSlot). It
	// does not match ErrOpen: the dependency is not judged unhealthy, the
	// caller has as much work in progress as it may.
	ErrConcurrencyLimit = errors.New("fusebox: concurrency limit reached")

	// ErrNotRetryable, wrapped into an error returned by an attempt, tells
	// the default classifier not to retry that error whatever it is.
	ErrNotRetryable = errors.New("fusebox: not retryable")

	// ErrInvalidDependency is wrapped by the error every call of a handle
	// with an invalid dependency name returns (see Client.Dependency).
	ErrInvalidDependency = sharedstate.ErrInvalidDependencyName

	// ErrInvalidOption is wrapped by the error a call returns when one of its
	// options is out of range; the attempt function is not called.
	ErrInvalidOption = errors.New("fusebox: invalid call option")
)

// errNilEngine: NewInProcess without an engine.
var errNilEngine = errors.New("clientlib: NewInProcess: the engine must not be nil")

// openError is a sentinel that errors.Is also matches to ErrOpen.
type openError string

func (e openError) Error() string      { return string(e) }
func (openError) Is(target error) bool { return target == ErrOpen }

// RejectedError is what a refused attempt returns: the dependency, why, and
// the sentinel it wraps (ErrOpen, ErrForcedOpen, ErrBudgetExhausted,
// ErrThrottled or ErrConcurrencyLimit).
// A handle builds its rejection errors once, so refusing allocates nothing.
type RejectedError struct {
	Dependency string
	// Reason is "open", "forced-open", "half-open-no-permit",
	// "budget-exhausted", "throttled", "ramp" (the ramp after a close; it
	// wraps ErrThrottled) or "concurrency-limit".
	Reason string
	Err    error
}

func (e *RejectedError) Error() string {
	return e.Err.Error() + " (dependency " + e.Dependency + ", " + e.Reason + ")"
}

// Unwrap returns the sentinel.
func (e *RejectedError) Unwrap() error { return e.Err }
