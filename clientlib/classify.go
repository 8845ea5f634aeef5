package clientlib

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fusebox-dev/fusebox/sharedstate/backoff"
)

// Classification is what a Classifier says about one failed attempt.
type Classification struct {
	// Retryable: another attempt may succeed (the call's class and the
	// retry budget still decide whether one is made).
	Retryable bool
	// Failure: the error counts against the dependency's breaker. Errors
	// that are the caller's fault (most 4xx, InvalidArgument, NotFound…)
	// are not failures: the dependency answered.
	Failure bool
	// RetryAfter is the server's "not before" hint (Retry-After,
	// grpc-retry-pushback-ms): the next attempt waits at least this long,
	// and is not made when that does not fit the caller's deadline (nor,
	// without a deadline, when it is longer than the policy's backoff.max).
	RetryAfter time.Duration
	// NotCounted: the attempt says nothing about the dependency, which it
	// never reached (the caller's own rule refused to send it, as the
	// egress proxy refuses to connect to the agent's own listeners):
	// neither a success nor a failure is counted, and a probe's result is
	// not reported. Failure is then ignored; Retryable still applies.
	NotCounted bool
}

// Classifier decides what a failed attempt means. It is called with the
// non-nil error an attempt returned, only while the caller's context is
// still live (a caller that gave up ends the call without asking), and never
// for an attempt that hit its own per-attempt timeout (always retryable,
// always a failure). It must be safe for concurrent use.
type Classifier func(err error) Classification

// DefaultClassifier is the classifier of every call without WithClassifier:
//
//   - retryable failures: network errors (refused, reset, unreachable,
//     broken pipe, unexpected EOF, DNS timeouts, i/o timeouts), a
//     DeadlineExceeded (the caller's context is live, so it is the
//     attempt's), HTTP 408, 429, 502, 503, 504 (*HTTPStatusError), gRPC
//     Unavailable, ResourceExhausted, Aborted, DeadlineExceeded;
//   - failures, not retried: other HTTP 5xx, any 5xx a server's
//     deduplication replayed (HTTPStatusError.Replayed), gRPC Internal, Unknown,
//     DataLoss, errors of the breaker of a nested dependency (ErrOpen,
//     ErrForcedOpen, ErrThrottled, ErrBudgetExhausted, ErrConcurrencyLimit)
//     and any error it does not recognise;
//   - neither: other HTTP 4xx, other gRPC codes, context.Canceled.
//
// Any error wrapping ErrNotRetryable is not retried. A *RetryAfterError
// sets RetryAfter; a negative one (gRPC pushback < 0) means "do not retry".
func DefaultClassifier(err error) Classification {
	c := classifyBase(err)
	if ra, ok := errors.AsType[*RetryAfterError](err); ok {
		if ra.After < 0 {
			c.Retryable = false
		} else if ra.After > c.RetryAfter {
			c.RetryAfter = ra.After
		}
	}
	if c.Retryable && errors.Is(err, ErrNotRetryable) {
		c.Retryable = false
	}
	return c
}

func classifyBase(err error) Classification {
	if err == nil {
		return Classification{}
	}
	if errors.Is(err, ErrOpen) || errors.Is(err, ErrBudgetExhausted) || errors.Is(err, ErrConcurrencyLimit) {
		return Classification{Failure: true}
	}
	if hs, ok := errors.AsType[*HTTPStatusError](err); ok {
		c := classifyHTTPStatus(hs.StatusCode, hs.RetryAfter)
		if hs.Replayed { // a retry would get the same stored answer
			c.Retryable, c.RetryAfter = false, 0
		}
		return c
	}
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
		return classifyCode(st.Code())
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return Classification{Retryable: true, Failure: true}
	}
	if errors.Is(err, context.Canceled) {
		return Classification{}
	}
	if isNetworkError(err) {
		return Classification{Retryable: true, Failure: true}
	}
	return Classification{Failure: true}
}

