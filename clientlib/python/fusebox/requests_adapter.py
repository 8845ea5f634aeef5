"""A requests transport adapter that sends each request through Fusebox.

    import requests, fusebox
    from fusebox.requests_adapter import FuseboxAdapter

    client = fusebox.Client()
    s = requests.Session()
    s.mount("http://", FuseboxAdapter(client))
    s.mount("https://", FuseboxAdapter(client))
    r = s.get("http://shipping:8080/rates", timeout=2.0)  # 2 s for the call, retries included

Like the Go client's RoundTripper:

- the dependency is the request's host[:port] as the prepared URL spells
  it (bytes outside [A-Za-z0-9._:/-] replaced by "_", cut to 128 bytes),
  unless dependency= or dependency_func=(request -> name) says otherwise.
  requests lowercases the host and IDNA-encodes it before the adapter
  sees it, where the Go client and the proxy take the host as written:
  write hosts in lower case (or name the dependency) for callers in
  several languages to share a breaker;
- GET, HEAD, OPTIONS, TRACE, PUT and DELETE are IDEMPOTENT; POST and PATCH
  are retried only when they carry an Idempotency-Key header
  (IDEMPOTENT_WITH_KEY), or when idempotency=IDEMPOTENT_WITH_KEY is given,
  in which case the header is generated once and sent on every attempt;
  any other method, and a body that cannot be replayed (a file, a
  generator), is NON_RETRYABLE;
- statuses 408, 429, 502, 503 and 504 are retried (honouring
  Retry-After), unless the answer carries Idempotent-Replayed: true (a
  server's deduplication replaying the stored answer of an earlier attempt,
  which every retry would get again): that answer is final; 5xx count as
  failures; the bodies of failed attempts are
  read (up to 64 KiB) and closed, and when retries end the last response
  is returned as a normal response;
- each attempt carries Fusebox-Retry-Owner, Fusebox-Timeout-Ms and, when
  keyed, Idempotency-Key;
- the timeout given to requests (a number, or the sum of a (connect,
  read) pair; default the adapter's timeout=) is the call's deadline, all
  attempts included; each attempt's connect and reads get what is left of
  its per-attempt timeout.

A refused request raises a fusebox RejectedError subclass that is also a
requests.exceptions.ConnectionError (so both `except fusebox.OpenError`
and `except requests.RequestException` catch it); a deadline that leaves
no room raises fusebox.DeadlineExceeded that is also a
requests.exceptions.Timeout. The adapter never retries on its own
(max_retries is 0): one retrying layer.
"""

import threading
import urllib.parse

import requests
import requests.adapters
import requests.exceptions

from . import _client as C
from . import _errors as E

MAX_ERROR_BODY = 64 << 10

_IDEMPOTENT_METHODS = {"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE", ""}
_KEYED_METHODS = {"POST", "PATCH"}


_NAME_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:/-")


def sanitize_name(host):
    """The dependency name of calls to host[:port], as the Go client and
    the agent's egress proxy make it (sharedstate.HostDependencyName): its
    UTF-8 bytes cut to 128, each byte outside [A-Za-z0-9._:/-] replaced by
    "_"; "unknown-host" for ""."""
    if not host:
        return "unknown-host"
    return "".join(chr(b) if b in _NAME_BYTES else "_" for b in host.encode("utf-8")[:128])


def _replayable(body):
    return body is None or isinstance(body, (bytes, bytearray, str))


def request_class(request, forced=None):
    """(Idempotency, key) of a prepared request."""
    key = request.headers.get(C.HEADER_IDEMPOTENCY_KEY, "")
    if forced is not None:
        cls = forced
    else:
        m = (request.method or "").upper()
        if m in _IDEMPOTENT_METHODS:
            cls = C.IDEMPOTENT
        elif m in _KEYED_METHODS and key:
            cls = C.IDEMPOTENT_WITH_KEY
        else:
            cls = C.NON_RETRYABLE
    if cls is not C.IDEMPOTENT_WITH_KEY:
        key = ""
    if not _replayable(request.body):
        cls = C.NON_RETRYABLE
    return cls, key


_adapted_lock = threading.Lock()
_adapted = {}


def _adapt(err):
    """err as an instance of a class that is both its own and requests'."""
    base = type(err)
    rbase = requests.exceptions.Timeout if isinstance(err, E.DeadlineExceeded) else requests.exceptions.ConnectionError
    with _adapted_lock:
        cls = _adapted.get(base)
        if cls is None:
            cls = type(base.__name__, (rbase, base), {"__module__": __name__, "__str__": base.__str__})
            _adapted[base] = cls
    out = cls(str(err))
    out.__dict__.update(err.__dict__)
    return out


