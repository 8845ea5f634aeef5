"""The exceptions the client raises, and the classification of the ones
attempt functions raise."""

import dataclasses
import email.utils
import errno
import http.client
import time
import urllib.error

import grpc


# On an answer a server's deduplication replayed from its store (the Go
# tree's clientlib/idempotency): the answer of an earlier attempt under the
# same Idempotency-Key, which every retry would get again.
HEADER_REPLAYED = "Idempotent-Replayed"


class FuseboxError(Exception):
    """Base of the exceptions this package raises."""


class InvalidDependencyError(FuseboxError, ValueError):
    """The dependency name is not 1-128 characters of [A-Za-z0-9._:/-]."""


class TooManyDependenciesError(FuseboxError):
    """The client already tracks max_dependencies names."""


class InvalidOptionError(FuseboxError, ValueError):
    """A call option is out of range; the attempt function was not called."""


class RejectedError(FuseboxError):
    """Fusebox refused an attempt: it was not made.

    dependency and reason ("open", "forced-open", "half-open-no-permit",
    "budget-exhausted", "throttled", "ramp" or "concurrency-limit") say which and
    why; for a refused retry, last_error is the previous attempt's exception
    (also the __cause__)."""

    message = "fusebox: rejected"
    dependency = ""
    reason = ""
    last_error = None

    def __init__(self, dependency="", reason="", last_error=None):
        super().__init__(dependency, reason)
        self.dependency, self.reason, self.last_error = dependency, reason, last_error

    def __str__(self):
        s = "%s (dependency %s, %s)" % (self.message, self.dependency, self.reason)
        if self.last_error is not None:
            s += "; last attempt: %s" % (self.last_error,)
        return s


class OpenError(RejectedError):
    """The breaker is open (fleet-wide, or this host's own), or half-open
    without a probe permit for this call."""
    message = "fusebox: breaker open"


class ForcedOpenError(OpenError):
    """An operator forced the breaker open."""
    message = "fusebox: breaker forced open"


class ThrottledError(OpenError):
    """Fleet-wide adaptive throttling (reason "throttled"), or the ramp
    after the breaker closed (reason "ramp"), refused a first attempt."""
    message = "fusebox: throttled"


class BudgetExhaustedError(RejectedError):
    """The retry budget (the fleet's, or the local one while the agent is
    away) has no room for another retry."""
    message = "fusebox: retry budget exhausted"


class ConcurrencyLimitError(RejectedError):
    """This process has its share of the fleet's in-flight limit. Not an
    OpenError: the dependency is not judged unhealthy."""
    message = "fusebox: concurrency limit reached"


REJECTIONS = {
    "open": OpenError, "half-open-no-permit": OpenError, "forced-open": ForcedOpenError,
    "throttled": ThrottledError, "ramp": ThrottledError, "budget-exhausted": BudgetExhaustedError,
    "concurrency-limit": ConcurrencyLimitError,
}


def rejection(dependency, reason, last_error=None):
    """The RejectedError subclass instance for reason."""
    return REJECTIONS.get(reason, OpenError)(dependency, reason, last_error)


class DeadlineExceeded(FuseboxError, TimeoutError):
    """The call's deadline passed, or leaves no room for another attempt.
    last_error (also the __cause__) is the last attempt's exception, if any."""

    def __init__(self, message="fusebox: deadline exceeded", last_error=None):
        super().__init__(message)
        self.last_error = last_error

    def __str__(self):
        s = self.args[0] if self.args else "fusebox: deadline exceeded"
        if self.last_error is not None:
            s += "; last attempt: %s" % (self.last_error,)
        return s


class NotRetryable(FuseboxError):
    """Raise NotRetryable(err) from an attempt to stop retries whatever err
    is; it counts as the default classifier counts err."""

    def __init__(self, error):
        super().__init__(error)
        self.error = error


class RetryAfter(FuseboxError):
    """Raise RetryAfter(err, seconds) from an attempt to make the next one
    wait at least seconds (a negative value: do not retry)."""

    def __init__(self, error, seconds):
        super().__init__(error, seconds)
        self.error, self.seconds = error, seconds


class HTTPStatusError(FuseboxError):
    """An HTTP answer whose status the caller treats as an error: 408, 429
    and 502-504 are retried (honouring retry_after), other 5xx count as
    failures, other 4xx as answers. A replayed answer (Idempotent-Replayed:
    true, a server's deduplication answering a repeated key from its store)
    is never retried: every retry would get it again."""

    def __init__(self, status, reason="", retry_after=0.0, replayed=False):
        super().__init__(status, reason)
        self.status, self.reason, self.retry_after, self.replayed = status, reason, retry_after, replayed

    def __str__(self):
        return "fusebox: http status %d %s" % (self.status, self.reason) if self.reason else \
            "fusebox: http status %d" % self.status