func classifyHTTPStatus(code int, retryAfter time.Duration) Classification {
	switch {
	case code == http.StatusRequestTimeout, code == http.StatusTooManyRequests,
		code == http.StatusBadGateway, code == http.StatusServiceUnavailable,
		code == http.StatusGatewayTimeout:
		return Classification{Retryable: true, Failure: true, RetryAfter: retryAfter}
	case code >= 500:
		return Classification{Failure: true}
	default:
		return Classification{}
	}
}

func classifyCode(c codes.Code) Classification {
	switch c {
	case codes.Unavailable, codes.ResourceExhausted, codes.Aborted, codes.DeadlineExceeded:
		return Classification{Retryable: true, Failure: true}
	case codes.Internal, codes.Unknown, codes.DataLoss:
		return Classification{Failure: true}
	default:
		return Classification{}
	}
}

func isNetworkError(err error) bool {
	for _, errno := range [...]syscall.Errno{syscall.ECONNREFUSED, syscall.ECONNRESET,
		syscall.ECONNABORTED, syscall.EPIPE, syscall.EHOSTUNREACH, syscall.ENETUNREACH,
		syscall.ENETDOWN, syscall.ETIMEDOUT} {
		if errors.Is(err, errno) {
			return true
		}
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	if dns, ok := errors.AsType[*net.DNSError](err); ok {
		return dns.IsTimeout || dns.IsTemporary
	}
	if _, ok := errors.AsType[*net.OpError](err); ok {
		return true
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return true
	}
	// net/http reports a connection the server closed before answering as
	// a bare io.EOF inside its *url.Error.
	ue, ok := errors.AsType[*url.Error](err)
	return ok && errors.Is(ue.Err, io.EOF)
}

// HTTPStatusError is an HTTP response whose status the caller treats as an
// error. The RoundTripper produces it for statuses it may retry; attempt
// functions that call HTTP themselves can return CheckResponse(resp) to get
// the default classification of statuses.
type HTTPStatusError struct {
	StatusCode int
	Status     string
	// RetryAfter is the response's Retry-After, 0 when absent or invalid.
	RetryAfter time.Duration
	// Replayed is true when the response carries Idempotent-Replayed:
	// true (HeaderReplayed): a server's deduplication answered with the
	// stored answer of an earlier attempt under the same Idempotency-Key,
	// and would answer every retry alike. DefaultClassifier does not retry
	// it.
	Replayed bool
}

func (e *HTTPStatusError) Error() string {
	return "fusebox: http status " + cmp.Or(e.Status, strconv.Itoa(e.StatusCode))
}

// CheckResponse returns nil for a response with a status below 400 and an
// *HTTPStatusError (with Retry-After parsed) otherwise. It does not touch the
// body.
func CheckResponse(resp *http.Response) error {
	if resp == nil || resp.StatusCode < 400 {
		return nil
	}
	return statusError(resp)
}

// statusError is resp's status as an error, with its Retry-After and
// whether a server's deduplication replayed it (HeaderReplayed).
func statusError(resp *http.Response) *HTTPStatusError {
	return &HTTPStatusError{
		StatusCode: resp.StatusCode,
		Status:     resp.Status,
		RetryAfter: backoff.ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now()),
		Replayed:   resp.Header.Get(HeaderReplayed) == "true",
	}
}

// RetryAfterError carries a server's wish about the next attempt: wait at
// least After, or (After < 0) do not retry at all. The gRPC interceptor wraps
// errors in it when the response had a grpc-retry-pushback-ms trailer.
type RetryAfterError struct {
	Err   error
	After time.Duration
}

func (e *RetryAfterError) Error() string {
	if e.After < 0 {
		return e.Err.Error() + " (server asked not to retry)"
	}
	return e.Err.Error() + " (retry after " + e.After.String() + ")"
}

// Unwrap returns the wrapped error.
func (e *RetryAfterError) Unwrap() error { return e.Err }
