"""Fusebox for Python services: calls to a dependency go through the
fleet-wide breaker and retry budget of the local Fusebox agent, like the Go
clientlib's.

    import fusebox

    client = fusebox.Client()   # agent at $FUSEBOX_AGENT or unix:///run/fusebox/agent.sock
    rate = client.call("shipping-api",
                       lambda attempt: get_rate(order, timeout=attempt.timeout),
                       fusebox.IDEMPOTENT, timeout=2.0)

    # or, for HTTP with requests:
    import requests
    from fusebox.requests_adapter import FuseboxAdapter
    session = requests.Session()
    adapter = FuseboxAdapter(client)          # dependency named after host:port
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    session.get("http://shipping:8080/rates", timeout=2.0)

    client.close()

Each call:

- decides its first attempt in process, from the snapshot the agent pushed
  on the Session stream (no RPC); strict=True asks the agent (Check)
  first;
- retries only what may be repeated (IDEMPOTENT; IDEMPOTENT_WITH_KEY with
  the same Idempotency-Key on every attempt; NON_RETRYABLE, the default,
  never), each retry taking one from the fleet retry budget
  (AcquireRetry) and a half-open probe one permit (AcquireProbe); every
  question to the agent waits at most agent_wait (50 ms);
- gives each attempt the policy's per-attempt timeout under the call's
  deadline (attempt.timeout is what is left: pass it to the I/O), sleeps
  a full-jitter backoff (at least a server's Retry-After) between attempts
  and starts a retry only when it fits before the deadline;
- counts its outcome (success, failure, slow, timeout, rejection); a
  background thread sends the counts to the agent every 50 ms while there
  is traffic;
- applies the snapshot's throttle probability and this process's share of
  the concurrency limit.

Attempts carry Fusebox-Retry-Owner (the first service that retries owns
the retries: calls made inside a request that carries it, through
wsgi_middleware or retry_owner(), make one attempt), Fusebox-Timeout-Ms
and, for keyed calls, Idempotency-Key (Attempt.headers(); the requests
adapter sets them).

When the agent is away (missing, killed, restarting, or so slow that a
send blocks for 20 flush intervals) every dependency is decided by a local
breaker and a local retry budget with the last policy the agent pushed (or
the defaults), together with the last operator override pushed (until it
expires), the last concurrency share and, for one breaker window, the last
throttle probability; the client reconnects with backoff and logs one line
(logger "fusebox") when it falls back and one when it is connected again.
No call waits for the agent.

Concurrency contract: Client, Dependency and the adapter are safe to use
from any number of threads. A Client starts two daemon threads (the
flusher and the session; a third for callbacks when given), which close()
stops. Callbacks run in order on that one thread, never concurrently.
Attempt functions run on the caller's thread.
"""

from ._client import (  # noqa: F401
    HEADER_IDEMPOTENCY_KEY, HEADER_REPLAYED, HEADER_RETRY_OWNER, HEADER_TIMEOUT_MS, IDEMPOTENT, IDEMPOTENT_WITH_KEY,
    NON_RETRYABLE, VERSION, AgentEvent, Attempt, Client, Dependency, Idempotency, StateChange, Status,
    deadline, retry_owner, wsgi_middleware,
)
from ._errors import (  # noqa: F401
    BudgetExhaustedError, Classification, ConcurrencyLimitError, DeadlineExceeded, ForcedOpenError,
    FuseboxError, HTTPStatusError, InvalidDependencyError, InvalidOptionError, NotRetryable, OpenError,
    RejectedError, RetryAfter, ThrottledError, TooManyDependenciesError, default_classifier,
)
from ._policy import (  # noqa: F401
    CLOSED, FORCED_CLOSED, FORCED_OPEN, HALF_OPEN, OPEN, OVERRIDE_NONE,
)