@dataclasses.dataclass(frozen=True)
class Classification:
    """What a classifier says about one failed attempt."""
    retryable: bool = False   # another attempt may succeed
    failure: bool = False     # counts against the breaker
    retry_after: float = 0.0  # the server's "not before" hint, seconds


_RETRYABLE_FAILURE = Classification(retryable=True, failure=True)
_FAILURE = Classification(failure=True)
_ANSWER = Classification()

_NET_ERRNOS = {errno.ECONNREFUSED, errno.ECONNRESET, errno.ECONNABORTED, errno.EPIPE,
               errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ENETDOWN, errno.ETIMEDOUT}

_RETRYABLE_CODES = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED,
                    grpc.StatusCode.ABORTED, grpc.StatusCode.DEADLINE_EXCEEDED}
_FAILURE_CODES = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.DATA_LOSS}

try:  # the requests adapter is optional
    import requests.exceptions as _rexc
except ImportError:  # pragma: no cover
    _rexc = None


def parse_retry_after(value, now=None):
    """Seconds of a Retry-After value (delay-seconds or an HTTP-date); 0
    when absent, invalid or in the past. At most a day."""
    if not value:
        return 0.0
    value = value.strip()
    if value.isdigit():
        return float(min(int(value), 86400))
    try:
        t = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return 0.0
    if t is None or t.tzinfo is None:
        return 0.0
    d = t.timestamp() - (time.time() if now is None else now)
    return min(d, 86400.0) if d > 0 else 0.0


def replayed(headers):
    """Whether the headers of an answer say a server's deduplication
    replayed it (HEADER_REPLAYED)."""
    return headers is not None and headers.get(HEADER_REPLAYED) == "true"


def classify_status(status, retry_after=0.0, replayed=False):
    if status in (408, 429, 502, 503, 504):
        if replayed:  # a retry would get the same stored answer
            return _FAILURE
        return Classification(retryable=True, failure=True, retry_after=retry_after)
    if status >= 500:
        return _FAILURE
    return _ANSWER


def _base(exc):
    if isinstance(exc, RejectedError):  # a nested dependency's breaker
        return _FAILURE
    if isinstance(exc, HTTPStatusError):
        return classify_status(exc.status, exc.retry_after, exc.replayed)
    if isinstance(exc, grpc.RpcError) and hasattr(exc, "code"):
        code = exc.code()
        if code in _RETRYABLE_CODES:
            return _RETRYABLE_FAILURE
        if code in _FAILURE_CODES:
            return _FAILURE
        return _ANSWER
    if isinstance(exc, urllib.error.HTTPError):
        return classify_status(exc.code, parse_retry_after(exc.headers.get("Retry-After") if exc.headers else None),
                               replayed(exc.headers))
    if _rexc is not None:
        if isinstance(exc, _rexc.HTTPError) and exc.response is not None:
            r = exc.response
            return classify_status(r.status_code, parse_retry_after(r.headers.get("Retry-After")), replayed(r.headers))
        if isinstance(exc, (_rexc.Timeout, _rexc.ConnectionError, _rexc.ChunkedEncodingError)):
            return _RETRYABLE_FAILURE
    if isinstance(exc, (TimeoutError, ConnectionError, http.client.IncompleteRead)):
        return _RETRYABLE_FAILURE
    if isinstance(exc, urllib.error.URLError) and isinstance(exc.reason, OSError):
        return _base(exc.reason)
    if isinstance(exc, OSError) and exc.errno in _NET_ERRNOS:
        return _RETRYABLE_FAILURE
    return _FAILURE


def default_classifier(exc):
    """The classification of every call without classifier=:

    - retryable failures: timeouts (TimeoutError, socket timeouts,
      requests' Timeout), connection errors (refused, reset, aborted, broken
      pipe, unreachable, incomplete reads), HTTP 408, 429, 502, 503, 504,
      gRPC UNAVAILABLE, RESOURCE_EXHAUSTED, ABORTED, DEADLINE_EXCEEDED;
    - failures, not retried: other HTTP 5xx, any of those statuses on an
      answer a server's deduplication replayed (Idempotent-Replayed:
      true), gRPC INTERNAL, UNKNOWN,
      DATA_LOSS, a nested dependency's refusal (RejectedError) and any
      exception it does not recognise;
    - neither (the dependency answered): other HTTP 4xx and gRPC codes.

    NotRetryable(err) is err's classification without the retry;
    RetryAfter(err, s) sets retry_after (negative: no retry)."""
    retryable, retry_after = True, 0.0
    while isinstance(exc, (NotRetryable, RetryAfter)):
        if isinstance(exc, NotRetryable):
            retryable = False
        elif exc.seconds < 0:
            retryable = False
        else:
            retry_after = max(retry_after, float(exc.seconds))
        exc = exc.error
    c = _base(exc)
    if not retryable or retry_after > c.retry_after:
        c = Classification(retryable=c.retryable and retryable, failure=c.failure,
                           retry_after=max(c.retry_after, retry_after))
    return c
