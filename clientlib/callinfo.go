package clientlib

import (
	"context"
	"errors"
)

// CallInfo is what one call did: how many attempts it made, whether the
// first was a half-open probe, and why it made no further attempt. Pass
// one with WithCallInfo (through the RoundTripper, in the request's
// context with ContextWithCallOptions); the call fills it in before it
// returns. A call that fails before deciding anything (an invalid option)
// leaves it untouched. The agent's egress proxy writes its answer headers
// (Fusebox-Attempts, Fusebox-Rejected, Fusebox-Probe) from it.
type CallInfo struct {
	// Attempts is the number of attempts made: 0 when Fusebox refused the
	// first (Rejected says why) or the caller was gone before it.
	Attempts int
	// Probe is true when the first attempt was a half-open probe.
	Probe bool
	// Stop says why no further attempt was made.
	Stop StopReason
	// Rejected is Fusebox's refusal that ended the call (Stop is
	// StopRejected): of the first attempt, or of a retry (the budget, or a
	// breaker that opened meanwhile); nil otherwise.
	Rejected *RejectedError
}

// StopReason says why a call made no further attempt.
type StopReason uint8

const (
	// StopNone: nothing stopped the call: its last attempt succeeded.
	StopNone StopReason = iota
	// StopNotRetryable: the last attempt's error may not be retried: the
	// classifier said so, or one attempt is all the call may make (its
	// class is NonRetryable, its caller owns retries, or its dependency is
	// untracked).
	StopNotRetryable
	// StopMaxAttempts: the call made all the attempts it may make.
	StopMaxAttempts
	// StopRejected: Fusebox refused an attempt (CallInfo.Rejected).
	StopRejected
	// StopDeadline: the caller's deadline passed, or the next attempt (its
	// timeout after the backoff, or a server's Retry-After) would not fit
	// before it.
	StopDeadline
	// StopCanceled: the caller's context was cancelled.
	StopCanceled
	// StopRetryAfter: the server asked for a wait (Retry-After) longer than
	// the policy's backoff.max, and the call has no deadline to bound it:
	// the answer, with its Retry-After, is the caller's to honour.
	StopRetryAfter
)

var stopNames = [...]string{StopNone: "none", StopNotRetryable: "not-retryable", StopMaxAttempts: "max-attempts",
	StopRejected: "rejected", StopDeadline: "deadline", StopCanceled: "canceled", StopRetryAfter: "retry-after"}

func (r StopReason) String() string {
	if int(r) < len(stopNames) {
		return stopNames[r]
	}
	return "unknown"
}

// end records how the call ended; i may be nil (no WithCallInfo).
func (i *CallInfo) end(attempts int, stop StopReason, err error) {
	if i == nil {
		return
	}
	i.Attempts, i.Stop = attempts, stop
	if stop == StopRejected {
		errors.As(err, &i.Rejected)
	}
}

// stopOf is the reason a call's context ended it.
func stopOf(ctxErr error) StopReason {
	if ctxErr == context.DeadlineExceeded {
		return StopDeadline
	}
	return StopCanceled
}