def _deadline_of(timeout):
    if timeout is None:
        return None
    if isinstance(timeout, tuple):
        parts = [t for t in timeout if t is not None]
        return sum(parts) if parts else None
    return float(timeout)


class FuseboxAdapter(requests.adapters.HTTPAdapter):
    """An HTTPAdapter whose requests go through client's breakers, with
    retries. Options (all optional): dependency (a fixed name),
    dependency_func (request -> name), idempotency (force a class for every
    request), timeout (the deadline of requests sent without one; default
    none), call_options (a dict of Client.call options, e.g.
    {"max_attempts": 2}); the rest are HTTPAdapter's (pool_connections,
    pool_maxsize, pool_block)."""

    def __init__(self, client, dependency=None, dependency_func=None, idempotency=None, timeout=None,
                 call_options=None, **kwargs):
        if kwargs.get("max_retries", 0) not in (0, None):
            raise ValueError("fusebox: FuseboxAdapter retries itself: max_retries must stay 0 (one retrying layer)")
        kwargs["max_retries"] = 0
        if dependency is not None and not C.P.valid_dependency_name(dependency):
            raise E.InvalidDependencyError("fusebox: invalid dependency name %r" % (dependency,))
        if idempotency is not None and not isinstance(idempotency, C.Idempotency):
            raise ValueError("fusebox: idempotency=%r: want a fusebox.Idempotency" % (idempotency,))
        super().__init__(**kwargs)
        self.client, self.dependency, self.dependency_func = client, dependency, dependency_func
        self.idempotency, self.timeout = idempotency, timeout
        self.call_options = dict(call_options or {})

    def dependency_name(self, request):
        if self.dependency_func is not None:
            return self.dependency_func(request)
        if self.dependency is not None:
            return self.dependency
        netloc = urllib.parse.urlsplit(request.url).netloc
        return sanitize_name(netloc.rpartition("@")[2])

    def send(self, request, stream=False, timeout=None, verify=True, cert=None, proxies=None):
        dep = self.client.dependency(self.dependency_name(request))
        cls, key = request_class(request, self.idempotency)
        dl = _deadline_of(timeout if timeout is not None else self.timeout)
        clock = self.client._clock
        deadline = clock() + dl if dl is not None else None
        last = []
        sender = super().send

        def attempt(a):
            r = request.copy()
            r.headers.update(a.headers())
            if last:  # a retry: the previous answer is done with
                last.pop().close()
            resp = sender(r, stream=True, timeout=a.timeout, verify=verify, cert=cert, proxies=proxies)
            last.append(resp)
            code = resp.status_code
            if code >= 500 or code in (408, 429):
                _keep_prefix(resp)
                raise E.HTTPStatusError(code, resp.reason or "", E.parse_retry_after(resp.headers.get("Retry-After")),
                                        E.replayed(resp.headers))
            return resp

        opts = dict(self.call_options)
        if key:
            opts["idempotency_key"] = key
        try:
            return dep._run(attempt, cls, deadline=deadline, **opts)
        except E.FuseboxError as err:
            if last and (deadline is None or clock() < deadline) and _answered(err):
                return last[0]  # the dependency answered: the caller gets its last answer
            if last:
                last.pop().close()
            if isinstance(err, (E.RejectedError, E.DeadlineExceeded)):
                raise _adapt(err) from err.__cause__
            raise


def _answered(err):
    """Whether err is, or follows, an HTTP status the dependency answered."""
    while err is not None:
        if isinstance(err, E.HTTPStatusError):
            return True
        err = getattr(err, "last_error", None)
    return False


def _keep_prefix(resp):
    """Read up to MAX_ERROR_BODY of a failed attempt's body, give the
    connection back (or drop it when the body was longer) and keep what was
    read as the response's content."""
    try:
        data = resp.raw.read(MAX_ERROR_BODY + 1, decode_content=True) or b""
    except Exception:  # a broken body is a broken answer: keep what there is
        data = b""
    complete = len(data) <= MAX_ERROR_BODY
    resp._content, resp._content_consumed = data[:MAX_ERROR_BODY], True
    if complete:
        resp.raw.release_conn()
    else:
        resp.raw.close()
